"""The README's "Reliability" matrix is the harness's (``catalog.matrix_table``), and each of its
cells names a test that exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.faults import test_matrix
from tests.faults.catalog import (
    FAULTS,
    INVARIANTS,
    TABLE_END,
    TABLE_START,
    cell_id,
    cell_test_id,
    main,
    matrix_table,
    with_matrix_table,
)

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_readme_matrix_is_the_harness_matrix():
    text = README.read_text(encoding="utf-8")
    assert with_matrix_table(text) == text, (
        "the README's fault matrix is stale: run `python -m tests.faults.catalog --write README.md`"
    )
    assert text.count(TABLE_START) == 1 and matrix_table() in text


def test_every_cell_of_the_readme_names_one_parametrised_test():
    shown = re.findall(r"\| ([A-Z]\d+\.\d+)(?= \|)", matrix_table())
    assert len(shown) == len(FAULTS) * len(INVARIANTS)
    [parametrize] = [mark for mark in test_matrix.test_cell.pytestmark if mark.name == "parametrize"]
    parametrised = {param.id for param in parametrize.args[1]}
    assert parametrised == {cell_id(f, i) for f in FAULTS for i in INVARIANTS}
    named = {cell_test_id(short).split("[", 1)[1].rstrip("]") for short in shown}
    assert named == parametrised


def test_write_refuses_a_readme_without_markers(tmp_path: Path):
    readme = tmp_path / "README.md"
    readme.write_text("# no table here\n", encoding="utf-8")
    with pytest.raises(SystemExit) as exited:
        main(["--write", str(readme)])
    assert exited.value.code == 2
    readme.write_text(f"before\n{TABLE_START}\nold\n{TABLE_END}\nafter\n", encoding="utf-8")
    main(["--write", str(readme)])
    assert (
        readme.read_text(encoding="utf-8") == f"before\n{TABLE_START}\n{matrix_table()}{TABLE_END}\nafter\n"
    )
