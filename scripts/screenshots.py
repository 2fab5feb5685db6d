"""Screenshots for docs/guide-viewer.md, taken from the demo: starts the portal as `make run` does
(web, worker, beat, a private Redis and SQLite in a scratch directory, the simulated
3-Spark cluster), launches qwen, runs two benchmark sweeps on it (direct and through the
gateway, 1K- and 4K-token prompts), saves a new revision of it (so the lane page shows its
drift), adds a team lead, a viewer and an invited user, then photographs the dashboard, the
qwen lane, the launch job, the users page, a benchmark run and the two runs compared at
1400×900 and 390×844 with Chromium.

    .venv/bin/python scripts/screenshots.py [--out docs/screenshots]

Environment: CHROMIUM (default /usr/bin/chromium, Debian's package). The demo's simulated
Sparks use 127.0.0.11-13, as `make run` does: stop a running demo first.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from playwright.sync_api import Page, sync_playwright

ROOT = Path(__file__).resolve().parent.parent
SIZES = {"desktop": (1400, 900), "phone": (390, 844)}
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-sync",
                 "--no-first-run", "--disable-quic"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_demo(var: Path, port: int) -> tuple[subprocess.Popen[str], str, str]:
    env = {key: value for key, value in os.environ.items() if key not in ("DATABASE_URL", "REDIS_URL")}
    # Real time (as `make run`): the benchmark pages show the simulated lane's own figures.
    env.update(PORTAL_VAR_DIR=str(var), PORTAL_EMBEDDED_REDIS_PORT=str(free_port()), PORTAL_SIM_TIME_SCALE="1",
               PORTAL_REDIS_PREFIX="screenshots", PORTAL_DEBUG="1")
    proc = subprocess.Popen([sys.executable, "-m", "portal.launcher", "--port", str(port)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    assert proc.stdout is not None
    deadline = time.monotonic() + 180
    for line in proc.stdout:
        match = re.search(r"Login: (\S+) / (\S+)", line)
        if match:
            return proc, match.group(1), match.group(2)
        if time.monotonic() > deadline:
            break
    stop_demo(proc)
    raise SystemExit(f"the demo did not start: see {var}/log/")


def stop_demo(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)


def login(page: Page, base: str, username: str, password: str) -> None:
    page.goto(f"{base}/accounts/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("button[type=submit]")
    page.wait_for_selector("h1:has-text('Dashboard')")


def prepare(page: Page, base: str) -> tuple[str, list[str]]:
    """The demo as a user would leave it after a first tour; returns the launch job's URL and
    the two benchmark runs' URLs."""
    page.goto(f"{base}/lanes/qwen/")
    page.click("#lane-launch")
    page.click("[data-confirm=launch]")
    page.wait_for_url(re.compile(r".*/jobs/\d+/$"))
    job_url = page.url
    page.wait_for_selector("#job-state .state-succeeded", timeout=240_000)
    page.goto(f"{base}/lanes/qwen/")
    page.wait_for_selector("#lane-state:has-text('serving')", timeout=120_000)
    runs = [start_sweep(page, base, label, prompt) for label, prompt in (("prompt 1K", "1000"), ("prompt 4K", "4000"))]
    page.goto(f"{base}/lanes/qwen/edit/")  # a saved change the engine does not run yet
    page.click("#group-advanced summary")
    page.fill("#id_max_num_seqs", "64")
    page.click("#lane-form button[type=submit]")
    page.wait_for_url(f"{base}/lanes/qwen/")
    page.goto(f"{base}/users/")
    for username, role, password in (("lee", "team lead", "a-lead-passphrase-42"),
                                     ("vic", "viewer", "a-viewer-passphrase-42"), ("newbie", "viewer", "")):
        page.fill("#id_username", username)
        page.fill("#id_email", f"{username}@example.org")
        page.select_option("#id_role", role)
        page.fill("#id_password", password)
        page.click("#user-create button[type=submit]")
        page.wait_for_selector(f"#users tr[data-user='{username}']")
    return job_url, runs


def start_sweep(page: Page, base: str, label: str, prompt_tokens: str) -> str:
    """A sweep from the benchmarks page's form; returns its run's URL once it has finished."""
    page.goto(f"{base}/benchmarks/")
    page.fill("#id_concurrency", "1,2,4,8")
    page.fill("#id_prompt_tokens", prompt_tokens)
    page.fill("#id_output_tokens", "256")
    page.check("#id_target_gateway")
    page.fill("#id_label", label)
    page.click("#start-button")
    page.wait_for_url(re.compile(r".*/benchmarks/\d+/$"))
    url = page.url
    page.wait_for_selector("#run-state:has-text('succeeded')", timeout=300_000)
    return url


def shoot(page: Page, url: str, path: Path, ready: str) -> None:
    page.goto(url)
    page.wait_for_selector(ready, state="attached")
    page.wait_for_timeout(700)  # let live updates settle (the indicator, the tail of the log)
    page.screenshot(path=str(path))
    print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory(prefix="portal-screenshots-") as scratch:
        proc, username, password = start_demo(Path(scratch), port)
        try:
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=os.environ.get("CHROMIUM", "/usr/bin/chromium"),
                                             args=CHROMIUM_ARGS, headless=True)
                context: Any = browser.new_context(viewport={"width": 1400, "height": 900})
                page = context.new_page()
                page.set_default_timeout(30_000)
                login(page, base, username, password)
                job_url, (first_run, second_run) = prepare(page, base)
                first_id, second_id = (url.rstrip("/").rsplit("/", 1)[1] for url in (first_run, second_run))
                shots = {"dashboard": (f"{base}/", "#live-status[data-state=open]"),
                         "lane": (f"{base}/lanes/qwen/", "#live-status[data-state=open]"),
                         "job": (job_url, "#job-state .state-succeeded"),
                         "users": (f"{base}/users/", "#users"),
                         "benchmark": (second_run, "#run-state:has-text('succeeded')"),
                         "compare": (f"{base}/benchmarks/compare/?a={first_id}&b={second_id}", "#compare-table")}
                for size, (width, height) in SIZES.items():
                    page.set_viewport_size({"width": width, "height": height})
                    for name, (url, ready) in shots.items():
                        shoot(page, url, args.out / f"{name}-{size}.png", ready)
                browser.close()
        finally:
            stop_demo(proc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
