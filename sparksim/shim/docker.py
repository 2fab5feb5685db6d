"""`docker` for a simulated node: the commands listed in docs/runtime-contract.md."""

import json
import os
import re
import secrets
import shutil
import signal
import sys

from sparksim.host.node import NodeInfo, load_node
from sparksim.host.procfs import refresh_meminfo
from sparksim.shim import images as image_store
from sparksim.shim import lifecycle
from sparksim.shim.containers import (
    Container,
    all_containers,
    container_dir,
    exit_code,
    is_running,
    load_container,
    now_iso,
    save_container,
    signal_group,
    spawn,
    status_text,
    wait_gone,
)
from sparksim.shim.docker_exec import exec_command
from sparksim.shim.images import image_available, node_image_id
from sparksim.shim.inspect import container_document, image_document
from sparksim.shim.options import UsageError, parse_options
from sparksim.shim.templates import render

RUN_VALUES = {
    "--name": "name", "-e": "env", "--env": "env", "-v": "volume", "--volume": "volume",
    "-l": "label", "--label": "label", "--ulimit": "ulimit", "--entrypoint": "entrypoint",
    "--network": "network", "--net": "network", "--ipc": "ipc", "--gpus": "gpus",
    "--shm-size": "shm-size", "-w": "workdir", "--workdir": "workdir", "-u": "user",
    "--user": "user", "--restart": "restart", "--cpus": "cpus", "-m": "memory",
    "--memory": "memory", "--device": "device", "--cap-add": "cap-add",
    "--security-opt": "security-opt", "--env-file": "env-file", "--pid": "pid",
    "-h": "hostname", "--hostname": "hostname", "--mount": "mount", "--runtime": "runtime",
    "-p": "publish", "--publish": "publish", "--add-host": "add-host",
    "--log-driver": "log-driver", "--log-opt": "log-opt", "--platform": "platform",
    "--pull": "pull",
}
RUN_FLAGS = {
    "-d": "detach", "--detach": "detach", "--privileged": "privileged", "--rm": "rm",
    "-i": "interactive", "--interactive": "interactive", "-t": "tty", "--tty": "tty",
    "--init": "init", "--read-only": "read-only",
}


def docker_command(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] != "--node-dir":
        print("usage: python -m sparksim docker --node-dir DIR ARGS...", file=sys.stderr)
        return 2
    node = load_node(argv[1])
    args = argv[2:]
    if not args:
        print("Usage:  docker [OPTIONS] COMMAND", file=sys.stderr)
        return 0
    command, rest = args[0], args[1:]
    if command == "container" and rest:
        command, rest = rest[0], rest[1:]
    handlers = {
        "run": run, "ps": ps, "inspect": inspect, "logs": lifecycle.logs,
        "exec": exec_command, "rm": lifecycle.remove, "stop": lifecycle.stop,
        "start": lifecycle.start, "kill": lifecycle.kill, "image": image,
        "images": images, "version": version, "pull": image_store.pull, "save": image_store.save,
        "load": image_store.load, "rmi": image_store.remove,
    }
    handler = handlers.get(command)
    if handler is None:
        print(f"docker: unknown command: docker {command}\n\nRun 'docker --help' for more "
              "information", file=sys.stderr)
        return 1
    try:
        code = handler(node, rest)
    except UsageError as error:
        print(str(error), file=sys.stderr)
        return 125 if command == "run" else 1
    refresh_meminfo(node)
    return code


def run(node: NodeInfo, argv: list[str]) -> int:
    options = parse_options(argv, RUN_VALUES, RUN_FLAGS, "run")
    if not options.rest:
        raise UsageError('"docker run" requires at least 1 argument.\n'
                         "See 'docker run --help'.")
    image, command = options.rest[0], options.rest[1:]
    if not image_available(node, image):
        print(f"Unable to find image '{image}' locally", file=sys.stderr)
        print(f"docker: Error response from daemon: pull access denied for {image.split(':')[0]},"
              " repository does not exist or may require 'docker login'.", file=sys.stderr)
        return 125
    entrypoint = options.last("entrypoint")
    if entrypoint:
        command = [entrypoint, *command]
    name = options.last("name") or f"sparksim_{secrets.token_hex(4)}"
    existing = load_container(node, name)
    if existing is not None:
        print(f'docker: Error response from daemon: Conflict. The container name "/{name}" is '
              f'already in use by container "{existing.id}". You have to remove (or rename) that '
              "container to be able to reuse that name.\nSee 'docker run --help'.",
              file=sys.stderr)
        return 125
    # `-e NAME` alone passes the caller's value on (unset: not at all), as docker does.
    env = dict(key_value(item) if "=" in item else (item, os.environ[item])
               for item in options.all("env") if "=" in item or item in os.environ)
    labels = dict(key_value(item) for item in options.all("label"))
    stamp = now_iso()
    container = Container(
        id=secrets.token_hex(32), name=name, image=image, image_id=node_image_id(node, image),
        created=stamp, started_at=stamp, command=command, env=env, labels=labels,
        mounts=options.all("volume"),
        options=sorted(options.flags) + [f"{key}={value}" for key, values in
                                         options.values.items() for value in values],
    )
    save_container(node, container)
    if command:
        container.main_pid = spawn(node, container, command, main=True)
    else:
        # The image's default shell exits at once without a terminal, as in docker.
        container.forced_exit_code = 0
        container.finished_at = stamp
    save_container(node, container)
    if "detach" in options.flags:
        print(container.id)
        return 0
    return run_attached(node, container)


def run_attached(node: NodeInfo, container: Container) -> int:
    """Follow the output and return the container's exit code; signals reach the container
    (docker's --sig-proxy), and `--rm` removes it once it has exited."""

    def forward(signum: int, _frame: object) -> None:
        signal_group(container.main_pid, signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, forward)
    lifecycle.follow(node, container, None)
    code = exit_code(node, container) if container.main_pid else 0
    if "rm" in container.options:
        wait_gone([container.main_pid], 5.0)
        shutil.rmtree(container_dir(node, container.name), ignore_errors=True)
    return code


def key_value(item: str) -> tuple[str, str]:
    key, _, value = item.partition("=")
    return key, value


def ps(node: NodeInfo, argv: list[str]) -> int:
    options = parse_options(argv, {"--filter": "filter", "-f": "filter", "--format": "format",
                                   "-n": "last", "--last": "last"},
                            {"-a": "all", "--all": "all", "-q": "quiet", "--quiet": "quiet",
                             "--no-trunc": "no-trunc", "-s": "size", "-l": "latest"}, "ps",
                            stop_at_positional=False)
    rows = []
    for container in all_containers(node):
        if "all" not in options.flags and not is_running(container):
            continue
        if not matches_filters(container, options.all("filter")):
            continue
        rows.append(ps_row(node, container))
    template = options.last("format")
    if "quiet" in options.flags:
        template = "{{.ID}}"
    if template is None:
        print(f"{'CONTAINER ID':<15}{'IMAGE':<30}{'COMMAND':<25}{'STATUS':<25}NAMES")
        for row in rows:
            command = f'"{row["Command"][:20]}…"'
            print(f"{row['ID']:<15}{row['Image'][:29]:<30}{command:<25}{row['Status']:<25}"
                  f"{row['Names']}")
        return 0
    for row in rows:
        print(render(template.removeprefix("table "), row))
    return 0


def ps_row(node: NodeInfo, container: Container) -> dict[str, str]:
    return {
        "ID": container.id[:12], "Names": container.name, "Image": container.image,
        "Status": status_text(node, container), "Command": " ".join(container.command),
        "CreatedAt": container.created, "State": "running" if is_running(container) else "exited",
        "Labels": ",".join(f"{key}={value}" for key, value in container.labels.items()),
    }


def matches_filters(container: Container, filters: list[str]) -> bool:
    for item in filters:
        key, _, value = item.partition("=")
        if key == "name" and not re.search(value, container.name):
            return False
        if key == "label":
            label, has_value, wanted = value.partition("=")
            if label not in container.labels:
                return False
            if has_value and container.labels[label] != wanted:
                return False
        if key == "status":
            state = "running" if is_running(container) else "exited"
            if state != value:
                return False
    return True


def inspect(node: NodeInfo, argv: list[str]) -> int:
    options = parse_options(argv, {"--format": "format", "-f": "format", "--type": "type"},
                            {"-s": "size", "--size": "size"}, "inspect",
                            stop_at_positional=False)
    if not options.rest:
        raise UsageError('"docker inspect" requires at least 1 argument.')
    documents = []
    code = 0
    for name in options.rest:
        container = load_container(node, name)
        if container is not None and options.last("type") != "image":
            documents.append(container_document(node, container))
        elif image_available(node, name) and options.last("type") == "image":
            documents.append(image_document(name, node_image_id(node, name)))
        else:
            print(f"Error: No such object: {name}", file=sys.stderr)
            code = 1
    emit_documents(documents, options.last("format"))
    return code


def emit_documents(documents: list[dict[str, object]], template: str | None) -> None:
    if template is None:
        print(json.dumps(documents, indent=4))
        return
    for document in documents:
        print(render(template, document))


def image(node: NodeInfo, argv: list[str]) -> int:
    commands = {"ls": images, "pull": image_store.pull, "save": image_store.save, "load": image_store.load,
                "rm": image_store.remove}
    if not argv or argv[0] not in ("inspect", *commands):
        raise UsageError("Usage:  docker image COMMAND (inspect, ls, pull, save, load, rm)")
    if argv[0] in commands:
        return commands[argv[0]](node, argv[1:])
    options = parse_options(argv[1:], {"--format": "format", "-f": "format"}, {}, "image inspect",
                            stop_at_positional=False)
    documents = []
    code = 0
    for name in options.rest:
        if image_available(node, name):
            documents.append(image_document(name, node_image_id(node, name)))
        else:
            print(f"Error: No such image: {name}", file=sys.stderr)
            code = 1
    if documents or options.last("format") is None:
        emit_documents(documents, options.last("format"))
    return code


def images(node: NodeInfo, argv: list[str]) -> int:
    """Images pulled, loaded or used by a container here (`--format` as docker: .Repository,
    .Tag, .ID, .Digest)."""
    options = parse_options(argv, {"--format": "format"}, {"--no-trunc": "no-trunc", "-q": "quiet",
                                                          "--digests": "digests"}, "images")
    seen = {container.image for container in all_containers(node)} | set(image_store.image_store(node))
    rows = []
    for name in sorted(item for item in seen if image_available(node, item)):
        repository, at, digest = name.partition("@")
        repository, _, tag = repository.rpartition(":") if ":" in repository.rsplit("/", 1)[-1] else (
            repository, "", "")
        ident = node_image_id(node, name)
        rows.append({"Repository": repository, "Tag": tag or ("<none>" if at else "latest"),
                     "ID": ident if "no-trunc" in options.flags else ident[7:19], "Digest": digest or "<none>",
                     "Reference": name})
    template = options.last("format")
    if template:
        for row in rows:
            print(render(template, row))
        return 0
    print(f"{'REPOSITORY':<40}{'TAG':<20}IMAGE ID")
    for row in rows:
        print(f"{row['Repository']:<40}{row['Tag']:<20}{row['ID']}")
    return 0


def version(node: NodeInfo, argv: list[str]) -> int:  # noqa: ARG001 (every docker command takes its node)
    data = {"Client": {"Version": "27.3.1"}, "Server": {"Version": "27.3.1"}}
    options = parse_options(argv, {"--format": "format", "-f": "format"}, {}, "version")
    template = options.last("format")
    print(render(template, data) if template else "Client: Docker Engine - Community\n"
          " Version:           27.3.1\nServer: Docker Engine - Community\n Engine:\n"
          "  Version:          27.3.1")
    return 0
