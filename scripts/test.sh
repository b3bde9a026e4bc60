#!/usr/bin/env bash
# Set up (venv, requirements + test requirements) and run the whole test suite and ruff.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --test
.venv/bin/ruff check .
.venv/bin/lint-imports --no-cache
exec .venv/bin/python -m pytest "$@"
