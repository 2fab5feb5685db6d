"""The model download kind: the real huggingface_hub client in a container on the node (the
lane's image; nothing installed on the host), HF_TOKEN from the lane's secret env sent on
stdin (never on a command line, never logged), progress (bytes, rate, ETA) on the step,
a disk check before the first byte, and a cancel that stops the container on the node.

huggingface_hub 2.4 resumes per file: an interrupted download keeps the files it finished
and starts the one it was cut off in again (process-unique temporary files, its PR #4228)."""

from __future__ import annotations

import json
import shlex
from typing import Any

from django.conf import settings

from jobs.runner import JobCancelled, JobContext, JobFailed, JobTimedOut
from jobs.weights.progress import StepProgress, parse_download_progress
from jobs.weights.scan import refresh_inventory
from jobs.weights.stream import run_with_progress
from lanes.crypto import decrypt_secret
from lanes.model_files import HF_HOME_SHELL, cache_repo_shell, find_model, human

# Runs inside the container: the file list first (its total and the disk check), then
# snapshot_download while a thread reports the bytes in the cache's blobs every half second.
DOWNLOADER = r'''
import json, os, shutil, sys, threading, time
from huggingface_hub import HfApi, snapshot_download
from huggingface_hub.hf_api import RepoFile
from huggingface_hub.utils import filter_repo_objects
repo, revision, patterns, node = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]) or None, sys.argv[4]
files = [f for f in HfApi().list_repo_tree(repo, revision=revision, recursive=True) if isinstance(f, RepoFile)]
wanted = set(filter_repo_objects([f.path for f in files], allow_patterns=patterns))
files = [f for f in files if f.path in wanted]
total = sum(f.size for f in files)
home = os.environ.get("HF_HOME") or os.path.expanduser("~/.cache/huggingface")
blobs = os.path.join(home, "hub", "models--" + repo.replace("/", "--"), "blobs")
def done():
    names = os.listdir(blobs) if os.path.isdir(blobs) else []
    count = 0
    for f in files:
        etag = f.lfs.sha256 if f.lfs else f.blob_id
        if etag in names:
            count += f.size
        else:
            count += max([os.path.getsize(os.path.join(blobs, n)) for n in names
                          if n.startswith(etag + ".") and n.endswith(".incomplete")] or [0])
    return min(count, total)
os.makedirs(os.path.join(home, "hub"), exist_ok=True)
free = shutil.disk_usage(os.path.join(home, "hub")).free
needed = total - done()
if needed > free:
    print(f"REFUSED\t{node} has {free} bytes free, {repo} at {revision} needs {needed} more", flush=True)
    sys.exit(3)
print(f"TOTAL\t{total}\t{len(files)}", flush=True)
stop = threading.Event()
def report():
    while not stop.wait(0.5):
        print(f"PROGRESS\t{done()}\t{total}", flush=True)
threading.Thread(target=report, daemon=True).start()
path = snapshot_download(repo, revision=revision, allow_patterns=patterns)
stop.set()
print(f"PROGRESS\t{done()}\t{total}", flush=True)
print(f"SNAPSHOT\t{os.path.basename(path)}", flush=True)
'''


def container_name(job_id: int) -> str:
    return f"portal-download-{job_id}"


def download_command(runtime: str, job_id: int, image: str, model_id: str, revision: str,
                     include: list[str], node: str) -> str:
    docker = " ".join(shlex.quote(part) for part in shlex.split(runtime))
    name = shlex.quote(container_name(job_id))
    args = " ".join(shlex.quote(value) for value in (model_id, revision, json.dumps(include), node))
    return (
        'IFS= read -r HF_TOKEN; if [ -n "$HF_TOKEN" ]; then export HF_TOKEN; else unset HF_TOKEN; fi; '
        f"{docker} rm -f {name} >/dev/null 2>&1; "
        # A cut-off download's partial files: huggingface_hub names them per process, so no later
        # download resumes them; left, they would mark the model partial for ever.
        f"rm -f -- {cache_repo_shell(model_id)}/blobs/*.incomplete; "
        f"{docker} run --rm --name {name} --network host -e HF_TOKEN "
        f"-e HF_ENDPOINT={shlex.quote(settings.HF_ENDPOINT)} -e HF_HUB_DISABLE_TELEMETRY=1 "
        f"-v {HF_HOME_SHELL}:/root/.cache/huggingface {shlex.quote(image)} python3 -c {shlex.quote(DOWNLOADER)} {args}"
    )


def hf_token(ctx: JobContext) -> str:
    lane = ctx.job.lane
    token = (lane.secret_env or {}).get("HF_TOKEN") if lane is not None else None
    if not token:
        return ""
    value = decrypt_secret(str(token))
    ctx.sink.add_secrets([value])
    return value


def run_model_download(ctx: JobContext) -> dict[str, Any]:
    node = ctx.job.nodes.get()
    params = ctx.job.params
    model_id, revision, include = params["model_id"], params.get("revision") or "main", params.get("include") or []
    image = params.get("image") or (ctx.job.lane.image if ctx.job.lane else "")
    if not image:
        raise JobFailed("no image to run the download in: give one, or start the download from a lane")
    (step,) = ctx.declare_steps([(f"download.{node.name}", "download", node.name,
                                  f"Download {model_id} at {revision} onto {node.name}")])
    token = hf_token(ctx)
    endpoint = ctx.endpoint(node)
    outcome: dict[str, Any] = {}
    with ctx.step(step):
        progress = StepProgress(step, None)

        def on_line(text: str) -> bool:
            kind, _, rest = text.partition("\t")
            if kind == "PROGRESS":
                parsed = parse_download_progress(text)
                if parsed:
                    progress.update(parsed)
                return True
            if kind in ("TOTAL", "SNAPSHOT", "REFUSED"):
                outcome[kind] = rest
            return False

        command = download_command(node.runtime_command, ctx.job.pk, image, model_id, revision, include, node.name)
        try:
            result = run_with_progress(ctx, endpoint, command, on_line, stdin=token + "\n",
                                       timeout_s=float(params["time_limit_s"]))
        except (JobCancelled, JobTimedOut):
            progress.close()
            with ctx.cleanup(settings.JOBS_CANCEL_CLEANUP_S):
                docker = " ".join(shlex.quote(part) for part in shlex.split(node.runtime_command))
                ctx.run(endpoint, f"{docker} rm -f {shlex.quote(container_name(ctx.job.pk))}", timeout_s=30)
                refresh_inventory(ctx, [node])
            raise
        progress.close()
        if "REFUSED" in outcome:
            raise JobFailed(f"refused before downloading: {outcome['REFUSED']}")
        if result.exit_code != 0 or "TOTAL" not in outcome:
            raise JobFailed(f"the download on {node.name} exited {result.exit_code} (see the log)")
        # What the disk holds decides, not what the client said last.
        inventory = refresh_inventory(ctx, [node]).get(node.name, {})
        model = find_model(inventory, model_id, revision)
        if model is None or (not include and not model["complete"]):
            raise JobFailed(f"{model_id} at {revision} is not complete on {node.name} after the download: "
                            f"{(model or {}).get('problem') or 'not found in the cache'}")
        total = int(outcome["TOTAL"].split("\t")[0])
        progress.publish(f"{human(total)} ({total} bytes), snapshot {model['commit'][:12]} on {node.name}")
    return {"node": node.name, "model_id": model_id, "commit": model["commit"], "bytes": total}
