"""serve and runagent set the interpreter's thread switch interval (PICOBOT_SWITCH_INTERVAL_MS):
with a storage thread busy, Python's 5 ms default makes the event loop wait up to 5 ms for the GIL
at every socket call (measured with bench_load)."""

from __future__ import annotations

import sys

import pytest

from conversations.management.commands._common import apply_switch_interval


@pytest.fixture
def restore_interval():
    before = sys.getswitchinterval()
    yield before
    sys.setswitchinterval(before)


def test_the_setting_becomes_the_switch_interval_and_zero_keeps_pythons(settings, restore_interval):
    settings.PICOBOT = settings.PICOBOT.replace(switch_interval_ms=2.5)
    assert apply_switch_interval() == pytest.approx(0.0025) == sys.getswitchinterval()
    settings.PICOBOT = settings.PICOBOT.replace(switch_interval_ms=0)
    assert apply_switch_interval() == pytest.approx(0.0025), "0: left as it is"


def test_the_default_is_one_millisecond(settings, restore_interval):
    from picobot_site import settings as site

    assert site.PICOBOT.switch_interval_ms == 1.0
    settings.PICOBOT = settings.PICOBOT.replace(switch_interval_ms=site.PICOBOT.switch_interval_ms)
    assert apply_switch_interval() == pytest.approx(0.001)


@pytest.mark.django_db
def test_runagent_applies_it_before_its_loop_runs(settings, restore_interval, monkeypatch):
    import asyncio

    from django.core.management import call_command

    settings.PICOBOT = settings.PICOBOT.replace(switch_interval_ms=3.0)
    seen: list[float] = []

    def fake_run(coro):  # runagent's loop: record the interval in force, run nothing
        coro.close()
        seen.append(sys.getswitchinterval())

    monkeypatch.setattr(asyncio, "run", fake_run)
    sys.setswitchinterval(0.005)
    call_command("runagent", worker_id="w-test")
    assert seen == [pytest.approx(0.003)]
