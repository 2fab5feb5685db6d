"""Model sync throughput and ETA accuracy: the sync job's own rsync script (progress2 through
`tr`, parsed line by line into the portal's rate window) against a bare `rsync -a` of the
same files in the same run, both from one simulated Spark to another over a fabric IP
(sparksim's ssh maps it to a real OpenSSH server on 127.0.0.x; run as root, like the tests).

    PORTAL_DEBUG=1 .venv/bin/python -m perf.model_sync [--gib 1] [--files 4] [--eta-mbps 100]

Goals (issue 27): the sync within 10% of bare rsync; after the first 10% of the bytes, the
progress bar's ETA within 15% of the real finish (judged on a --bwlimit run, as a link of
fixed speed; unlimited, this machine's loopback finishes a GiB in about a second).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

import django  # noqa: E402

django.setup()

from jobs.transports.base import sim_prefix  # noqa: E402
from jobs.weights.copy_scripts import rsync_script, ssh_command  # noqa: E402
from jobs.weights.progress import RateWindow, parse_rsync_progress  # noqa: E402
from lanes.model_files import remote_cache_repo  # noqa: E402
from sparksim.cluster import cluster_down, cluster_up  # noqa: E402
from sparksim.host.storage import seed_model  # noqa: E402
from sparksim.hub.repos import create_repo  # noqa: E402
from sparksim.standalone import free_port  # noqa: E402
from tests.jobs.sshd import client_keypair, start_sshd  # noqa: E402

MODEL = "perf/model"


def portal_copy(prefix: str, script: str, total: int) -> tuple[float, list[tuple[float, int, float | None]]]:
    """Run the sync's script as the job does; returns (seconds, [(t, done, eta)])."""
    window = RateWindow()
    samples: list[tuple[float, int, float | None]] = []
    began = time.monotonic()
    process = subprocess.Popen(["bash", "-c", prefix + "bash -s"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(script)
    process.stdin.close()
    for line in process.stdout:
        parsed = parse_rsync_progress(line.rstrip("\n"), total)
        if parsed is not None:
            window.add(parsed.done)
            samples.append((time.monotonic() - began, parsed.done, window.eta_s(parsed.done, total)))
    if process.wait() != 0:
        raise SystemExit(f"the sync's rsync failed: exit {process.returncode}")
    return time.monotonic() - began, samples


def bare_copy(prefix: str, key: Path, known: Path, port: int, source: str, destination: str, limit: str) -> float:
    began = time.monotonic()
    ssh = ssh_command(port, str(key), str(known))
    subprocess.run(["bash", "-c", f"{prefix}rsync -a {limit}-e \"{ssh}\" {source}/ {destination}/"], check=True)
    return time.monotonic() - began


def eta_error(samples: list[tuple[float, int, float | None]], total: int, finish: float) -> float | None:
    """Worst |predicted finish − real finish| / real duration over the samples after 10%."""
    errors = [abs(t + eta - finish) / finish for t, done, eta in samples if eta is not None and done >= 0.1 * total]
    return max(errors) if errors else None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--eta-mbps", type=float, default=100.0, help="rsync --bwlimit for the ETA run (MB/s)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="model-sync-"))
    try:
        run(work, args)
    finally:
        cluster_down(work / "sim")
        shutil.rmtree(work, ignore_errors=True)


def run(work: Path, args: argparse.Namespace) -> None:
    source, target = cluster_up(work / "sim", ["perf1", "perf2"], base_address="127.0.0.241")
    size = int(args.gib * 1024**3 / args.files)
    repo = create_repo(work / "hub", MODEL, {f"model-{i:05d}.safetensors": size for i in range(args.files)})
    seed_model(source, repo)
    total = repo.total_bytes()
    private, public = client_keypair(work / "keys")
    key = work / "keys" / "client_key"
    server = start_sshd(work / "sshd", target.address, free_port(target.address), public)
    known = work / "known_hosts"
    fabric = target.fabric_ip("enp1s0f0np0")
    known.write_text(f"{fabric} {server.host_key_line}\n[{fabric}]:{server.port} {server.host_key_line}\n")
    prefix = sim_prefix(source.sim_dir)
    destination_dir = Path(remote_cache_repo(target.sim_dir, MODEL))
    source_dir = f"{source.hf_home}/hub/models--perf--model"
    try:
        print(f"{total / 1024**3:.2f} GiB in {args.files} files, {source.name} → {target.name} over {fabric} "
              f"(sparksim ssh → OpenSSH on {target.address}), {os.cpu_count()} CPUs")
        portal_times, bare_times = [], []
        for _ in range(args.rounds):
            shutil.rmtree(destination_dir, ignore_errors=True)
            bare_times.append(bare_copy(prefix, key, known, server.port, source_dir, f"root@{fabric}:{destination_dir}", ""))
            shutil.rmtree(destination_dir, ignore_errors=True)
            script = rsync_script(model_id=MODEL, commit=repo.commit, key=private, host_key=server.host_key_line, user="root",
                                  address=fabric, port=server.port, target_sim_dir=target.sim_dir)
            portal_times.append(portal_copy(prefix, script, total)[0])
        bare, portal = min(bare_times), min(portal_times)
        print(f"throughput: bare rsync {total / bare / 1e6:.0f} MB/s, the sync job's rsync {total / portal / 1e6:.0f} MB/s "
              f"(best of {args.rounds}); the sync takes {100 * (portal / bare - 1):+.1f}% of bare rsync's time")
        shutil.rmtree(destination_dir, ignore_errors=True)
        script = rsync_script(model_id=MODEL, commit=repo.commit, key=private, host_key=server.host_key_line, user="root", address=fabric,
                              port=server.port, target_sim_dir=target.sim_dir, bwlimit_mbps=args.eta_mbps)
        finish, samples = portal_copy(prefix, script, total)
        worst = eta_error(samples, total, finish)
        if os.environ.get("MODEL_SYNC_SAMPLES"):
            for t, done, eta in samples:
                print(f"  t={t:5.2f}s done={100 * done / total:5.1f}% eta={eta}")
        print(f"ETA at --bwlimit {args.eta_mbps:g} MB/s: finished in {finish:.1f} s, {len(samples)} progress lines; "
              f"worst ETA error after the first 10%: {100 * worst:.1f}% of the copy's duration" if worst is not None
              else "ETA: no progress line after the first 10%")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
