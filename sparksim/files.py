"""Atomic file writes shared by every process that touches a node directory."""

import os
from pathlib import Path


def write_atomically(path: Path, text: str) -> None:
    # A per-process temporary name: the shim, engines and Ray processes write concurrently.
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(text)
    os.replace(temporary, path)
