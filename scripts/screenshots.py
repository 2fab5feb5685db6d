"""The screenshot tour (docs/tour.md), taken from the demo: starts the portal as `make run`
does (web, worker, beat, a private Redis and SQLite in a scratch directory, the simulated
3-Spark cluster), launches qwen, runs two benchmark sweeps on it (direct and through the
gateway, 1K- and 4K-token prompts), saves a new revision of it (so the lane page shows its
drift), adds a team lead, a viewer, an invited user and a team, then photographs every page
(the list in TOUR) at 1366×900 and 390×844 with Chromium as the admin, and the pages that
differ for a team lead or a viewer as them. Each PNG is reduced to a 256-colour palette
(Pillow), so the tour stays small.

    .venv/bin/python scripts/screenshots.py [--out docs/screenshots] [--tour docs/tour.md] [--only lane,job]

Environment: CHROMIUM (default /usr/bin/chromium, Debian's package). The demo's simulated
Sparks use 127.0.0.11-13, as `make run` does: stop a running demo first.
"""

from __future__ import annotations

import argparse
import contextlib
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

from PIL import Image
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import Page, sync_playwright

ROOT = Path(__file__).resolve().parent.parent
SIZES = {"desktop": (1366, 900), "phone": (390, 844)}
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
    page.goto(f"{base}/teams/")
    page.fill("#team-form [name=name]", "agents")
    page.select_option("#team-form [name=members]", label="lee")
    with page.expect_navigation():
        page.click("#team-form button[type=submit]")
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


# The tour: (file name, what it shows, the page's path; "{job}", "{run_b}",
# "{run_a_id}", "{run_b_id}" and "@<list path> <link selector>" (the first such link on that list) filled in at run time),
# in the order docs/tour.md shows them.
TOUR: list[tuple[str, str, str]] = [
    ("login", "Sign in", "/accounts/login/"),
    ("dashboard", "Dashboard", "/"),
    ("lanes", "Lanes", "/lanes/"),
    ("lane", "A lane (qwen: running r1, latest r2)", "/lanes/qwen/"),
    ("lane-form", "A lane's edit form", "/lanes/qwen/edit/"),
    ("lane-new", "A new lane", "/lanes/new/"),
    ("nodes", "Nodes", "/nodes/"),
    ("node", "A node", "/nodes/spark1/"),
    ("node-form", "A node's edit form", "/nodes/spark1/edit/"),
    ("jobs", "Jobs", "/jobs/"),
    ("job", "The launch job", "{job}"),
    ("lane-charts", "A lane's charts, with markers", "/monitor/lanes/qwen/"),
    ("node-charts", "A node's charts", "/monitor/nodes/spark1/"),
    ("alerts", "Alerts", "/monitor/alerts/"),
    ("benchmarks", "Benchmarks", "/benchmarks/"),
    ("benchmark", "A benchmark run (direct and through the gateway)", "{run_b}"),
    ("compare", "Two runs compared (1K vs 4K prompts)", "/benchmarks/compare/?a={run_a_id}&b={run_b_id}"),
    ("gateway-keys", "Gateway: API keys", "/gateway/"),
    ("gateway-figures", "Gateway: figures, with markers", "/monitor/gateway/"),
    ("usage", "Gateway: usage per key and lane", "/monitor/usage/"),
    ("requests", "Gateway: the request log", "/monitor/requests/"),
    ("request", "Gateway: one request", "@/monitor/requests/ #requests a[href^='/monitor/requests/']"),
    ("mirror", "Gateway: mirror", "/gateway/mirror/"),
    ("teams", "Teams", "/teams/"),
    ("team", "A team", "@/teams/ #teams a[href^='/teams/']"),
    ("routing", "Router: prototypes", "/routing/"),
    ("prototype", "Router: a prototype", "@/routing/ a[href^='/routing/prototypes/'][href$='/']"),
    ("eval-prompts", "Router: evaluation prompts", "/routing/eval/"),
    ("playground", "Router: playground", "/routing/playground/"),
    ("versions", "Router: versions", "/routing/versions/"),
    ("version", "Router: a version", "@/routing/versions/ a[href^='/routing/versions/'][href$='/']"),
    ("shadow", "Router: shadow", "/routing/shadow/"),
    ("outcomes", "Router: outcomes", "/routing/outcomes/"),
    ("replay", "Router: replay", "/routing/replay/"),
    ("users", "Users", "/users/"),
    ("api-docs", "The API's docs", "/api/docs"),
]
# Pages that differ for a team lead or a viewer (no actions, fewer tabs), shot as them too.
AS_ROLE = {"lead": ("lee", "a-lead-passphrase-42", ["dashboard", "lane", "routing", "teams", "team"]),
           "viewer": ("vic", "a-viewer-passphrase-42", ["dashboard", "lane", "job", "alerts"])}


def settle(page: Page) -> None:
    """Loaded, and a live page's socket open (its first state shown)."""
    page.wait_for_load_state("load")
    with contextlib.suppress(PlaywrightError):  # a page whose socket did not open is still worth its picture
        page.wait_for_function("() => { const s = document.getElementById('live-status');"
                               " return !s || !s.dataset.state || s.dataset.state === 'open'; }", timeout=15_000)
    page.wait_for_timeout(700)  # let live updates settle (the indicator, the tail of the log, charts)


def shrink(path: Path) -> None:
    """A 256-colour palette PNG: a third of the size or less for pages of flat colours and text."""
    with Image.open(path) as image:
        small = image.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    small.save(path, optimize=True)


def resolve(page: Page, base: str, path: str, fill: dict[str, str]) -> str | None:
    if not path.startswith("@"):
        return base + path.format(**fill)
    listing, selector = path[1:].split(" ", 1)
    page.goto(base + listing)
    link = page.query_selector(selector)
    return base + str(link.get_attribute("href")) if link else None


def tour(page: Page, base: str, out: Path, fill: dict[str, str], names: list[str], suffix: str = "") -> list[str]:
    """Every page in `names` at both sizes; returns the names it could not find."""
    missing = []
    urls = {}
    for name, _, path in TOUR:
        if name in names:
            url = resolve(page, base, path, fill)
            if url is None:
                missing.append(name)
            else:
                urls[name] = url
    for size, (width, height) in SIZES.items():
        page.set_viewport_size({"width": width, "height": height})
        for name, url in urls.items():
            page.goto(url)
            settle(page)
            target = out / f"{name}{suffix}-{size}.png"
            page.screenshot(path=str(target))
            shrink(target)
            print(f"wrote {target.relative_to(ROOT) if target.is_relative_to(ROOT) else target}")
    return missing


def write_tour(path: Path, shots: Path) -> None:
    """docs/tour.md: every picture the tour took, in TOUR's order (written from the list, so
    the page and the pictures never drift apart)."""
    rel = os.path.relpath(shots, path.parent)
    lines = ["# A tour of the pages", "",
             "Every page of the portal, from the demo, on a desktop (1366×900) and a phone (390×844), as the",
             "admin; the pages that differ for a team lead or a viewer follow as them. Taken by",
             "`.venv/bin/python scripts/screenshots.py` (it starts the demo in a scratch directory, launches",
             "qwen, runs two benchmark sweeps, saves a second revision, adds a team lead, a viewer, an",
             "invited user and a team, then visits each page; this file is written from its list). What",
             "each role may do: [guide-viewer.md](guide-viewer.md), [guide-team-lead.md](guide-team-lead.md),",
             "[guide-admin.md](guide-admin.md).", ""]
    titles = {name: title for name, title, _ in TOUR}
    sections = [("", "admin")] + [(f"-{role}", role.replace("lead", "team lead")) for role in AS_ROLE]
    for suffix, who in sections:
        names = [n for n, _, _ in TOUR if (shots / f"{n}{suffix}-desktop.png").exists()]
        if not names:
            continue
        lines += [f"## As {'the' if who == 'admin' else 'a'} {who}", "", "| page | desktop | phone |", "|---|---|---|"]
        for name in names:
            cells = [f"![{titles[name]}{' on a phone' if size == 'phone' else ''}]({rel}/{name}{suffix}-{size}.png)"
                     for size in SIZES]
            lines.append(f"| {titles[name]} | {' | '.join(cells)} |")
        lines.append("")
    path.write_text("\n".join(lines))
    print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    parser.add_argument("--tour", type=Path, default=ROOT / "docs" / "tour.md", help="the tour page written (not with --only)")
    parser.add_argument("--only", default="", help="comma-separated names from TOUR (default: every page)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    names = [name for name, _, _ in TOUR if not args.only or name in args.only.split(",")]
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory(prefix="portal-screenshots-") as scratch:
        proc, username, password = start_demo(Path(scratch), port)
        try:
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=os.environ.get("CHROMIUM", "/usr/bin/chromium"),
                                             args=CHROMIUM_ARGS, headless=True)
                context: Any = browser.new_context(viewport={"width": SIZES["desktop"][0], "height": SIZES["desktop"][1]})
                page = context.new_page()
                page.set_default_timeout(30_000)
                login(page, base, username, password)
                job_url, (first_run, second_run) = prepare(page, base)
                fill = {"job": job_url.removeprefix(base), "run_b": second_run.removeprefix(base),
                        "run_a_id": first_run.rstrip("/").rsplit("/", 1)[1],
                        "run_b_id": second_run.rstrip("/").rsplit("/", 1)[1]}
                missing = tour(page, base, args.out, fill, [n for n in names if n != "login"])
                context.close()
                for role, (user, secret, pages) in AS_ROLE.items():
                    context = browser.new_context(viewport={"width": SIZES["desktop"][0], "height": SIZES["desktop"][1]})
                    page = context.new_page()
                    page.set_default_timeout(30_000)
                    login(page, base, user, secret)
                    missing += tour(page, base, args.out, fill, [n for n in names if n in pages], f"-{role}")
                    context.close()
                if "login" in names:
                    context = browser.new_context()
                    missing += tour(context.new_page(), base, args.out, fill, ["login"])
                browser.close()
        finally:
            stop_demo(proc)
    if missing:
        print("not found in the demo (no picture): " + ", ".join(missing))
    if not args.only:
        write_tour(args.tour, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
