"""Container state on disk and the host processes that stand in for a container's processes.

`<sim_dir>/containers/<name>/` holds state.json, the log, one procs/<pid>.json per process
(the container's main process and every `exec -d`), and exit-<pid>.json exit codes. Every
process runs in its own session, so it outlives the shim call and the SSH session, and a
process group kill takes its children too.
"""

import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sparksim.files import write_atomically
from sparksim.host.node import NodeInfo
from sparksim.rendezvous import pid_alive

KILLED_EXIT_CODE = 137
HF_HOME_IN_CONTAINER = "/root/.cache/huggingface"


@dataclass
class Container:
    id: str
    name: str
    image: str
    image_id: str
    created: str
    started_at: str
    command: list[str]  # the logical command line, e.g. ["vllm", "serve", ...]
    env: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    mounts: list[str] = field(default_factory=list)
    options: list[str] = field(default_factory=list)
    main_pid: int = 0
    finished_at: str = ""
    forced_exit_code: int | None = None


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def image_id(image: str) -> str:
    return "sha256:" + hashlib.sha256(f"sparksim-image:{image}".encode()).hexdigest()


def containers_dir(node: NodeInfo) -> Path:
    return Path(node.sim_dir) / "containers"


def container_dir(node: NodeInfo, name: str) -> Path:
    return containers_dir(node) / name


def load_container(node: NodeInfo, name: str) -> Container | None:
    path = container_dir(node, name) / "state.json"
    if not path.is_file():
        return None
    container = Container(**json.loads(path.read_text()))
    if "rm" in container.options and container.main_pid and not is_running(container):
        # `--rm`: the container is gone once it has exited.
        shutil.rmtree(container_dir(node, name), ignore_errors=True)
        return None
    return container


def save_container(node: NodeInfo, container: Container) -> None:
    directory = container_dir(node, container.name)
    directory.mkdir(parents=True, exist_ok=True)
    write_atomically(directory / "state.json", json.dumps(asdict(container), indent=2))


def all_containers(node: NodeInfo) -> list[Container]:
    directory = containers_dir(node)
    found = []
    for child in sorted(directory.iterdir()) if directory.is_dir() else []:
        container = load_container(node, child.name)
        if container is not None:
            found.append(container)
    return found


def is_running(container: Container) -> bool:
    return container.main_pid > 0 and pid_alive(container.main_pid)


def exit_code(node: NodeInfo, container: Container) -> int:
    if container.forced_exit_code is not None:
        return container.forced_exit_code
    path = container_dir(node, container.name) / f"exit-{container.main_pid}.json"
    if path.is_file():
        return int(json.loads(path.read_text())["code"])
    return KILLED_EXIT_CODE


def sparksim_command(*arguments: str) -> list[str]:
    return [sys.executable, "-m", "sparksim", *arguments]


def host_command(node: NodeInfo, container: Container, command: list[str]) -> list[str]:
    """The host process that plays `command` inside the container."""
    directory = str(container_dir(node, container.name))
    if command[:2] == ["vllm", "serve"]:
        node_flags = [str(flag) for flag in node.faults.get("engine_args", [])]
        return sparksim_command("vllm", "serve", *command[2:], *node_flags, "--sim-node-dir",
                                node.sim_dir, "--sim-state-dir", directory)
    if command[:1] == ["ray"]:
        return sparksim_command("ray", "--node-dir", node.sim_dir, "--container",
                                container.name, *command[1:])
    if command[:1] in (["python"], ["python3"]):
        # The image's Python is the interpreter sparksim runs under (it has huggingface_hub).
        command = [sys.executable, *command[1:]]
    # Anything else runs on the host; a shell records its exit code like a container would.
    script = '"$@"; echo "{\\"code\\": $?}" > "$SPARKSIM_STATE_DIR/exit-$$.json"'
    return ["sh", "-c", script, "sh", *command]


def process_env(node: NodeInfo, container: Container) -> dict[str, str]:
    env = dict(os.environ)
    env.update(container.env)
    bin_dir = str(Path(node.sim_dir) / "bin")
    env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
    env["SPARKSIM_NODE_DIR"] = node.sim_dir
    env["SPARKSIM_STATE_DIR"] = str(container_dir(node, container.name))
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2]) + os.pathsep + env.get(
        "PYTHONPATH", "")
    env["PYTHONUNBUFFERED"] = "1"
    # The process runs on the host, so a bind mount of the Hugging Face home becomes HF_HOME
    # pointing at its source: the hub client writes into the node's cache as in the container.
    for mount in container.mounts:
        source, _, target = mount.partition(":")
        if target.split(":")[0].rstrip("/") == HF_HOME_IN_CONTAINER:
            env["HF_HOME"] = source
    return env


def spawn(node: NodeInfo, container: Container, command: list[str], main: bool) -> int:
    """Start a detached process for the container; its output goes to the container log."""
    directory = container_dir(node, container.name)
    (directory / "procs").mkdir(parents=True, exist_ok=True)
    with (directory / "log").open("ab") as log:
        process = subprocess.Popen(
            host_command(node, container, command),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=process_env(node, container),
            cwd=directory,
            start_new_session=True,
        )
    record = {"pid": process.pid, "command": command, "main": main, "started_at": now_iso()}
    write_atomically(directory / "procs" / f"{process.pid}.json", json.dumps(record))
    # The process is deliberately not waited for: it belongs to the container, not to us.
    process.returncode = 0
    return process.pid


def run_foreground(node: NodeInfo, container: Container, command: list[str]) -> int:
    """`docker exec` without -d; its process group is recorded so daemons it leaves behind
    (a non-blocking `ray start`) die with the container."""
    directory = container_dir(node, container.name)
    (directory / "procs").mkdir(parents=True, exist_ok=True)
    process = subprocess.Popen(
        host_command(node, container, command),
        env=process_env(node, container),
        cwd=directory,
        start_new_session=True,
    )
    record = {"pid": process.pid, "command": command, "main": False, "started_at": now_iso()}
    write_atomically(directory / "procs" / f"{process.pid}.json", json.dumps(record))
    return process.wait()


def processes(node: NodeInfo, container: Container, groups: bool = False) -> list[dict[str, Any]]:
    """Live processes of the container, main first.

    groups=True also keeps records whose leader exited but whose process group lives on.
    """
    directory = container_dir(node, container.name) / "procs"
    found = []
    for path in sorted(directory.glob("*.json")) if directory.is_dir() else []:
        record = json.loads(path.read_text())
        pid = int(record["pid"])
        if pid_alive(pid) or (groups and group_alive(pid)):
            found.append(record)
    found.sort(key=lambda record: not record["main"])
    return found


def group_alive(pgid: int) -> bool:
    """Whether any non-zombie process is left in the group (killpg(0) counts zombies, and
    the init here reaps them lazily)."""
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    for stat_path in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat_path.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def matching_pids(node: NodeInfo, container: Container, pattern: str) -> list[int]:
    """pgrep -f semantics over the container's processes (their logical command lines)."""
    regex = re.compile(pattern)
    return [
        int(record["pid"])
        for record in processes(node, container)
        if regex.search(" ".join(record["command"]))
    ]


def signal_group(pid: int, signum: int) -> None:
    try:
        os.killpg(pid, signum)
    except (ProcessLookupError, PermissionError):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)


def wait_gone(pids: list[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    remaining = [pid for pid in pids if pid_alive(pid) or group_alive(pid)]
    while remaining and time.monotonic() < deadline:
        time.sleep(0.02)
        remaining = [pid for pid in remaining if pid_alive(pid) or group_alive(pid)]
    return remaining


def stop_processes(node: NodeInfo, container: Container, grace_s: float) -> None:
    pids = [int(record["pid"]) for record in processes(node, container, groups=True)]
    for pid in pids:
        signal_group(pid, signal.SIGTERM)
    for pid in wait_gone(pids, grace_s):
        signal_group(pid, signal.SIGKILL)
    wait_gone(pids, 5.0)


def kill_processes(node: NodeInfo, container: Container) -> None:
    pids = [int(record["pid"]) for record in processes(node, container, groups=True)]
    for pid in pids:
        signal_group(pid, signal.SIGKILL)
    wait_gone(pids, 5.0)


def human_duration(seconds: float) -> str:
    """docker's units.HumanDuration."""
    if seconds < 1:
        return "Less than a second"
    if seconds < 60:
        return f"{int(seconds)} seconds"
    minutes = seconds / 60
    if minutes < 2:
        return "About a minute"
    if minutes < 60:
        return f"{int(minutes)} minutes"
    hours = minutes / 60
    if hours < 2:
        return "About an hour"
    if hours < 48:
        return f"{int(hours)} hours"
    return f"{int(hours / 24)} days"


def age_seconds(stamp: str) -> float:
    moment = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    return (datetime.now(UTC) - moment).total_seconds()


def status_text(node: NodeInfo, container: Container) -> str:
    if is_running(container):
        return f"Up {human_duration(age_seconds(container.started_at))}"
    finished = container.finished_at or container.started_at
    ago = human_duration(age_seconds(finished))
    return f"Exited ({exit_code(node, container)}) {ago} ago"
