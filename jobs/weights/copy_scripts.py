"""The shell a sync sends to the nodes, built from checked names and quoted words only.

- `rsync_script`: runs on the source node over `bash -s`; the transfer key and the target's
  pinned host key go into 0600 temporary files that the script removes on exit (they travel
  on stdin, never on a command line or in the log); only the copied revision travels (its
  snapshot, the blobs it links to, its file list and the refs that name it: a cache that
  holds several revisions would otherwise send them all, past the disk check and the
  progress bar's total); rsync `--partial` so a cancelled copy resumes; `--info=progress2`
  with its carriage returns turned into lines.
- `verify_script`: runs on a target: every file of the hub's list at its size and with the
  hub's hash (sha256 for LFS files, the git blob sha1 for the others)."""

from __future__ import annotations

import shlex

from lanes.model_files import HF_HOME_SHELL, cache_repo_shell, remote_cache_repo

VERIFIER = r'''
import hashlib, json, os, sys
repo, commit = sys.argv[1], sys.argv[2]
files = json.load(open(os.path.join(repo, "trees", commit + ".json")))["files"]
snap = os.path.join(repo, "snapshots", commit)
bad = 0
for path, entry in sorted(files.items()):
    full = os.path.join(snap, path)
    if not os.path.isfile(full):
        print(f"BAD\t{path}\tmissing"); bad += 1; continue
    size = os.path.getsize(full)
    if size != entry["size"]:
        print(f"BAD\t{path}\tsize {size}, the hub says {entry['size']}"); bad += 1; continue
    if entry.get("lfs_sha256"):
        digest, want = hashlib.sha256(), entry["lfs_sha256"]
    else:
        digest, want = hashlib.sha1(f"blob {size}\0".encode()), entry["blob_id"]
    with open(full, "rb") as handle:
        while chunk := handle.read(8 << 20):
            digest.update(chunk)
    if digest.hexdigest() != want:
        print(f"BAD\t{path}\tcontent differs from the hub's hash"); bad += 1
print(f"CHECKED\t{len(files)}\t{bad}")
'''


# Runs on the source: the paths (relative to the model's cache folder) of one revision.
LISTER = r'''
import os, sys
repo, commit = sys.argv[1], sys.argv[2]
real = os.path.realpath(repo)
out = set()
if os.path.isfile(os.path.join(repo, "trees", commit + ".json")):
    out.add(os.path.join("trees", commit + ".json"))
for base, _, names in os.walk(os.path.join(repo, "refs")):
    for name in names:
        path = os.path.join(base, name)
        if open(path).read().strip() == commit:
            out.add(os.path.relpath(path, repo))
for base, _, names in os.walk(os.path.join(repo, "snapshots", commit)):
    for name in names:
        path = os.path.join(base, name)
        out.add(os.path.relpath(path, repo))
        target = os.path.realpath(path)
        if os.path.islink(path) and target.startswith(real + os.sep):
            out.add(os.path.relpath(target, real))
if not any(p.startswith("snapshots" + os.sep) for p in out):
    sys.exit("no snapshot " + commit + " in " + repo)
print("\n".join(sorted(out)))
'''


def ssh_command(port: int, key_var: str = "$k", hosts_var: str = "$kh") -> str:
    return (f"ssh -i {key_var} -p {int(port)} -o UserKnownHostsFile={hosts_var} -o StrictHostKeyChecking=yes "
            "-o BatchMode=yes -o IdentitiesOnly=yes -o ConnectTimeout=10")


def rsync_script(*, model_id: str, commit: str, key: str, host_key: str, user: str, address: str, port: int,
                 target_sim_dir: str, bwlimit_mbps: float | None = None) -> str:
    source = cache_repo_shell(model_id)
    destination = shlex.quote(f"{user}@{address}:{remote_cache_repo(target_sim_dir, model_id)}/")
    known = f"{address} {host_key}\n[{address}]:{int(port)} {host_key}\n"
    limit = f"--bwlimit={int(bwlimit_mbps * 1000)} " if bwlimit_mbps else ""
    return "\n".join([
        "set -o pipefail",
        "umask 077",
        'k=$(mktemp); kh=$(mktemp); l=$(mktemp); trap \'rm -f "$k" "$kh" "$l"\' EXIT',
        f"printf '%s\\n' {shlex.quote(key.strip())} > \"$k\"",
        f"printf '%s' {shlex.quote(known)} > \"$kh\"",
        f'python3 -c {shlex.quote(LISTER)} {source} {shlex.quote(commit)} > "$l" || exit 1',
        f'rsync -a --partial {limit}--info=progress2 --no-inc-recursive --files-from="$l" '
        f'-e "{ssh_command(port)}" {source}/ {destination} 2>&1 | stdbuf -oL tr "\\r" "\\n"',
        "",
    ])


def target_prepare_command(model_id: str) -> str:
    """On the target, before rsync: the cache's hub directory exists (rsync makes the model's)."""
    return f"mkdir -p {HF_HOME_SHELL}/hub && test -w {HF_HOME_SHELL}/hub && echo {shlex.quote(model_id)} ready"


def verify_command(model_id: str, commit: str) -> str:
    return f"python3 -c {shlex.quote(VERIFIER)} {cache_repo_shell(model_id)} {shlex.quote(commit)}"


def parse_verify(lines: list[str]) -> tuple[int, list[str]]:
    """(files checked, problems): problems name each bad file and why."""
    checked, problems = -1, []
    for line in lines:
        parts = line.split("\t")
        if parts[0] == "BAD" and len(parts) >= 3:
            problems.append(f"{parts[1]}: {parts[2]}")
        elif parts[0] == "CHECKED" and len(parts) >= 2 and parts[1].isdigit():
            checked = int(parts[1])
    if checked < 0:
        problems.append("the verification did not finish")
    return checked, problems
