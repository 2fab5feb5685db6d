"""The fabric checks: NCCL bus bandwidth (nccl-tests over mpirun), the RDMA latency matrix
(ib_write_lat / ib_read_lat / ib_send_lat over every ordered pair) and link bandwidth
(ib_write_bw per RoCE device pair, summed per cable). Each first checks every node (tools
present, GPU free, devices ACTIVE), then measures, keeps the result for its node set and
fails with the reason when a threshold is missed."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from jobs.fabric.commands import (
    BANDWIDTH_EXTRA,
    COLLECTIVES,
    DEFAULT_BASE_PORT,
    SAFE_MAX_BYTES,
    SAFE_MIN_BYTES,
    device_by_ipv4,
    device_ipv4,
    latency_extra,
    linked_devices,
    mpirun_command,
    parse_preflight,
    perftest_client,
    perftest_server,
    preflight_problems,
    preflight_script,
)
from jobs.fabric.output import (
    MIN_BUSBW_GBPS,
    MIN_CABLE_GBPS,
    Cell,
    ToolOutputError,
    cable_of,
    gbps,
    latency_cell_state,
    nccl_verdict,
    parse_bandwidth,
    parse_latency,
    parse_nccl,
    render_matrix,
)
from jobs.fabric.pair import PairResult, run_pair
from jobs.kinds.network import job_nodes
from jobs.models import JobKind
from jobs.results import fabric_result_record
from jobs.runner import JobContext, JobFailed
from jobs.transports import TransportError
from lanes.models import Node
from lanes.selectors import node_fabric_env

MATRIX_TOOL = {"write": "ib_write_lat", "read": "ib_read_lat", "send": "ib_send_lat"}
PAIR_TIMEOUT_S = 120.0


def _nodes(ctx: JobContext) -> list[Node]:
    nodes = job_nodes(ctx)
    if len(nodes) < 2:
        raise JobFailed("a fabric check needs at least two nodes")
    return nodes


def preflight(ctx: JobContext, nodes: Sequence[Node], tools: Sequence[str],
              devices: dict[str, list[str]], required: bool) -> list[str]:
    """Every node at once, every problem named; devices that are down fail the job when
    `required`, else they come back as warnings (NCCL skips a down HCA, and the measured
    bandwidth then tells what it cost)."""
    steps = ctx.declare_steps([(f"preflight.{n.name}", "preflight", n.name,
                                f"Check {n.name}: {', '.join(tools)} installed, GPU free, RoCE devices ACTIVE")
                               for n in nodes])
    problems: list[str] = []
    warnings: list[str] = []
    for node, step in zip(nodes, steps, strict=True):
        try:
            with ctx.step(step):
                result = ctx.run(ctx.endpoint(node), "bash -s", stdin=preflight_script(tools, devices[node.name]),
                                 capture=True, timeout_s=60)
                found = parse_preflight(result.stdout)
                own = preflight_problems(node.name, found, required_devices=devices[node.name] if required else [])
                if not required:
                    warnings += [f"{device} on {node.name} is down: NCCL will do without it" for device in found.down()]
                if own:
                    raise JobFailed("; ".join(own))
        except (TransportError, JobFailed) as exc:
            problems.append(str(exc))
            ctx.log(f"✗ {exc}", node=node.name, stream="stderr")
    if problems:
        raise JobFailed("; ".join(problems))
    return warnings


def report_of(node: Node) -> dict[str, Any]:
    report = node.network_report or {}
    if not report.get("devices"):
        raise JobFailed(f"{node.name} has no network report: run its network check first "
                        "(the fabric addresses, devices and GID index come from it)")
    return report


def perftest(ctx: JobContext, *, server: Node, client: Node, server_command: str, client_command: str) -> PairResult:
    server_endpoint, client_endpoint = ctx.endpoint(server), ctx.endpoint(client)
    ctx.log(f"$ {server_command}", node=server.name)
    ctx.log(f"$ {client_command}", node=client.name)

    def relay(name: str) -> Any:
        return lambda stream, raw, dropped: ctx.sink.append_raw(name, stream, raw, dropped)

    return ctx.wait(run_pair(server=ctx.transport(server_endpoint), server_command=server_command,
                             client=ctx.transport(client_endpoint), client_command=client_command,
                             on_server_line=relay(server.name), on_client_line=relay(client.name),
                             timeout_s=PAIR_TIMEOUT_S))


# --- RDMA latency matrix ------------------------------------------------------------------
def run_latency_matrix(ctx: JobContext) -> dict[str, Any]:
    nodes = _nodes(ctx)
    params = ctx.job.params
    reports = {node.name: report_of(node) for node in nodes}
    device, addresses = _matrix_device(nodes, params, reports)
    gid = params.get("gid_index")
    size, iterations = int(params.get("size", 2)), int(params.get("iterations", 10000))
    tests = [MATRIX_TOOL[name] for name in params.get("tests") or list(MATRIX_TOOL)]
    preflight(ctx, nodes, tests, {node.name: [device] for node in nodes}, required=True)
    pairs = [(source, target) for source in nodes for target in nodes if source != target]
    steps = ctx.declare_steps([(f"matrix.{tool}", "measure", "", f"{tool}: {len(pairs)} ordered pairs on {device}")
                               for tool in tests])
    port = int(params.get("base_port", DEFAULT_BASE_PORT))
    matrices: dict[str, dict[tuple[str, str], Cell]] = {}
    cells: dict[str, dict[str, dict[str, Any]]] = {}
    failures: list[str] = []
    for tool, step in zip(tests, steps, strict=True):
        matrices[tool], cells[tool] = {}, {}
        with ctx.step(step):
            for source, target in pairs:  # FROM = the client, TO = the server it connects to
                node_gid = gid if gid is not None else reports[target.name].get("gid_index")
                client_gid = gid if gid is not None else reports[source.name].get("gid_index")
                extra = latency_extra(size, iterations)
                result = perftest(
                    ctx, server=target, client=source,
                    server_command=perftest_server(tool, device=device, gid_index=node_gid, port=port, extra=extra),
                    client_command=perftest_client(tool, device=device, gid_index=client_gid, port=port,
                                                   server_ip=str(addresses[target.name]), extra=extra))
                port += 1  # never reused within the job
                key = f"{source.name}>{target.name}"
                try:
                    if not result.ok or result.client is None:
                        raise ToolOutputError(result.failure())
                    latency = parse_latency("\n".join(result.client.stdout))
                except ToolOutputError as exc:
                    failures.append(f"{tool} {source.name} → {target.name}: {exc}")
                    cells[tool][key] = {"state": "fail", "error": str(exc)}
                    ctx.log(f"✗ {failures[-1]}", stream="stderr")
                    continue
                matrices[tool][(source.name, target.name)] = (latency.t_avg, latency.p99)
                state = latency_cell_state(tool, latency.t_avg)
                cells[tool][key] = {"avg_us": latency.t_avg, "p99_us": latency.p99, "state": state}
                ctx.log(f"{tool} {source.name} → {target.name}: {latency.t_avg:.2f} us avg, p99 {latency.p99:.2f} "
                        f"({state})")
            if any(cell["state"] != "ok" for cell in cells[tool].values()):
                ctx.step_warned(step, f"{sum(c['state'] != 'ok' for c in cells[tool].values())} cell(s) not ok")
    return _matrix_outcome(ctx, nodes, reports, matrices, cells, failures, device=device, gid=gid, size=size,
                           iterations=iterations, tests=tests)


def _matrix_device(nodes: Sequence[Node], params: dict[str, Any],
                   reports: dict[str, dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """The RoCE device the matrix measures on (the head's first by default) and its IPv4 on each node."""
    device = str(params.get("device") or (reports[nodes[0].name].get("ib_hca") or [""])[0])
    if not device:
        raise JobFailed(f"{nodes[0].name}'s network report lists no usable RoCE device: give a device")
    addresses = {node.name: device_ipv4(reports[node.name], device) for node in nodes}
    without = [name for name, address in addresses.items() if not address]
    if without:
        raise JobFailed(f"{device} has no IPv4 address on {', '.join(without)} (network report)")
    return device, addresses


def _matrix_outcome(
    ctx: JobContext, nodes: Sequence[Node], reports: dict[str, dict[str, Any]],
    matrices: dict[str, dict[tuple[str, str], Cell]], cells: dict[str, dict[str, dict[str, Any]]],
    failures: list[str], *, device: str, gid: Any, size: int, iterations: int, tests: list[str],
) -> dict[str, Any]:
    """The matrix text, the verdict and the kept result; fails the job on a failed or slow cell."""
    names = [node.name for node in nodes]
    shown_gid = gid if gid is not None else reports[names[0]].get("gid_index")
    text = render_matrix(matrices, names, device=device, gid=int(shown_gid or 0), size=size, iterations=iterations)
    ctx.log(text, stream="stdout")
    states = [cell["state"] for by_pair in cells.values() for cell in by_pair.values()]
    over = [f"{tool} {key.replace('>', ' → ')}: {cell['avg_us']:.2f} us" for tool, by_pair in cells.items()
            for key, cell in by_pair.items() if cell["state"] == "fail" and "avg_us" in cell]
    verdict = "fail" if "fail" in states else "warn" if "warn" in states else "ok"
    worst = max((cell["avg_us"] for by_pair in cells.values() for cell in by_pair.values() if "avg_us" in cell),
                default=None)
    summary = {"device": device, "gid_index": shown_gid, "size": size, "iterations": iterations, "nodes": names,
               "tests": tests, "cells": cells, "text": text, "failures": failures}
    fabric_result_record(job=ctx.job, kind=JobKind.LATENCY_MATRIX, nodes=nodes, verdict=verdict, headline=worst,
                         headline_unit="us", summary=summary)
    if failures or over:
        raise JobFailed("; ".join(failures + [f"above the threshold: {', '.join(over)}"] * bool(over)))
    return {"verdict": verdict, "worst_avg_us": worst}


# --- link bandwidth -----------------------------------------------------------------------
def run_link_bandwidth(ctx: JobContext) -> dict[str, Any]:
    nodes = _nodes(ctx)
    params = ctx.job.params
    reports = {node.name: report_of(node) for node in nodes}
    minimum = float(params.get("min_cable_gbps", MIN_CABLE_GBPS))
    runs = _cabled_runs(nodes, reports)
    devices = {node.name: sorted({r[2] for r in runs if r[0] == node} | {r[3] for r in runs if r[1] == node})
               for node in nodes}
    preflight(ctx, nodes, ["ib_write_bw"], devices, required=True)
    steps = ctx.declare_steps([(f"bw.{c.name}.{d}", "measure", c.name, f"ib_write_bw {c.name}:{d} → {s.name}:{sd}")
                               for c, s, d, sd, _ in runs])
    port = int(params.get("base_port", DEFAULT_BASE_PORT))
    iterations = params.get("iterations")
    extra = [*BANDWIDTH_EXTRA, *(["-n", str(iterations)] if iterations else [])]
    cables: dict[str, dict[str, Any]] = {}
    failures: list[str] = []
    for (client, server, device, peer_device, peer_ip), step in zip(runs, steps, strict=True):
        cable = f"{client.name}↔{server.name} {cable_of(device)}"
        entry = cables.setdefault(cable, {"devices": [], "sum_gbps": 0.0})
        with ctx.step(step):
            result = perftest(
                ctx, server=server, client=client,
                server_command=perftest_server("ib_write_bw", device=peer_device,
                                               gid_index=params.get("gid_index", reports[server.name].get("gid_index")),
                                               port=port, extra=extra),
                client_command=perftest_client("ib_write_bw", device=device,
                                               gid_index=params.get("gid_index", reports[client.name].get("gid_index")),
                                               port=port, server_ip=peer_ip, extra=extra))
            port += 1
            try:
                if not result.ok or result.client is None:
                    raise ToolOutputError(result.failure())
                bandwidth = parse_bandwidth("\n".join(result.client.stdout))
            except ToolOutputError as exc:
                failures.append(f"ib_write_bw {client.name}:{device} → {server.name}:{peer_device}: {exc}")
                step.detail = str(exc)[:2000]
                entry["devices"].append({"device": device, "peer_device": peer_device, "error": str(exc)})
                continue
            entry["devices"].append({"device": device, "peer_device": peer_device,
                                     "average_gbps": bandwidth.average_gbps, "peak_gbps": bandwidth.peak_gbps})
            entry["sum_gbps"] = round(entry["sum_gbps"] + bandwidth.average_gbps, 2)
            ctx.log(f"{device} → {server.name}:{peer_device}: {bandwidth.average_gbps:.2f} Gb/s average")
    low = _cable_states(ctx, cables, minimum)
    weakest = min((entry["sum_gbps"] for entry in cables.values()), default=None)
    verdict = "fail" if failures or low else "ok"
    fabric_result_record(job=ctx.job, kind=JobKind.LINK_BANDWIDTH, nodes=nodes, verdict=verdict, headline=weakest,
                         headline_unit="Gb/s", summary={"cables": cables, "min_cable_gbps": minimum,
                                                        "failures": failures})
    if failures or low:
        raise JobFailed("; ".join(failures + low))
    return {"verdict": verdict, "weakest_cable_gbps": weakest}


def _cabled_runs(nodes: Sequence[Node], reports: dict[str, dict[str, Any]]) -> list[tuple[Node, Node, str, str, str]]:
    """(client, server, client device, server device, server ip) for each cabled device pair."""
    runs: list[tuple[Node, Node, str, str, str]] = []
    for index, client in enumerate(nodes):
        for server in nodes[index + 1:]:
            for device, peer_ip in linked_devices(reports[client.name], server.name):
                peer_device = device_by_ipv4(reports[server.name], peer_ip)
                if peer_device:
                    runs.append((client, server, device, peer_device, peer_ip))
    if not runs:
        raise JobFailed("the network reports show no passing link between these nodes: run a network check")
    return runs


def _cable_states(ctx: JobContext, cables: dict[str, dict[str, Any]], minimum: float) -> list[str]:
    """Each cable's state from its devices' summed bandwidth, logged; returns the cables below `minimum`."""
    low: list[str] = []
    for cable, entry in cables.items():
        entry["state"] = "ok" if entry["sum_gbps"] >= minimum else "fail"
        halves = " + ".join(f"{half.get('average_gbps', 0.0):.2f}" for half in entry["devices"])
        ctx.log(f"{cable}: {halves} = {entry['sum_gbps']:.2f} Gb/s ({entry['state']})", stream="stdout")
        if entry["state"] == "fail":
            low.append(f"{cable}: {entry['sum_gbps']:.2f} Gb/s is below {minimum:g} Gb/s")
    return low


# --- NCCL bus bandwidth -------------------------------------------------------------------
def run_nccl_test(ctx: JobContext) -> dict[str, Any]:
    nodes = _nodes(ctx)
    params = ctx.job.params
    reports = {node.name: report_of(node) for node in nodes}
    hosts = [str(reports[node.name].get("fabric_ip") or "") for node in nodes]
    if not all(hosts):
        raise JobFailed("every node needs a fabric IP in its network report: run a network check")
    collective = str(params.get("collective", "all_reduce"))
    program = COLLECTIVES[collective]
    env = node_fabric_env(nodes[0])
    # The INFO lines say which network NCCL used: the check reads `via NET/IB` from them.
    env.update({"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"})
    mismatched = [node.name for node in nodes[1:] if node_fabric_env(node).get("NCCL_IB_HCA") != env.get("NCCL_IB_HCA")]
    warnings = preflight(ctx, nodes, ["mpirun", program],
                         {node.name: list(reports[node.name].get("ib_hca") or []) for node in nodes}, required=False)
    if mismatched:
        warnings.append(f"NCCL_IB_HCA differs on {', '.join(mismatched)}: the head's list is used")
    minimum = float(params.get("min_busbw_gbps", MIN_BUSBW_GBPS))
    low, high = int(params.get("min_bytes", SAFE_MIN_BYTES)), int(params.get("max_bytes", SAFE_MAX_BYTES))
    command = mpirun_command(collective=collective, hosts=hosts, env=env, min_bytes=low, max_bytes=high)
    (step,) = ctx.declare_steps([("nccl", "measure", nodes[0].name, f"{program} over {len(nodes)} nodes, "
                                  f"{low // 2**20} MiB to {high // 2**20} MiB")])
    with ctx.step(step):
        result = ctx.run(ctx.endpoint(nodes[0]), command, capture=True, timeout_s=float(params["time_limit_s"]))
        step.exit_code = result.exit_code
        run = parse_nccl("\n".join(result.stdout + result.stderr))
        verdict = nccl_verdict(run, min_busbw_gbps=minimum)
        if not result.ok and not run.rows:
            said = [line.strip() for line in result.stderr + result.stdout if line.strip() and "---" not in line]
            reasons: tuple[str, ...] = (f"{program} failed (exit {result.exit_code}): {' '.join(said[-4:]) or 'no output'}",)
        else:
            reasons = verdict.reasons
    rows = [{"size": row.size, "algbw_gbs": row.algbw_gbs, "busbw_gbs": row.busbw_gbs,
             "busbw_gbps": round(gbps(row.busbw_gbs), 1)} for row in run.rows]
    average = round(gbps(run.avg_busbw_gbs), 1) if run.avg_busbw_gbs is not None else None
    for row in rows:
        ctx.log(f"{row['size'] // 2**20:>6} MiB  busbw {row['busbw_gbs']:6.2f} GB/s = {row['busbw_gbps']:6.1f} Gb/s",
                stream="stdout")
    for warning in warnings:
        ctx.log(f"warning: {warning}")
    state = "fail" if reasons else "ok"
    fabric_result_record(job=ctx.job, kind=JobKind.NCCL_TEST, nodes=nodes, verdict=state, headline=average,
                         headline_unit="Gb/s", summary={
                             "collective": collective, "rows": rows, "avg_busbw_gbps": average, "network": run.network,
                             "ib_devices": list(run.ib_devices), "via": list(run.via), "env": env,
                             "min_busbw_gbps": minimum, "reasons": list(reasons), "warnings": warnings})
    if reasons:
        raise JobFailed("; ".join(reasons))
    return {"verdict": state, "avg_busbw_gbps": average, "network": run.network, "warnings": warnings}

