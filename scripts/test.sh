#!/usr/bin/env bash
# The test command: set up, then lint, type check, validate the compose file, run every test.
# Uses DATABASE_URL / REDIS_URL when set (CI: this machine's PostgreSQL and Redis), else the
# local defaults postgres://postgres@127.0.0.1:5432/test and redis://127.0.0.1:6379/0 when
# they answer, else throwaway servers it starts and removes (scripts/test-services.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/system-deps.sh
# shellcheck source=scripts/test-services.sh
. scripts/test-services.sh
compose_dir=$(mktemp -d)
trap 'stop_throwaway_services; rm -rf "$compose_dir"' EXIT
trap 'exit 130' INT TERM
settle_test_services
export PORTAL_DEBUG=1
echo "== ruff"; .venv/bin/ruff check .
echo "== mypy"; .venv/bin/mypy
echo "== docker-compose config"
# Validate offline, with .env.example standing in for the operator's .env.
cp docker-compose.yml "$compose_dir/" && cp .env.example "$compose_dir/.env"
docker-compose -f "$compose_dir/docker-compose.yml" --project-directory "$compose_dir" config -q
echo "== pytest"
.venv/bin/pytest -n "${PYTEST_WORKERS:-2}" "$@"
