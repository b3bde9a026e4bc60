"""Fault id → the scenario that injects it and returns what it observed (``run_scenario``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.faults.catalog import Fault
from tests.faults.inprocess import PLANS
from tests.faults.invariants import Observation
from tests.faults.process import run_killed
from tests.faults.redis_outage import PLAN as REDIS_PLAN
from tests.faults.rig import Rig


def marks_for(fault: Fault) -> list[Any]:
    """The pytest marks of a fault's cells: ``e2e`` (real ``serve``), ``services`` (Redis)."""
    if fault.layer == "process":
        return [pytest.mark.e2e]
    if fault.id == "layer-redis-down":
        return [pytest.mark.services]
    return []


async def run_scenario(
    fault: Fault, *, connect: Any, start_worker: Any, monkeypatch: Any, settings: Any, tmp_path: Path
) -> Observation:
    """Run ``fault``'s scenario with the test's fixtures; raises what ended it early."""
    plans = {**PLANS, **REDIS_PLAN}
    if fault.id in plans:
        rig = Rig(plans[fault.id](), connect, start_worker, monkeypatch, settings)
        return await rig.run()
    if fault.layer == "process":
        return await run_killed(fault.id, tmp_path)
    raise NotImplementedError(fault.id)
