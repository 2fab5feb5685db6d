"""`docker exec`: Ray, vLLM, pgrep and pkill inside a container; anything else on the host."""

import os
import re
import signal
import sys

from sparksim.host.node import NodeInfo
from sparksim.shim.containers import (
    Container,
    is_running,
    load_container,
    matching_pids,
    run_foreground,
    save_container,
    spawn,
    wait_gone,
)
from sparksim.shim.lifecycle import no_such_container, parse_signal
from sparksim.shim.options import UsageError, parse_options

EXEC_VALUES = {"-e": "env", "--env": "env", "-w": "workdir", "--workdir": "workdir",
               "-u": "user", "--user": "user", "--env-file": "env-file"}
EXEC_FLAGS = {"-d": "detach", "--detach": "detach", "-i": "interactive",
              "--interactive": "interactive", "-t": "tty", "--tty": "tty",
              "--privileged": "privileged"}


def exec_command(node: NodeInfo, argv: list[str]) -> int:
    options = parse_options(argv, EXEC_VALUES, EXEC_FLAGS, "exec")
    if len(options.rest) < 2:
        raise UsageError('"docker exec" requires at least 2 arguments.\n'
                         "See 'docker exec --help'.")
    name, command = options.rest[0], options.rest[1:]
    container = load_container(node, name)
    if container is None:
        return no_such_container(name)
    if not is_running(container):
        print(f"Error response from daemon: container {container.id} is not running",
              file=sys.stderr)
        return 1
    for item in options.all("env"):
        key, _, value = item.partition("=")
        container.env[key] = value
    program = os.path.basename(command[0])
    if program == "pgrep":
        return pgrep(node, container, command[1:])
    if program == "pkill":
        return pkill(node, container, command[1:])
    if "detach" in options.flags:
        spawn(node, container, command, main=False)
        save_container(node, container)
        return 0
    return run_foreground(node, container, command)


def _pattern(arguments: list[str]) -> tuple[str, list[str]]:
    """Split pgrep/pkill arguments into the pattern and the options before it."""
    positional = [item for item in arguments if not item.startswith("-")]
    if len(positional) != 1:
        raise UsageError("pgrep: only one pattern can be provided")
    return positional[0], [item for item in arguments if item.startswith("-")]


def pgrep(node: NodeInfo, container: Container, arguments: list[str]) -> int:
    pattern, flags = _pattern(arguments)
    pids = matching_pids(node, container, pattern)
    show_command = "-a" in flags or "-l" in flags
    for pid in pids:
        print(f"{pid} {pattern}" if show_command else pid)
    return 0 if pids else 1


def pkill(node: NodeInfo, container: Container, arguments: list[str]) -> int:
    pattern, flags = _pattern(arguments)
    signum = 15
    for flag in flags:
        if flag in ("-f", "-e", "-x"):
            continue
        name = flag[1:]
        if name.startswith("-signal") or name == "-":
            continue
        if re.fullmatch(r"[A-Z0-9]+", name.upper()):
            signum = parse_signal(name)
    pids = matching_pids(node, container, pattern)
    for pid in pids:
        # Only this container's matching process: its own session may hold children too.
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            continue
    if signum == signal.SIGKILL:
        wait_gone(pids, 2.0)  # so the meminfo refresh after this command sees it gone
    return 0 if pids else 1
