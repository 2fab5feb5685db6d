"""The demo's routing data: starter prototypes, evaluation prompts and a published v1
(registered in routing/apps.py; runs after the lanes' demo data, which v1 routes to)."""

from __future__ import annotations

from io import TextIOBase

from routing.services import starter_load


def seed_demo(out: TextIOBase) -> None:
    for line in starter_load():
        out.write(f"router: {line}\n")
