"""The demo's routing data: starter prototypes, evaluation prompts and a published v1."""

from __future__ import annotations

from typing import TextIO

from routing.router.services import starter_load


def seed_demo(out: TextIO) -> None:
    for line in starter_load():
        out.write(f"router: {line}\n")
