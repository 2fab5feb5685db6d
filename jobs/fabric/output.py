"""What the fabric tools print, read back, and what the portal prints from it. Pure
functions: perftest's latency and bandwidth tables, nccl-tests' table with NCCL's INFO
lines, and seed 003's full-mesh latency matrix (rendered and parsed), with the verdicts."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any


class ToolOutputError(ValueError):
    """The tool ran but its output holds no result table (it says why, in its own words)."""


LATENCY_TESTS = ("ib_write_lat", "ib_read_lat", "ib_send_lat")
MATRIX_TITLES = {"ib_write_lat": "write", "ib_read_lat": "read", "ib_send_lat": "send"}

# Average latency (us) per test: above `warn` the cell is amber, above `fail` red. Seed 003
# measured write 2.93-3.49, read 5.64-6.34, send 2.55-3.44 on a clean fabric; 12 us is the
# seed's watchdog threshold, the point where a lane goes degraded.
LATENCY_THRESHOLDS_US: dict[str, tuple[float, float]] = {
    "ib_write_lat": (5.0, 12.0),
    "ib_read_lat": (9.0, 18.0),
    "ib_send_lat": (5.0, 12.0),
}
# One 200G cable (two PCIe halves): the playbooks' minimum is 175 Gb/s (21.875 GB/s).
MIN_BUSBW_GBPS = 175.0
MIN_CABLE_GBPS = 175.0


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("---")]
    return lines[-1] if lines else "no output"


@dataclass(frozen=True)
class Latency:
    bytes: int
    iterations: int
    t_min: float
    t_max: float
    t_typical: float
    t_avg: float
    t_stdev: float
    p99: float
    p999: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_latency(text: str) -> Latency:
    """perftest's latency table: a header starting ` #bytes #iterations` then one row."""
    lines = text.splitlines()
    for index, line in enumerate(lines):
        if line.strip().startswith("#bytes") and "t_avg[usec]" in line:
            columns = line.split()
            for row in lines[index + 1 :]:
                values = row.split()
                if len(values) >= 8 and values[0].isdigit():
                    named = dict(zip(columns, values, strict=False))
                    try:
                        return Latency(
                            bytes=int(values[0]), iterations=int(values[1]),
                            t_min=float(named["t_min[usec]"]), t_max=float(named["t_max[usec]"]),
                            t_typical=float(named["t_typical[usec]"]), t_avg=float(named["t_avg[usec]"]),
                            t_stdev=float(named["t_stdev[usec]"]), p99=float(values[7]),
                            p999=float(values[8]) if len(values) > 8 else float(values[7]),
                        )
                    except (KeyError, ValueError) as exc:
                        raise ToolOutputError(f"unreadable latency row {row.strip()!r}") from exc
    raise ToolOutputError(f"no latency table in the output: {_last_line(text)}")


@dataclass(frozen=True)
class Bandwidth:
    bytes: int
    iterations: int
    peak_gbps: float
    average_gbps: float
    msg_rate_mpps: float


def parse_bandwidth(text: str) -> Bandwidth:
    """ib_write_bw's table, in Gb/sec (`--report_gbits`) or MB/sec (converted)."""
    lines = text.splitlines()
    for index, line in enumerate(lines):
        match = re.search(r"BW average\[(Gb|MB)/sec\]", line)
        if line.strip().startswith("#bytes") and match:
            scale = 1.0 if match.group(1) == "Gb" else 8 / 1000  # MB/s (10^6 bytes) -> Gb/s
            for row in lines[index + 1 :]:
                values = row.split()
                if len(values) >= 5 and values[0].isdigit():
                    return Bandwidth(int(values[0]), int(values[1]), float(values[2]) * scale,
                                     float(values[3]) * scale, float(values[4]))
    raise ToolOutputError(f"no bandwidth table in the output: {_last_line(text)}")


@dataclass(frozen=True)
class NcclRow:
    size: int
    count: int
    dtype: str
    redop: str
    time_us: float
    algbw_gbs: float
    busbw_gbs: float
    in_place_busbw_gbs: float


@dataclass(frozen=True)
class NcclRun:
    rows: tuple[NcclRow, ...]
    avg_busbw_gbs: float | None
    network: str  # "IB", "Socket", or "" when NCCL never said
    ib_devices: tuple[str, ...]  # from `NET/IB : Using [0]rocep1s0f0:1/RoCE ...`
    via: tuple[str, ...]  # transports of the channels (`via NET/IB/0` → "NET/IB")
    warnings: tuple[str, ...]  # NCCL WARN lines


NCCL_ROW = re.compile(
    r"^\s*(\d+)\s+(\d+)\s+(\w+)\s+(\w+)\s+(-?\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\S+)\s+([\d.]+)\s+([\d.]+)\s+"
    r"([\d.]+)"
)


def parse_nccl(text: str) -> NcclRun:
    rows: list[NcclRow] = []
    average: float | None = None
    network = ""
    devices: tuple[str, ...] = ()
    via: list[str] = []
    warnings: list[str] = []
    for line in text.splitlines():
        match = NCCL_ROW.match(line)
        if match:
            rows.append(NcclRow(int(match.group(1)), int(match.group(2)), match.group(3), match.group(4),
                                float(match.group(6)), float(match.group(7)), float(match.group(8)),
                                float(match.group(12))))
            continue
        if line.startswith("# Avg bus bandwidth"):
            average = float(line.split(":", 1)[1].split()[0])
        elif "NCCL INFO Using network" in line:
            network = line.rsplit(" ", 1)[1].strip()
        elif "NCCL INFO NET/IB : Using" in line:
            devices = tuple(re.findall(r"\[\d+\]([\w.-]+):\d+/RoCE", line))
        elif " via NET/" in line:
            via.append(line.split(" via ", 1)[1].strip().rsplit("/", 1)[0])
        elif "NCCL WARN" in line:
            warnings.append(line.split("NCCL WARN", 1)[1].strip())
    if not network and via:
        network = "Socket" if all(v == "NET/Socket" for v in via) else "IB"
    return NcclRun(tuple(rows), average, network, devices, tuple(dict.fromkeys(via)), tuple(warnings))


def gbps(gbytes_per_s: float) -> float:
    return gbytes_per_s * 8


@dataclass(frozen=True)
class Verdict:
    state: str  # ok | warn | fail
    reasons: tuple[str, ...]


def nccl_verdict(run: NcclRun, *, min_busbw_gbps: float = MIN_BUSBW_GBPS) -> Verdict:
    """Traffic must go `via NET/IB` and the average bus bandwidth reach the threshold."""
    reasons: list[str] = []
    if not run.rows or run.avg_busbw_gbs is None:
        reasons.append("nccl-tests printed no result table" + (f": {run.warnings[-1]}" if run.warnings else ""))
        return Verdict("fail", tuple(reasons))
    if run.network == "Socket" or "NET/Socket" in run.via:
        reasons.append(
            "socket fallback: NCCL moved the data over TCP (`via NET/Socket`), not RDMA — check NCCL_IB_HCA, "
            "the RoCE devices' state and NCCL_IB_GID_INDEX"
        )
    elif run.network != "IB" and "NET/IB" not in run.via:
        reasons.append("NCCL never said it used NET/IB (run with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET)")
    average = gbps(run.avg_busbw_gbs)
    if average < min_busbw_gbps:
        used = f" over {len(run.ib_devices)} device(s) {', '.join(run.ib_devices)}" if run.ib_devices else ""
        reasons.append(f"average bus bandwidth {average:.1f} Gb/s ({run.avg_busbw_gbs:.2f} GB/s){used} is below "
                       f"{min_busbw_gbps:g} Gb/s")
    return Verdict("fail" if reasons else "ok", tuple(reasons))


def latency_cell_state(test: str, average_us: float, thresholds: Mapping[str, tuple[float, float]] | None = None) -> str:
    warn, fail = (thresholds or LATENCY_THRESHOLDS_US)[test]
    if average_us > fail:
        return "fail"
    return "warn" if average_us > warn else "ok"


Cell = tuple[float, float]  # (average us, p99 us)


def render_matrix(
    matrices: Mapping[str, Mapping[tuple[str, str], Cell]], nodes: Sequence[str], *, device: str, gid: int,
    size: int, iterations: int, title: str = "RDMA Latency Matrix",
) -> str:
    """Seed 003's layout: one block per test, FROM\\TO rows, `3.49us p99=4.94`, `self`."""
    tests = [test for test in LATENCY_TESTS if test in matrices]
    lines = [title, "", f"device={device} gid={gid} size={size}B iters={iterations} "
             f"tests={' '.join(MATRIX_TITLES[test] for test in tests)}"]
    for test in tests:
        lines += ["", f"{MATRIX_TITLES[test]} latency", "", "FROM\\TO " + " ".join(nodes)]
        for source in nodes:
            cells = []
            for target in nodes:
                if source == target:
                    cells.append("self")
                elif (source, target) in matrices[test]:
                    average, p99 = matrices[test][(source, target)]
                    cells.append(f"{average:.2f}us p99={p99:.2f}")
                else:
                    cells.append("-")
            lines += ["", f"{source} " + " ".join(cells)]
    return "\n".join(lines) + "\n"


def parse_matrix(text: str) -> dict[str, dict[tuple[str, str], Cell]]:
    """Reads seed 003's matrix text back: {test: {(from, to): (avg, p99)}}."""
    by_title = {title: test for test, title in MATRIX_TITLES.items()}
    matrices: dict[str, dict[tuple[str, str], Cell]] = {}
    test = ""
    columns: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        heading = re.fullmatch(r"(write|read|send) latency", line)
        if heading:
            test = by_title[heading.group(1)]
            matrices[test] = {}
            continue
        if line.startswith("FROM\\TO"):
            columns = line.split()[1:]
            continue
        if not test or not columns or not line:
            continue
        source, _, rest = line.partition(" ")
        tokens = re.findall(r"self|(?<!\S)-(?!\S)|[\d.]+us p99=[\d.]+", rest)
        if len(tokens) != len(columns):
            continue
        for target, token in zip(columns, tokens, strict=True):
            cell = re.fullmatch(r"([\d.]+)us p99=([\d.]+)", token)
            if cell:
                matrices[test][(source, target)] = (float(cell.group(1)), float(cell.group(2)))
    return matrices


def cable_of(device: str) -> str:
    """Each QSFP port shows up as two RoCE devices, one per GB10 PCIe link: port 0 is
    rocep1s0f0 + roceP2p1s0f0, port 1 rocep1s0f1 + roceP2p1s0f1."""
    match = re.search(r"f(\d+)$", device)
    return f"port {match.group(1)}" if match else device
