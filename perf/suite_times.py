"""Where the test suite's time goes: runs pytest on each directory given, one after the other
(never the whole suite at once on a shared machine), and sums every test's setup + call +
teardown per file from pytest's JUnit report.

    .venv/bin/python perf/suite_times.py tests/e2e tests/jobs [--workers 2] [--top 8]
        [--save times.json] [-- extra pytest arguments]

Per directory it prints the wall time of the pytest run (worker start-up, database creation
and migrations included), the summed test time, the 1-minute load average before and after,
and the slowest files. --save writes every test's time (the input of --schedule).

    .venv/bin/python perf/suite_times.py --schedule times.json [--workers 2]

replays those times through pytest-xdist's schedulers (load, worksteal) without running a
test: the time each worker ends, so an ordering that leaves one worker running alone at the
end shows. Prints figures; asserts nothing about speed."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_file(classname: str) -> str:
    """tests.e2e.test_lists(.TestClass) -> tests/e2e/test_lists.py"""
    parts = classname.split(".")
    for end in range(len(parts), 0, -1):
        candidate = Path(*parts[:end]).with_suffix(".py")
        if (ROOT / candidate).exists():
            return str(candidate)
    return classname


def junit_times(report: Path) -> list[tuple[str, str, float, str]]:
    """(file, test name, seconds, outcome) of every test case in a JUnit report."""
    cases = []
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = child.tag
        cases.append((test_file(case.get("classname", "")), case.get("name", ""), float(case.get("time", 0)), outcome))
    return cases


def run_directory(directory: str, workers: int, extra: list[str]) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "junit.xml"
        load_before = os.getloadavg()[0]
        started = time.monotonic()
        command = [str(ROOT / ".venv/bin/pytest"), "-q", "-p", "no:cacheprovider", f"--junitxml={report}",
                   "-o", "junit_duration_report=total", *(["-n", str(workers)] if workers > 1 else []),
                   directory, *extra]
        completed = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
        wall = time.monotonic() - started
        load_after = os.getloadavg()[0]
        cases = junit_times(report) if report.exists() else []
    return {"directory": directory, "wall_s": wall, "load_before": load_before, "load_after": load_after,
            "exit": completed.returncode, "tail": completed.stdout.strip().splitlines()[-1:],
            "cases": cases}


def print_directory(result: dict[str, object], top: int) -> None:
    cases: list[tuple[str, str, float, str]] = result["cases"]  # type: ignore[assignment]
    per_file: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for file, _, seconds, _ in cases:
        per_file[file] += seconds
        counts[file] += 1
    failed = [f"{file}::{name}" for file, name, _, outcome in cases if outcome in ("failure", "error")]
    print(f"{result['directory']}: {len(cases)} tests, wall {result['wall_s']:.0f} s, test time "
          f"{sum(per_file.values()):.0f} s, load {result['load_before']:.1f} -> {result['load_after']:.1f}, "
          f"exit {result['exit']} {' '.join(result['tail'])}")  # type: ignore[arg-type]
    for file, seconds in sorted(per_file.items(), key=lambda item: -item[1])[:top]:
        print(f"    {seconds:7.1f} s  {counts[file]:4d} tests  {file}")
    for name in failed:
        print(f"    FAILED {name}")


def schedule(cases: list[tuple[str, str, float]], workers: int, mode: str) -> list[float]:
    """When each worker ends, replaying xdist's `load` (batches from the front of one queue)
    or `worksteal` (contiguous halves, an idle worker takes half the rest of another's)."""
    durations = [seconds for _, _, seconds in cases]
    ends = [0.0] * workers
    if mode == "worksteal":
        size = len(durations) // workers
        queues = [durations[i * size:(i + 1) * size if i < workers - 1 else None] for i in range(workers)]
        while any(queues):
            worker = min(range(workers), key=lambda w: ends[w])
            if not queues[worker]:
                donor = max(range(workers), key=lambda w: len(queues[w]))
                keep = len(queues[donor]) - len(queues[donor]) // 2
                queues[worker], queues[donor] = queues[donor][keep:], queues[donor][:keep]
                if not queues[worker]:
                    ends[worker] = max(ends)  # nothing left to take: it waits for the others
                    continue
            ends[worker] += queues[worker].pop(0)
        return ends
    # load (xdist's LoadScheduling): a first chunk each (a quarter of a worker's share), then a
    # worker whose queue runs low is filled up to half its share of what is left
    pending = list(durations)
    first = max(len(pending) // workers // 4, 2)
    queues = [pending[i * first:(i + 1) * first] for i in range(workers)]
    pending = pending[workers * first:]
    while any(queues):
        worker = min((w for w in range(workers) if queues[w]), key=lambda w: ends[w])
        duration = queues[worker].pop(0)
        ends[worker] += duration
        if pending:
            low, high = max(2, len(pending) // workers // 4), max(2, len(pending) // workers // 2)
            if len(queues[worker]) < low and not (duration >= 0.1 and len(queues[worker]) >= 2):
                take = high - len(queues[worker])
                queues[worker].extend(pending[:take])
                pending = pending[take:]
    return ends


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("directories", nargs="*")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--top", type=int, default=8)
    parser.add_argument("--save", type=Path)
    parser.add_argument("--schedule", type=Path, help="a --save file: replay its times through xdist's schedulers")
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    args, extra = parser.parse_args(argv[:split]), argv[split + 1:]
    if args.schedule:
        saved = json.loads(args.schedule.read_text())
        # collection order: by file (a stable sort keeps each file's tests as they ran)
        cases = sorted(((case[0], case[1], case[2]) for result in saved for case in result["cases"]),
                       key=lambda case: case[0])
        print(f"{len(cases)} tests, {sum(c[2] for c in cases):.0f} s of test time")
        for mode in ("load", "worksteal"):
            ends = schedule(cases, args.workers, mode)
            print(f"  {mode:9s}: workers end at {', '.join(f'{end:.0f} s' for end in ends)}")
        return
    results = []
    for directory in args.directories:
        result = run_directory(directory, args.workers, extra)
        print_directory(result, args.top)
        sys.stdout.flush()
        results.append(result)
        if args.save:
            args.save.write_text(json.dumps(results))


if __name__ == "__main__":
    main()
