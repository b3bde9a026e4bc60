#!/usr/bin/env bash
# Set up (venv, requirements, migrations) and start PicoBot: WebUI, admin, WebSocket and the agent
# worker in one process on the embedded defaults. Extra arguments go to `manage.py serve`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
.venv/bin/python manage.py migrate --noinput >/dev/null
exec .venv/bin/python manage.py serve "$@"
