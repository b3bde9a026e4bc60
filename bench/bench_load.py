"""PicoBot under load (embedded and scale-out), with the Channels and layer floors in the same run.

    .venv/bin/python bench/bench_load.py --mode embedded --dialogs 10 --repeat 1
    .venv/bin/python bench/bench_load.py --mode both --dialogs 10 100 500 --json load.json
    .venv/bin/python bench/bench_load.py --scenario idle churn --mode scaleout
    .venv/bin/python bench/bench_load.py --help

The harness lives in ``bench/load/`` (see bench/README.md, "bench_load.py").
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.load.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
