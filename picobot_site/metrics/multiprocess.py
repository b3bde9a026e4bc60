"""prometheus-client's multiprocess mode, switched by ``PICOBOT_METRICS_DIR`` (issue 17 "Metrics").

prometheus-client decides, when it is first imported, whether its values live in this process or
in memory-mapped files under ``PROMETHEUS_MULTIPROC_DIR``; ``/metrics`` then sums the files of
every process (``exposition``). :func:`configure` runs from ``picobot_site.settings``, before
anything imports prometheus-client, and only reads or writes the environment and the directory.

The directory must be emptied when a deployment starts (files of an earlier run would be summed
in); a process that exits normally removes its live gauges' files (:func:`configure` registers it).
"""

from __future__ import annotations

import atexit
import os
import sys
from pathlib import Path

ENV_NAMES = ("PROMETHEUS_MULTIPROC_DIR", "prometheus_multiproc_dir")


class MetricsDirError(Exception):
    """The metrics directory cannot be used (the message names ``PICOBOT_METRICS_DIR``)."""


def configure(directory: Path | None) -> None:
    """Point prometheus-client at ``directory`` (None: single-process values).

    ``PROMETHEUS_MULTIPROC_DIR`` follows the setting either way, so a stray environment variable
    cannot switch the mode behind it. Creates the directory when missing.

    Raises:
        MetricsDirError: the directory cannot be created or written, or prometheus-client was
            imported before the mode could be chosen.
    """
    if directory is None:
        for name in ENV_NAMES:
            os.environ.pop(name, None)
        return
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise MetricsDirError(
            f"PICOBOT_METRICS_DIR={directory}: cannot create it ({exc.strerror or exc})"
        ) from None
    if not os.access(directory, os.W_OK | os.X_OK):
        raise MetricsDirError(f"PICOBOT_METRICS_DIR={directory}: not writable by this user")
    if "prometheus_client.values" in sys.modules and os.environ.get(ENV_NAMES[0]) != str(directory):
        raise MetricsDirError(
            "PICOBOT_METRICS_DIR: prometheus_client was imported before the settings; its values "
            "would stay in this process"
        )
    os.environ[ENV_NAMES[0]] = str(directory)
    os.environ.pop(ENV_NAMES[1], None)
    atexit.register(mark_dead, os.getpid())


def mark_dead(pid: int) -> None:
    """Remove the live gauges' files of process ``pid`` (its open WebSockets stop counting)."""
    if not os.environ.get(ENV_NAMES[0]):
        return
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(pid)
