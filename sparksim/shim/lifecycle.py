"""docker logs / stop / start / kill / rm."""

import shutil
import signal
import sys
import time

from sparksim.host.node import NodeInfo
from sparksim.shim.containers import (
    Container,
    container_dir,
    is_running,
    kill_processes,
    load_container,
    now_iso,
    save_container,
    signal_group,
    spawn,
    stop_processes,
)
from sparksim.shim.options import UsageError, parse_options

FOLLOW_POLL_S = 0.05


def no_such_container(name: str) -> int:
    print(f"Error response from daemon: No such container: {name}", file=sys.stderr)
    return 1


def logs(node: NodeInfo, argv: list[str]) -> int:
    options = parse_options(argv, {"--tail": "tail", "-n": "tail", "--since": "since",
                                   "--until": "until"},
                            {"-f": "follow", "--follow": "follow", "-t": "timestamps",
                             "--timestamps": "timestamps", "--details": "details"}, "logs",
                            stop_at_positional=False)
    if len(options.rest) != 1:
        raise UsageError('"docker logs" requires exactly 1 argument.')
    container = load_container(node, options.rest[0])
    if container is None:
        return no_such_container(options.rest[0])
    tail = options.last("tail")
    lines = None if tail in (None, "all") else int(tail)
    if "follow" in options.flags:
        return follow(node, container, lines)
    sys.stdout.write(read_log(node, container, lines))
    return 0


def read_log(node: NodeInfo, container: Container, lines: int | None) -> str:
    path = container_dir(node, container.name) / "log"
    text = path.read_text(errors="replace") if path.exists() else ""
    if lines is None:
        return text
    kept = text.splitlines(keepends=True)
    return "".join(kept[-lines:]) if lines > 0 else ""


def follow(node: NodeInfo, container: Container, lines: int | None) -> int:
    """Print the log, then new output until the container's main process exits."""
    path = container_dir(node, container.name) / "log"
    sys.stdout.write(read_log(node, container, lines))
    sys.stdout.flush()
    position = path.stat().st_size if path.exists() else 0
    while True:
        running = is_running(container)
        if path.exists():
            with path.open("rb") as log:
                log.seek(position)
                chunk = log.read()
            if chunk:
                position += len(chunk)
                sys.stdout.write(chunk.decode(errors="replace"))
                sys.stdout.flush()
        if not running:
            return 0
        time.sleep(FOLLOW_POLL_S)


def stop(node: NodeInfo, argv: list[str]) -> int:
    options = parse_options(argv, {"-t": "time", "--time": "time", "-s": "signal",
                                   "--signal": "signal"}, {}, "stop", stop_at_positional=False)
    grace = float(options.last("time") or 10)
    code = 0
    for name in options.rest:
        container = load_container(node, name)
        if container is None:
            code = no_such_container(name)
            continue
        if is_running(container) or container.main_pid:
            stop_processes(node, container, grace)
            if not container.finished_at:
                container.finished_at = now_iso()
            save_container(node, container)
        print(name)
    return code


def start(node: NodeInfo, argv: list[str]) -> int:
    options = parse_options(argv, {}, {"-a": "attach", "-i": "interactive"}, "start",
                            stop_at_positional=False)
    code = 0
    for name in options.rest:
        container = load_container(node, name)
        if container is None:
            code = no_such_container(name)
            continue
        if not is_running(container) and container.command:
            container.started_at = now_iso()
            container.finished_at = ""
            container.forced_exit_code = None
            container.main_pid = spawn(node, container, container.command, main=True)
            save_container(node, container)
        print(name)
    return code


def kill(node: NodeInfo, argv: list[str]) -> int:
    options = parse_options(argv, {"-s": "signal", "--signal": "signal"}, {}, "kill",
                            stop_at_positional=False)
    signum = parse_signal(options.last("signal") or "KILL")
    code = 0
    for name in options.rest:
        container = load_container(node, name)
        if container is None or not is_running(container):
            print(f"Error response from daemon: cannot kill container: {name}: container "
                  "is not running" if container else f"Error: No such container: {name}",
                  file=sys.stderr)
            code = 1
            continue
        signal_group(container.main_pid, signum)
        print(name)
    return code


def remove(node: NodeInfo, argv: list[str]) -> int:
    options = parse_options(argv, {}, {"-f": "force", "--force": "force", "-v": "volumes",
                                       "--volumes": "volumes"}, "rm", stop_at_positional=False)
    code = 0
    for name in options.rest:
        container = load_container(node, name)
        if container is None:
            print(f"Error: No such container: {name}", file=sys.stderr)
            code = 1
            continue
        if is_running(container) and "force" not in options.flags:
            print(f'Error response from daemon: cannot remove container "/{name}": container is '
                  "running: stop the container before removing or force remove", file=sys.stderr)
            code = 1
            continue
        # -f kills every process of the container, exec'd ones included.
        kill_processes(node, container)
        shutil.rmtree(container_dir(node, name), ignore_errors=True)
        print(name)
    return code


def parse_signal(name: str) -> signal.Signals:
    name = name.upper().lstrip("-")
    if name.isdigit():
        return signal.Signals(int(name))
    return signal.Signals[name if name.startswith("SIG") else f"SIG{name}"]
