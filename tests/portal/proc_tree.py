"""The process tree as the kernel sees it (/proc/*/stat's parent pid, recursively), each
process kept with its start time, so a pid the kernel reuses is never taken for a survivor:
for the tests that check a stopped process left nothing behind."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

Proc = tuple[int, int]  # (pid, start time in clock ticks)


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, parent pid, start time) of a process, None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = text[text.rindex(")") + 2:].split()  # after "pid (comm) ": the name may hold spaces
    return fields[0], int(fields[1]), int(fields[19])


def processes() -> dict[int, tuple[str, int, int]]:
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (stat := _stat(int(entry))) is not None:
            found[int(entry)] = stat
    return found


def descendants(pid: int) -> set[Proc]:
    table = processes()
    found: set[Proc] = set()
    parents = {pid}
    while parents:
        children = {child for child, (_, ppid, _) in table.items() if ppid in parents}
        parents = {child for child in children if (child, table[child][2]) not in found}
        found |= {(child, table[child][2]) for child in children}
    return found


def running(proc: Proc) -> bool:
    """Still there and not a zombie (a zombie has exited; only its parent has not reaped it)."""
    stat = _stat(proc[0])
    return stat is not None and stat[2] == proc[1] and stat[0] != "Z"


def present(proc: Proc) -> bool:
    """Still in the process table at all, zombie or not: not reaped by its own parent."""
    stat = _stat(proc[0])
    return stat is not None and stat[2] == proc[1]


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def kill_left(children: set[Proc]) -> None:
    """After a failed test: end the processes it found left (ours: same pid, same start)."""
    for child in children:
        if running(child):
            with contextlib.suppress(ProcessLookupError):
                os.kill(child[0], signal.SIGKILL)
