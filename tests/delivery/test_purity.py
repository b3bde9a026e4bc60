"""The pure delivery modules import without Django, Channels or httpx (STYLE: dependency direction)."""

from __future__ import annotations

import subprocess
import sys

PURE = [
    "delivery.events",
    "delivery.snapshot",
    "delivery.cell",
    "delivery.turn",
    "delivery.presentation",
    "delivery.flow",
    "delivery.convergence",
    "delivery.load",
    "delivery.sinks",
    "delivery.handle",
    "delivery.coordinator",
    "delivery.outbound",
    "delivery.turn_delivery",
    "delivery.groups",
    "delivery.testing",
    "delivery.platforms.cli_chat",
]


def test_pure_modules_import_no_django_channels_or_httpx():
    code = (
        "import sys\n"
        f"for name in {PURE!r}: __import__(name)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in {'django', 'channels', 'httpx', 'httpx2'})\n"
        "assert not bad, bad\n"
    )
    env = {"PATH": "/usr/bin:/bin"}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=".", check=False
    )
    assert result.returncode == 0, result.stderr
