"""Model files on the nodes: where a node's Hugging Face cache is, the names that may reach
a shell (checked, then quoted), and what a node's inventory says about a model or image.

The cache is huggingface_hub's: `<HF home>/hub/models--<org>--<name>/` with `blobs/`,
`snapshots/<commit>/` (links to the blobs), `refs/<branch>` and `trees/<commit>.json` (the
hub's file list with sizes and LFS sha256, which huggingface_hub 2.4 writes on download).
On a Spark the HF home is the SSH user's `~/.cache/huggingface` (what a launch mounts into
the container); a simulated node's transport exports SPARK_HF_HOME (docs/runtime-contract.md).

Pure functions: the inventory is a dict saved on the node (`Node.inventory`) by the jobs
that read the disk (jobs/weights/)."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping
from typing import Any

HF_HOME_SHELL = '"${SPARK_HF_HOME:-$HOME/.cache/huggingface}"'
REAL_HF_HOME = ".cache/huggingface"  # relative to the SSH user's home, as rsync reads a remote path
MODEL_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
REVISION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
COMMIT = re.compile(r"^[0-9a-f]{40}$")
FILE_PATH = re.compile(r"^[A-Za-z0-9._-][A-Za-z0-9._/ -]{0,499}$")
PATTERN = re.compile(r"^[A-Za-z0-9._*?\[\]/-]{1,200}$")


SCANNER = r'''
import json, os, sys
hub = os.path.join(sys.argv[1], "hub")
models = []
for folder in sorted(os.listdir(hub)) if os.path.isdir(hub) else []:
    if not folder.startswith("models--"):
        continue
    repo = os.path.join(hub, folder)
    model_id = folder[len("models--"):].replace("--", "/", 1)
    refs = {}
    for base, _, names in os.walk(os.path.join(repo, "refs")):
        for name in names:
            path = os.path.join(base, name)
            refs[os.path.relpath(path, os.path.join(repo, "refs"))] = open(path).read().strip()
    blobs = os.path.join(repo, "blobs")
    cut = sum(1 for n in os.listdir(blobs) if n.endswith(".incomplete")) if os.path.isdir(blobs) else 0
    snaps = os.path.join(repo, "snapshots")
    for commit in sorted(os.listdir(snaps)) if os.path.isdir(snaps) else []:
        snap = os.path.join(snaps, commit)
        have = {}
        for base, _, names in os.walk(snap):
            for name in names:
                path = os.path.join(base, name)
                if os.path.exists(path):
                    have[os.path.relpath(path, snap)] = os.path.getsize(path)
        tree_path = os.path.join(repo, "trees", commit + ".json")
        tree = None
        if os.path.isfile(tree_path):
            try:
                tree = {p: e["size"] for p, e in json.load(open(tree_path))["files"].items()}
            except (ValueError, KeyError, TypeError):
                tree = None
        models.append({"model_id": model_id, "commit": commit, "refs": sorted(r for r, c in refs.items() if c == commit),
                       "have": have, "tree": tree, "incomplete_blobs": cut})
print("MODELS\t" + json.dumps(models))
'''


def inventory_script(images: Iterable[str], docker: str = "docker") -> str:
    """The bash a node runs to read its inventory (no argument reaches it unquoted): the HF
    cache's models (jobs/weights/scan.py parses them), free disk, and each image's Id and
    registry digests."""
    lines = [f"h={HF_HOME_SHELL}", f"python3 -c {shlex.quote(SCANNER)} \"$h\" || echo 'SCANFAIL'",
             "printf 'DF\\t%s\\n' \"$(df -PB1 \"$h\" 2>/dev/null | tail -n 1)\""]
    for image in sorted(set(images)):
        word = shlex.quote(image)
        lines.append(f"printf 'IMAGE\\t%s\\t%s\\n' {word} \"$({docker} image inspect --format '{{{{.Id}}}} {{{{json .RepoDigests}}}}' {word} "
                     "2>/dev/null)\"")
    return "\n".join(lines) + "\n"


def model_id_error(value: object) -> str:
    """'' when `value` is a hub model id (org/name, no `..`), else the rule it breaks."""
    text = str(value)
    if not MODEL_ID.match(text) or ".." in text:
        return "must be a Hugging Face model id: org/name, letters, digits, '.', '_' and '-'"
    return ""


def revision_error(value: object) -> str:
    text = str(value)
    if not REVISION.match(text) or ".." in text:
        return "must be a branch, tag or 40-character commit: letters, digits, '.', '_' and '-'"
    return ""


def file_path_error(value: object) -> str:
    """A path inside a snapshot: relative, no `..` part, nothing a shell would read."""
    text = str(value)
    if not FILE_PATH.match(text) or any(part in ("", "..", ".") for part in text.split("/")):
        return "must be a relative path inside the model (no '..', no leading '/')"
    return ""


def repo_folder(model_id: str) -> str:
    """`models--org--name`, the only directory under the cache a job touches for a model."""
    problem = model_id_error(model_id)
    if problem:
        raise ValueError(f"model id {model_id!r} {problem}")
    return "models--" + model_id.replace("/", "--")


def cache_repo_shell(model_id: str) -> str:
    """The model's directory as a shell word: the HF home (expanded on the node) + the
    checked folder name, quoted."""
    return f"{HF_HOME_SHELL}/hub/{shlex.quote(repo_folder(model_id))}"


def remote_cache_repo(sim_dir: str, model_id: str) -> str:
    """The same directory as a remote rsync path (no shell expansion on that side)."""
    home = f"{sim_dir.rstrip('/')}/hf" if sim_dir else REAL_HF_HOME
    return f"{home}/hub/{repo_folder(model_id)}"


def wanted_revision(revision: str) -> str:
    return revision or "main"


# ---------------------------------------------------------------- what the inventory says
def find_model(inventory: Mapping[str, Any], model_id: str, revision: str) -> dict[str, Any] | None:
    """The inventory's snapshot of this model at this revision (a commit, or a ref name)."""
    want = wanted_revision(revision)
    for model in inventory.get("models") or []:
        if model.get("model_id") != model_id:
            continue
        if model.get("commit") == want or want in (model.get("refs") or []):
            return dict(model)
    return None


def model_presence(inventory: Mapping[str, Any], model_id: str, revision: str) -> tuple[str, str]:
    """(state, words): state is complete, partial, missing or unknown (never read)."""
    if not inventory:
        return "unknown", "not inventoried yet"
    model = find_model(inventory, model_id, revision)
    if model is None:
        return "missing", f"no snapshot of {model_id} at {wanted_revision(revision)}"
    if model.get("complete"):
        return "complete", f"{model['files']} files, {human(model['bytes'])}"
    return "partial", str(model.get("problem") or "incomplete")


def image_presence(inventory: Mapping[str, Any], image: str) -> tuple[str, str]:
    if not inventory:
        return "unknown", "not inventoried yet"
    for item in inventory.get("images") or []:
        if item.get("reference") == image:
            return "present", str(item.get("id", ""))[:19]
    return "missing", "not on this node"


def human(count: object) -> str:
    value = float(count) if isinstance(count, int | float) else 0.0
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


# The launch preflight's check, run by the node's python3 (stdlib only; DGX OS has it).
WEIGHTS_CHECK = """import json, os, sys
repo, want, label = sys.argv[1:4]
ref = os.path.join(repo, "refs", want)
commit = open(ref).read().strip() if os.path.isfile(ref) else want
snap = os.path.join(repo, "snapshots", commit)
if not os.path.isdir(snap):
    sys.exit(f"missing: {label} is not in {repo} (the lane page's Sync weights copies it from a node that holds it)")
tree = os.path.join(repo, "trees", commit + ".json")
files = json.load(open(tree))["files"] if os.path.isfile(tree) else {}
bad = [p for p, e in files.items() if not os.path.isfile(os.path.join(snap, p))
       or os.path.getsize(os.path.join(snap, p)) != e["size"]]
if bad:
    sys.exit(f"partial: {label} lacks {len(bad)} of {len(files)} files (or their sizes differ): {', '.join(bad[:5])}")
blobs = os.path.join(repo, "blobs")
if any(n.endswith(".incomplete") for n in os.listdir(blobs)) if os.path.isdir(blobs) else False:
    sys.exit(f"partial: {label} has a download in progress or cut off")
print(f"{label}: snapshot {commit[:12]}, {len(files)} files match the hub's list")
"""


def weights_check_command(model_id: str, revision: str) -> str:
    """The launch preflight on one rank: the revision resolves to a snapshot that holds every
    file of the hub's list at its size, and no download is half done; else it names what is
    missing and exits 1."""
    label = f"{model_id} at {wanted_revision(revision)}"
    problem = model_id_error(model_id) or (revision_error(revision) if revision else "")
    if problem:
        # The refused value itself stays out of the command (it never reaches a shell).
        return f"echo {shlex.quote(f'missing: the lane model id or revision {problem}')} >&2; exit 1"
    return (f"python3 -c {shlex.quote(WEIGHTS_CHECK)} {cache_repo_shell(model_id)} "
            f"{shlex.quote(wanted_revision(revision))} {shlex.quote(label)}")


def node_files_view(inventory: Mapping[str, Any]) -> dict[str, Any]:
    """What the node page shows of an inventory."""
    models = [dict(model, size=human(model.get("bytes")), expected=human(model.get("expected_bytes"))
                   if model.get("expected_bytes") is not None else "?") for model in inventory.get("models") or []]
    free, disk = inventory.get("free_bytes"), inventory.get("disk_bytes")
    images = [dict(image, digest_words=image_digest_words(image), undigested=image.get("digests") == [])
              for image in inventory.get("images") or []]
    return {"models": models, "images": images, "checked_at": inventory.get("checked_at"),
            "free": human(free) if free is not None else "?", "disk": human(disk) if disk is not None else "?",
            "errors": list(inventory.get("errors") or []), "read": bool(inventory)}


def image_digest_words(image: Mapping[str, Any]) -> str:
    digests = image.get("digests")
    if digests is None:
        return ""  # read before digests were recorded
    if not digests:
        return "no registry digest (loaded from a file or built here): a lane pinned by digest will not find it"
    return "registry digests: " + ", ".join(str(d) for d in digests)


def lane_files_rows(model_id: str, revision: str, image: str,
                    nodes: list[tuple[str, Mapping[str, Any]]]) -> list[dict[str, str]]:
    """Per rank of a lane: does it hold the model (at the lane's revision) and the image."""
    rows = []
    for name, inventory in nodes:
        model_state, model_words = model_presence(inventory, model_id, revision)
        image_state, image_words = image_presence(inventory, image)
        rows.append({"node": name, "model": model_state, "model_words": model_words,
                     "image": image_state, "image_words": image_words})
    return rows
