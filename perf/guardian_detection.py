"""The guardian's figures, through the real parts (sparksim engines and nodes, the launch job,
the guardian's tick every PORTAL_GUARDIAN_INTERVAL_S in a thread, as beat would run it):

1. Hangs: --hangs injected hangs (`{"hang": true}`; /health stays 200) on a serving lane, half
   with a request running (the progress rule), half idle (the canary); detection = the lane's
   state `stalled` minus the injection. Goal: p50 <= 20 s, p95 <= 30 s.
2. Leaks: --leaks launches whose engine leaks during start-up (start-ups of 50-80 simulated
   seconds at time scale 0.1, leaks of 60-80 GiB over it, so unguarded every one reaches
   MemAvailable 0 before it is up; the guard's read interval is scaled by the same 0.1); stopped = the launch failed by the memory guard and the
   node did not wedge. Goal: all of them.
3. False alarms: --minutes of a healthy lane at DeepSeek's prefill speed (2,719 tok/s) mixing
   150K-token cold prefills, bursts of 16 short requests and idle periods; every `stalled`
   is a false alarm. Goal: 0.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/guardian_bench REDIS_URL=redis://127.0.0.1:6379/3 \\
      .venv/bin/python manage.py migrate -v0
    DATABASE_URL=... REDIS_URL=... .venv/bin/python perf/guardian_detection.py [--hangs 20] [--leaks 20] [--minutes 30]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

import django  # noqa: E402

django.setup()

import httpx  # noqa: E402
from django.conf import settings  # noqa: E402
from django.contrib.auth.models import User  # noqa: E402

import jobs.services  # noqa: E402
from core.stats import percentile_nearest_rank  # noqa: E402
from guardian.services import guardian_tick  # noqa: E402
from jobs.models import Job, JobKind  # noqa: E402
from jobs.services import job_run, lane_job_create  # noqa: E402
from lanes.models import Lane, LaneNode, LaneRevision, LaneState, Node  # noqa: E402
from sparksim.cluster import cluster_down, cluster_up  # noqa: E402
from sparksim.host.faults import apply_fault  # noqa: E402
from sparksim.host.node import load_node  # noqa: E402
from sparksim.host.wedge import is_wedged  # noqa: E402
from sparksim.standalone import EngineHandle, free_port, start_engine  # noqa: E402
from tests.lanes.seed_configs import base_config  # noqa: E402

MODEL = "Qwen/Qwen3.8-27B-FP8"
TIME_SCALE = 0.1
FLOOR_GIB = 8.0  # replaced by the setting in main()
IMAGE = "img@sha256:" + "c" * 64


class Beat(threading.Thread):
    """The guardian's tick every interval, as beat and the periodic worker run it."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.stopping = threading.Event()

    def run(self) -> None:
        interval = float(settings.GUARDIAN_INTERVAL_S)
        while not self.stopping.wait(interval):
            try:
                guardian_tick()
            except Exception as exc:  # a bench keeps going; the tick is tested elsewhere
                print(f"tick failed: {exc}", file=sys.stderr)


def reset() -> None:
    Job.objects.all().delete()
    Lane.objects.all().delete()
    Node.objects.all().delete()


def serving_lane(engine: EngineHandle) -> Lane:
    node = Node.objects.create(name="bench", address=engine.host, transport="local")
    lane = Lane.objects.create(
        name="qwen",
        model_id=MODEL,
        image=IMAGE,
        api_port=engine.port,
        max_model_len=262144,
        served_model_name="qwen",
        desired_state="serving",
        observed_state="serving",
    )
    LaneNode.objects.create(lane=lane, node=node, rank=0)
    return lane


def launchable_lane(node: Node) -> Lane:
    """A lane on a sparksim node with a revision a launch can run (as tests.jobs.conftest's)."""
    cfg = base_config(
        name="qwen",
        revision=1,
        image=IMAGE,
        tensor_parallel_size=1,
        api_port=free_port(node.address),
        master_port=free_port(node.address),
        nodes=[node.name],
        model_id=MODEL,
        served_model_name="qwen",
        gpu_memory_utilization=0.5,
        max_model_len=32768,
        wait_poll_s=0.2,
        wait_timeout_s=120,
    )
    lane = Lane.objects.create(
        name="qwen",
        model_id=MODEL,
        image=IMAGE,
        executor=cfg["executor"],
        api_port=cfg["api_port"],
        master_port=cfg["master_port"],
        max_model_len=32768,
        served_model_name="qwen",
        revision=1,
    )
    LaneNode.objects.create(lane=lane, node=node, rank=0)
    LaneRevision.objects.create(lane=lane, number=1, config=cfg)
    return lane


def state() -> str:
    return Lane.objects.get(name="qwen").observed_state


def wait_state(wanted: str, timeout: float) -> float | None:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if state() == wanted:
            return time.monotonic() - started
        time.sleep(0.1)
    return None


def post(url: str, body: dict[str, object], timeout: float) -> None:
    with contextlib.suppress(httpx.HTTPError):
        httpx.post(url, json=body, timeout=timeout)


def bench_hangs(work: Path, count: int) -> list[float]:
    reset()
    settings.GUARDIAN_MEMORY_FLOOR_GIB = 0  # an engine of this machine, not a sparksim node: its /proc is ours
    engine = start_engine(MODEL, work / "hang-engine.log", "--served-model-name", "qwen", time_scale=0.1)
    serving_lane(engine)
    detected: list[float] = []
    try:
        for number in range(count):
            time.sleep(random.uniform(0, float(settings.GUARDIAN_INTERVAL_S) * 2))  # any phase of the tick
            busy = number % 2 == 0
            if busy:
                body = {"model": "qwen", "prompt": "hello", "max_tokens": 4000, "ignore_eos": True}
                threading.Thread(target=post, args=(f"{engine.url}/v1/completions", body, 120), daemon=True).start()
                time.sleep(0.5)
            httpx.post(f"{engine.url}/_sim/faults", json={"hang": True}).raise_for_status()
            seconds = wait_state(LaneState.STALLED, 120)
            print(
                f"hang {number + 1} ({'busy' if busy else 'idle'}): "
                + (f"stalled after {seconds:.1f} s" if seconds is not None else "NOT detected in 120 s"),
                flush=True,
            )
            if seconds is not None:
                detected.append(seconds)
            httpx.post(f"{engine.url}/_sim/faults", json={"clear": True}).raise_for_status()  # what hung goes on
            if wait_state(LaneState.SERVING, 120) is None:
                Lane.objects.filter(name="qwen").update(observed_state=LaneState.SERVING)
    finally:
        engine.stop()
    return detected


def bench_leaks(work: Path, count: int, user: User) -> tuple[int, int]:
    settings.GUARDIAN_MEMORY_FLOOR_GIB = FLOOR_GIB
    # Time scale 0.1 drains memory 10x faster in real time than the simulated Spark does: the
    # guard's reads are 10x closer too (the 1 s of portal.tuning on a real Spark).
    settings.GUARDIAN_MEMORY_INTERVAL_S = float(settings.GUARDIAN_MEMORY_INTERVAL_S) * TIME_SCALE
    stopped = 0
    for number in range(count):
        reset()
        root = work / f"leak{number}"
        info = cluster_up(root, ["spark3"], base_address="127.0.0.140", time_scale=TIME_SCALE)[0]
        node = Node.objects.create(
            name="spark3",
            address=info.address,
            transport="local",
            sim_dir=info.sim_dir,
            runtime_command="docker",
            memory_gib=128,
        )
        # Unguarded, each reaches MemAvailable 0 before its start-up ends (leak x start-up in 60-80 GiB
        # at gpu_memory_utilization 0.5), yet no single step (the KV pool's allocation) jumps past the floor.
        startup = random.uniform(50, 80)
        rate = random.uniform(60, 80) / startup
        apply_fault(
            load_node(info.sim_dir),
            "engine-args",
            ["--sim-startup-s", f"{startup:.0f}", "--sim-leak-gib-per-s", f"{rate:.2f}"],
        )
        lane = launchable_lane(node)
        job = lane_job_create(lane=lane, kind=JobKind.LAUNCH, user=user)
        job_run(job_id=job.pk)
        job.refresh_from_db()
        guarded = "memory guard" in job.error
        wedged = is_wedged(load_node(info.sim_dir))
        stopped += int(guarded and not wedged)
        print(
            f"leak {number + 1} ({rate:.2f} GiB/s simulated, start-up {startup:.0f} s): "
            f"{'stopped by the memory guard' if guarded else job.state}{', WEDGED' if wedged else ''}",
            flush=True,
        )
        cluster_down(root)
    return stopped, count


def mixed_step(engine: EngineHandle, kind: str) -> None:
    url = f"{engine.url}/v1/completions"
    if kind == "long prefills":  # 150K tokens cold: ~64 s without a generated token
        post(url, {"model": "qwen", "prompt": f"{random.random()} " + "word " * 150_000, "max_tokens": 8}, 300)
    elif kind == "bursts":
        body = {"model": "qwen", "prompt": f"burst {random.random()}", "max_tokens": 64}
        threads = [threading.Thread(target=post, args=(url, body, 120)) for _ in range(16)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    else:
        time.sleep(random.uniform(10, 40))


def bench_mixed(work: Path, minutes: float) -> tuple[int, dict[str, int]]:
    reset()
    settings.GUARDIAN_MEMORY_FLOOR_GIB = 0  # as in bench_hangs
    engine = start_engine(
        MODEL,
        work / "mixed-engine.log",
        "--served-model-name",
        "qwen",
        "--sim-prefill-tok-s",
        "2719",
        "--max-model-len",
        "262144",
        time_scale=1.0,
    )
    serving_lane(engine)
    done = {"long prefills": 0, "bursts": 0, "idle periods": 0}
    stalls = 0
    deadline = time.monotonic() + minutes * 60
    watching = threading.Event()

    def watch() -> None:
        nonlocal stalls
        last: str = LaneState.SERVING
        while not watching.is_set():
            now = state()
            if now == LaneState.STALLED and last != LaneState.STALLED:
                stalls += 1
                print(f"FALSE ALARM: {Lane.objects.get(name='qwen').state_reason}", flush=True)
            last = now
            time.sleep(0.2)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        while time.monotonic() < deadline:
            kind = random.choice(("long prefills", "bursts", "idle periods"))
            mixed_step(engine, kind)
            done[kind] += 1
    finally:
        watching.set()
        engine.stop()
    return stalls, done


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hangs", type=int, default=20)
    parser.add_argument("--leaks", type=int, default=20)
    parser.add_argument("--minutes", type=float, default=30.0, help="of the mixed run (false alarms)")
    args = parser.parse_args()
    global FLOOR_GIB  # noqa: PLW0603  (what the settings said, before the benches change them)
    FLOOR_GIB = float(settings.GUARDIAN_MEMORY_FLOOR_GIB)
    jobs.services.dispatch_job = lambda _job_id, _time_limit_s: None  # type: ignore[assignment]  # run in-process
    user, _ = User.objects.get_or_create(username="guardian-bench", defaults={"is_superuser": True})
    print(
        f"guardian: tick {settings.GUARDIAN_INTERVAL_S:g} s, window {settings.GUARDIAN_PROGRESS_WINDOW_S:g} s, "
        f"{settings.GUARDIAN_MISSES} misses, canary every {settings.GUARDIAN_CANARY_INTERVAL_S:g} s "
        f"({settings.GUARDIAN_CANARY_TIMEOUT_S:g} s timeout), memory floor {settings.GUARDIAN_MEMORY_FLOOR_GIB:g} GiB "
        f"read every {settings.GUARDIAN_MEMORY_INTERVAL_S:g} s; {os.cpu_count()} CPUs"
    )
    beat = Beat()
    beat.start()
    with tempfile.TemporaryDirectory() as directory:
        work = Path(directory)
        results = []
        if args.hangs:
            detected = bench_hangs(work, args.hangs)
            results.append(
                f"hangs: {len(detected)}/{args.hangs} detected; detection p50 "
                f"{percentile_nearest_rank(detected, 0.5) or 0:.1f} s, p95 "
                f"{percentile_nearest_rank(detected, 0.95) or 0:.1f} s, max {max(detected, default=0):.1f} s"
            )
        if args.leaks:
            stopped, total = bench_leaks(work, args.leaks, user)
            results.append(f"leaks during start-up: {stopped}/{total} stopped before the node wedged")
        if args.minutes:
            stalls, done = bench_mixed(work, args.minutes)
            results.append(
                f"mixed run {args.minutes:g} min ({', '.join(f'{v} {k}' for k, v in done.items())}): "
                f"{stalls} false alarm(s)"
            )
    beat.stopping.set()
    reset()
    print("\n".join(results))


if __name__ == "__main__":
    main()
