#!/usr/bin/env bash
# Create .venv (if needed), install the pinned requirements and fetch the WebUI's Markdown libraries
# (pinned npm tarballs, verified; nothing is downloaded when static/vendor/ is intact).
# Usage: scripts/setup.sh [--test]
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
req=requirements.txt
[ "${1:-}" = "--test" ] && req=requirements-test.txt
.venv/bin/python -m pip install --quiet --disable-pip-version-check -r "$req"
.venv/bin/python scripts/fetch_webui_assets.py
