"""`docker inspect` documents, shaped like docker's so Go templates find the usual fields."""

from pathlib import Path
from typing import Any

from sparksim.host.node import NodeInfo
from sparksim.shim.containers import Container, container_dir, exit_code, is_running

ZERO_TIME = "0001-01-01T00:00:00Z"


def finished_at(node: NodeInfo, container: Container) -> str:
    if is_running(container):
        return ZERO_TIME
    if container.finished_at:
        return container.finished_at
    exit_file = container_dir(node, container.name) / f"exit-{container.main_pid}.json"
    if exit_file.exists():
        from datetime import UTC, datetime

        moment = datetime.fromtimestamp(exit_file.stat().st_mtime, UTC)
        return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return container.started_at


def container_document(node: NodeInfo, container: Container) -> dict[str, Any]:
    running = is_running(container)
    command = container.command
    return {
        "Id": container.id,
        "Created": container.created,
        "Path": command[0] if command else "",
        "Args": command[1:],
        "State": {
            "Status": "running" if running else "exited",
            "Running": running,
            "Paused": False,
            "Restarting": False,
            "OOMKilled": False,
            "Dead": False,
            "Pid": container.main_pid if running else 0,
            "ExitCode": 0 if running else exit_code(node, container),
            "Error": "",
            "StartedAt": container.started_at,
            "FinishedAt": finished_at(node, container),
        },
        "Image": container.image_id,
        "Name": f"/{container.name}",
        "LogPath": str(Path(node.sim_dir) / "containers" / container.name / "log"),
        "Config": {
            "Hostname": node.name,
            "Image": container.image,
            "Env": [f"{key}={value}" for key, value in container.env.items()],
            "Cmd": command,
            "Labels": container.labels,
        },
        "HostConfig": {"Binds": container.mounts, "NetworkMode": "host"},
        "Mounts": [
            {"Type": "bind", "Source": mount.split(":")[0],
             "Destination": mount.split(":")[1] if ":" in mount else mount}
            for mount in container.mounts
        ],
    }


def image_document(name: str, image_id: str) -> dict[str, Any]:
    repository, _, tag = name.partition("@")[0].partition(":")
    return {
        "Id": image_id,
        "RepoTags": [f"{repository}:{tag or 'latest'}"],
        "RepoDigests": [f"{repository}@sha256:{image_id[7:]}"],
        "Architecture": "arm64",
        "Os": "linux",
        "Size": 24_137_921_536,
    }
