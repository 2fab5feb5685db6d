#!/usr/bin/env bash
# The test command: set up, then lint, type check, validate the compose file, run every test.
# Uses DATABASE_URL / REDIS_URL when set (CI: this machine's PostgreSQL and Redis), else the
# local defaults postgres://postgres@127.0.0.1:5432/test and redis://127.0.0.1:6379/0.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/system-deps.sh
export DATABASE_URL=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test}
export REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379/0}
export PORTAL_DEBUG=1
echo "== ruff"; .venv/bin/ruff check .
echo "== mypy"; .venv/bin/mypy
echo "== docker-compose config"; docker-compose -f docker-compose.yml --env-file .env.example config -q
echo "== pytest"
.venv/bin/pytest -n "${PYTEST_WORKERS:-2}" "$@"
