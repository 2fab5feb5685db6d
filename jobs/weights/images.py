"""The image sync kind: put the lane's image on the target nodes, either pulled on each from
its registry or copied from a source node (`docker save | ssh target docker load`, the
same transfer key and pinned host keys as a model sync), then verified: every target shows
the source's image Id (or, pulled, the same Id on every node)."""

from __future__ import annotations

import shlex
from typing import Any

from jobs.runner import JobContext, JobFailed
from jobs.transports.base import sim_prefix
from jobs.weights.copy_scripts import ssh_command
from jobs.weights.scan import docker_words, refresh_inventory
from jobs.weights.sync import copy_address, transfer_key
from lanes.models import Node


def image_id(ctx: JobContext, node: Node, image: str) -> str:
    result = ctx.run(ctx.endpoint(node), f"{docker_words(node)} image inspect --format '{{{{.Id}}}}' "
                     f"{shlex.quote(image)}", capture=True, timeout_s=60)
    value = (result.stdout or [""])[-1].strip()
    return value if result.exit_code == 0 and value.startswith("sha256:") else ""


def save_load_script(source: Node, target: Node, image: str, key: str, address: str) -> str:
    # The far side runs in the target's login shell: its docker (and, simulated, its PATH).
    remote = sim_prefix(target.sim_dir) + f"{docker_words(target)} load"
    known = f"{address} {target.ssh_host_key.strip()}\n[{address}]:{int(target.ssh_port)} {target.ssh_host_key.strip()}\n"
    return "\n".join([
        "set -o pipefail", "umask 077", 'k=$(mktemp); kh=$(mktemp); trap \'rm -f "$k" "$kh"\' EXIT',
        f"printf '%s\\n' {shlex.quote(key.strip())} > \"$k\"", f"printf '%s' {shlex.quote(known)} > \"$kh\"",
        f"{docker_words(source)} save {shlex.quote(image)} | {ssh_command(target.ssh_port)} "
        f"{shlex.quote(f'{target.ssh_user}@{address}')} {shlex.quote(remote)}", "",
    ])


def run_image_sync(ctx: JobContext) -> dict[str, Any]:
    params = ctx.job.params
    image, network = params["image"], params.get("network") or "fabric"
    by_name = {node.name: node for node in ctx.job.nodes.all()}
    names = list(params.get("nodes") or [])
    source = by_name[params["source"]] if params.get("source") else None
    targets = [by_name[name] for name in names if source is None or name != source.name]
    steps = ctx.declare_steps([(f"image.{t.name}", "copy", t.name, f"{'copy' if source else 'pull'} {image} "
                                f"{'from ' + source.name + ' ' if source else ''}onto {t.name}") for t in targets])
    want = ""
    if source is not None:
        want = image_id(ctx, source, image)
        if not want:
            raise JobFailed(f"{source.name} does not hold {image}: it cannot be the source")
        key = transfer_key(source)
    found: dict[str, str] = {}
    for target, step in zip(targets, steps, strict=True):
        with ctx.step(step):
            if source is None:
                ctx.run(ctx.endpoint(target), f"{docker_words(target)} pull {shlex.quote(image)}", timeout_s=3600)
            else:
                if not target.ssh_host_key.strip():
                    raise JobFailed(f"{target.name} has no pinned SSH host key: pin it before copying to it")
                address = copy_address(target, network)
                result = ctx.run(ctx.endpoint(source), "bash -s",
                                 stdin=save_load_script(source, target, image, key, address), timeout_s=3600)
                if result.exit_code != 0:
                    raise JobFailed(f"docker save | docker load from {source.name} to {target.name} exited "
                                    f"{result.exit_code}")
            found[target.name] = image_id(ctx, target, image)
            if not found[target.name] and source is not None and "@sha256:" in image:
                raise JobFailed(f"{target.name} loaded the image but does not know it by its digest: Docker's "
                                "classic image store drops registry digests on `docker load`, so a lane pinned by "
                                "digest would not find it there; pull it on each node instead (no source node)")
            if not found[target.name] or (want and found[target.name] != want):
                raise JobFailed(f"{target.name}: image Id {found[target.name] or 'none'} after the copy, "
                                f"expected {want or 'an image'}")
            step.detail = f"Id {found[target.name][:19]}…"
    if not want and len(set(found.values())) > 1:
        raise JobFailed("the pulled image Id differs between nodes: "
                        + ", ".join(f"{n} {i[:19]}" for n, i in sorted(found.items())))
    refresh_inventory(ctx, [*([source] if source else []), *targets])
    return {"image": image, "ids": found, "source": source.name if source else None}
