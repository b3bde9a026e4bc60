"""The fault × invariant matrix (issue 16): one test per cell, one scenario run per fault.

The first cell of a fault runs its scenario (``scenarios.run_scenario``) and keeps the
:class:`~tests.faults.invariants.Observation` (or the error that ended the run) for the module;
every cell then asserts its invariant on it. Selecting one cell (``-k``) runs its scenario too.
The README's "Reliability" table lists these ids (``catalog.matrix_table``).
"""

from __future__ import annotations

import os

import pytest

from tests.faults.catalog import FAULTS, INVARIANTS, Fault, Invariant, cell_id
from tests.faults.invariants import CHECKS, Observation
from tests.faults.rig import dumps
from tests.faults.scenarios import marks_for, run_scenario

pytestmark = [pytest.mark.django_db(transaction=True)]

_observed: dict[str, Observation | BaseException] = {}


@pytest.mark.parametrize(
    ("fault", "invariant"),
    [
        pytest.param(fault, invariant, id=cell_id(fault, invariant), marks=marks_for(fault))
        for fault in FAULTS
        for invariant in INVARIANTS
    ],
)
async def test_cell(
    fault: Fault, invariant: Invariant, connect, start_worker, monkeypatch, settings, tmp_path
) -> None:
    if fault.id not in _observed:
        try:
            fixtures = {"connect": connect, "start_worker": start_worker, "monkeypatch": monkeypatch}
            _observed[fault.id] = await run_scenario(fault, settings=settings, tmp_path=tmp_path, **fixtures)
        except Exception as exc:  # noqa: BLE001 - every cell of the fault reports it
            _observed[fault.id] = exc
    observed = _observed[fault.id]
    if os.environ.get("FAULTS_DUMP"):
        print("\nOBS", fault.id, dumps(observed) if isinstance(observed, Observation) else repr(observed))
    if isinstance(observed, BaseException):
        raise AssertionError(f"the {fault.id} scenario did not run to its end: {observed!r}") from observed
    CHECKS[invariant.id](observed)
