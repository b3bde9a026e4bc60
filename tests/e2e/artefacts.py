"""Artefacts of browser tests: numbered screenshots and figures, kept after the run.

``await shot(page, "answer-streaming")`` saves ``NN-answer-streaming.png`` (a full-page PNG) in
``artefact_dir()``: ``$PICOBOT_TEST_ARTEFACTS/<test-name>/`` when that variable is set, else
``<repo>/var/test-artefacts/<test-name>/`` (``var/`` is gitignored). ``<test-name>`` is the running
pytest test (from ``PYTEST_CURRENT_TEST``); the directory is emptied at the first artefact a test
writes in this process, so it holds the latest run only. Returns the path written.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
_counters: dict[Path, int] = {}


def _test_name() -> str:
    current = os.environ.get("PYTEST_CURRENT_TEST", "outside-pytest")
    name = current.split("::", 1)[-1].rsplit(" (", 1)[0]  # "file.py::test_x[param] (call)"
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-") or "test"


def artefact_dir() -> Path:
    """This test's artefact directory (created; emptied the first time in this process)."""
    base = Path(os.environ.get("PICOBOT_TEST_ARTEFACTS") or REPO / "var" / "test-artefacts")
    path = base / _test_name()
    if path not in _counters:
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True, exist_ok=True)
        _counters[path] = 0
    return path


def _next_path(name: str, suffix: str) -> Path:
    directory = artefact_dir()
    _counters[directory] += 1
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-") or "artefact"
    return directory / f"{_counters[directory]:02d}-{safe}{suffix}"


async def shot(page: Any, name: str, *, full_page: bool = True) -> Path:
    """Screenshot ``page`` as the next numbered PNG of this test."""
    path = _next_path(name, ".png")
    await page.screenshot(path=str(path), full_page=full_page)
    return path


def write_json(name: str, data: Any) -> Path:
    """Save ``data`` as the next numbered JSON file of this test (figures a test measured)."""
    path = _next_path(name, ".json")
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    return path
