"""The lane health watcher's cost and speed, through the real parts.

1. Probe tick: one watcher tick (lanes.watcher.lanes_watch_tick, as the periodic worker runs
   it) over 50 serving lanes on sparksim engines (5 engines, each serving 10 lanes' names),
   healthy; then with 10 of them dead (connection refused); p50/p95 over --ticks ticks.
2. Death → page: web (uvicorn), the periodic worker and beat as processes; Chromium on the
   lane's page; the engine behind the lane is killed (-9) --kills times; the delay is the
   moment the page's badge turns `failed` (a MutationObserver stamps it) minus the kill.
   Expected: about interval × failures (the failing probes) + up to one interval (phase).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/watcher_bench REDIS_URL=redis://127.0.0.1:6379/3 \\
      .venv/bin/python manage.py migrate -v0
    DATABASE_URL=... REDIS_URL=... .venv/bin/python perf/lane_watcher.py [--interval 10] [--kills 20]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

import django  # noqa: E402

django.setup()

from django.contrib.auth.models import User  # noqa: E402

from core.http import http_client  # noqa: E402
from core.stats import percentile_nearest_rank  # noqa: E402
from lanes.models import Lane, LaneNode, Node  # noqa: E402
from lanes.watcher import lanes_watch_tick  # noqa: E402
from sparksim.standalone import EngineHandle, free_port, start_engine  # noqa: E402

MODEL = "Qwen/Qwen3.8-27B-FP8"
IMAGE = "img@sha256:" + "b" * 64
PASSWORD = "bench-password-1234"


def reset_database(sim_dir: Path) -> Node:
    Lane.objects.all().delete()
    Node.objects.all().delete()
    (sim_dir / "node.json").write_text("{}")
    return Node.objects.create(name="bench1", address="127.0.0.1", transport="local", sim_dir=str(sim_dir),
                               state="online")


def add_lane(node: Node, name: str, port: int) -> Lane:
    lane = Lane.objects.create(name=name, model_id=MODEL, image=IMAGE, api_port=port, max_model_len=32768,
                               served_model_name=name, desired_state="serving", observed_state="serving")
    LaneNode.objects.create(lane=lane, node=node, rank=0)
    return lane


def bench_ticks(work: Path, ticks: int) -> None:
    node = reset_database(work)
    engines: list[EngineHandle] = []
    try:
        for e in range(5):
            names = [f"lane{e * 10 + i:02d}" for i in range(10)]
            flags = [flag for name in names for flag in ("--served-model-name", name)]
            engines.append(start_engine(MODEL, work / f"engine{e}.log", *flags))
        for e, engine in enumerate(engines):
            for i in range(10):
                add_lane(node, f"lane{e * 10 + i:02d}", engine.port)
        for label in ("50 healthy lanes", "50 lanes, 10 dead (refused)"):
            if label.startswith("50 lanes, 10"):
                engines[0].stop()
                Lane.objects.update(observed_state="serving", health_failures=0)
            probe, total = [], []
            for _ in range(ticks):
                if label.startswith("50 lanes, 10"):  # keep them counted as serving lanes being probed
                    Lane.objects.update(observed_state="serving", health_failures=0)
                report = lanes_watch_tick()
                assert report.lanes == 50, report
                probe.append(report.probe_s * 1000)
                total.append(report.total_s * 1000)
            print(f"tick, {label}: probes p50 {percentile_nearest_rank(probe, .5):.1f} ms "
                  f"p95 {percentile_nearest_rank(probe, .95):.1f} ms; whole tick (probes + database) "
                  f"p50 {percentile_nearest_rank(total, .5):.1f} ms p95 {percentile_nearest_rank(total, .95):.1f} ms")
    finally:
        for engine in engines:
            engine.stop()


def wait_healthy(base: str) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            with http_client(timeout=2) as client:
                if client.get(f"{base}/healthz").status_code == 200:
                    return
        except Exception:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.3)


class Processes:
    def __init__(self, work: Path, env: dict[str, str]) -> None:
        self.work, self.env, self.procs = work, env, []  # type: ignore[var-annotated]

    def start(self, name: str, argv: list[str]) -> None:
        self.procs.append(subprocess.Popen([sys.executable, *argv], cwd=ROOT, env=self.env, start_new_session=True,
                                           stdout=(self.work / f"{name}.log").open("wb"), stderr=subprocess.STDOUT))

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


def bench_death_to_page(work: Path, kills: int, interval: float, failures: int) -> None:
    from playwright.sync_api import sync_playwright

    node = reset_database(work)
    port = free_port("127.0.0.1")
    add_lane(node, "victim", port)
    User.objects.filter(username="bench").delete()
    User.objects.create_superuser("bench", password=PASSWORD)
    web_port = free_port("127.0.0.1")
    env = dict(os.environ, PORTAL_LANES_WATCH_INTERVAL_S=str(interval), PORTAL_LANES_WATCH_FAILURES=str(failures),
               PYTHONUNBUFFERED="1")
    procs = Processes(work, env)
    procs.start("web", ["-m", "uvicorn", "portal.asgi:application", "--port", str(web_port), "--lifespan", "off",
                        "--no-access-log"])
    procs.start("periodic-worker", ["-m", "portal.workers", "periodic"])
    procs.start("beat", ["-m", "celery", "-A", "portal", "beat", "-s", str(work / "beat-schedule")])
    engine = start_engine(MODEL, work / "victim.log", "--served-model-name", "victim", port=port)
    delays: list[float] = []
    try:
        base = f"http://127.0.0.1:{web_port}"
        wait_healthy(base)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"], headless=True)
            page = browser.new_page()
            page.set_default_timeout(max(120_000, int(interval * failures * 4000)))
            page.goto(f"{base}/accounts/login/")
            page.fill("#id_username", "bench")
            page.fill("#id_password", PASSWORD)
            page.click("button[type=submit]")
            page.goto(f"{base}/lanes/victim/")
            page.wait_for_selector("#live-status[data-state=open]")
            page.evaluate("""() => { window.__failedAt = null;
                new MutationObserver(() => { const b = document.getElementById('lane-state');
                  if (b.textContent === 'failed' && window.__failedAt === null) { window.__failedAt = Date.now(); }
                }).observe(document.getElementById('lane-state'), {childList: true, characterData: true, subtree: true});
            }""")
            for n in range(kills):
                page.wait_for_selector("#lane-state.state-serving")
                time.sleep(interval * (n % 5) / 5)  # spread the kills over the tick's phase
                page.evaluate("window.__failedAt = null")
                killed_at = time.time() * 1000
                engine.process.kill()
                engine.process.wait()
                page.wait_for_function("window.__failedAt !== null")
                delays.append((page.evaluate("window.__failedAt") - killed_at) / 1000)
                print(f"kill {n + 1}: failed on the page after {delays[-1]:.2f} s", flush=True)
                engine = start_engine(MODEL, work / "victim.log", "--served-model-name", "victim", port=port)
            browser.close()
    finally:
        engine.stop()
        procs.stop()
    print(f"death → page ({kills} kills, interval {interval:g} s, {failures} failed probes): "
          f"p50 {percentile_nearest_rank(delays, .5):.2f} s, p95 {percentile_nearest_rank(delays, .95):.2f} s, "
          f"min {min(delays):.2f} s, max {max(delays):.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ticks", type=int, default=20)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--interval", type=float, default=10.0)
    parser.add_argument("--failures", type=int, default=2)
    parser.add_argument("--skip-ticks", action="store_true")
    parser.add_argument("--skip-kills", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        print(f"load average before: {os.getloadavg()[0]:.1f}")
        if not args.skip_ticks:
            bench_ticks(work, args.ticks)
        if not args.skip_kills:
            bench_death_to_page(work, args.kills, args.interval, args.failures)
        print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
