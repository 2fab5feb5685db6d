#!/usr/bin/env bash
# The run command: set up, then start web + worker + beat (+ embedded Redis) and print the login.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/python -m portal.launcher "$@"
