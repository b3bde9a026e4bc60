#!/usr/bin/env bash
# Set up (venv, requirements + test requirements) and run ruff (lint and format), the import
# contracts and the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --test
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/lint-imports --no-cache
exec .venv/bin/python -m pytest "$@"
