"""The network check kind: one read-only probe per node over `bash -s`, then jumbo pings
over every paired link, a verdict per link, and the report saved on each node."""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from core.broadcast import DASHBOARD_GROUP, broadcast
from jobs.kinds.netprobe import (
    PROBE_SCRIPT,
    LinkPair,
    NodeProbe,
    build_report,
    link_verdict,
    link_warnings,
    pair_links,
    parse_probe,
    ping_command,
    version_mismatches,
)
from jobs.models import JobStep, StepState
from jobs.runner import JobContext, JobFailed
from jobs.transports import TransportError
from lanes.models import Node, NodeState
from lanes.node_services import (
    node_network_payload,
    node_record_captured_host_key,
    node_record_network_report,
    node_set_state,
)


def job_nodes(ctx: JobContext) -> list[Node]:
    names: list[str] = list(ctx.job.params.get("nodes") or [])
    by_name = {node.name: node for node in ctx.job.nodes.all()}
    return [by_name[name] for name in names if name in by_name]


def _summarise(ctx: JobContext, probe: NodeProbe) -> None:
    ctx.log(f"kernel {probe.kernel or '?'}, driver {probe.driver or '?'}, "
            f"compaction_proactiveness={probe.compaction}, MemAvailable {probe.mem_available_kib} kB",
            node=probe.node, stream="stdout")
    for d in probe.devices:
        ctx.log(f"{d.name} → {d.netdev or '-'}: {d.port_state or '?'} {d.operstate or '?'} "
                f"{d.speed_mbps or '?'} Mb/s MTU {d.mtu or '?'} {d.ipv4 or 'no IPv4'} GID index {d.gid_index} "
                f"fw {d.fw_ver or '?'}", node=probe.node, stream="stdout")


def ping_script(pairs: list[LinkPair]) -> str:
    lines = []
    for index, pair in enumerate(pairs):
        lines.append(
            f"out=$({ping_command(pair)} 2>&1); rc=$?; "
            f"printf 'PING\\t%s\\t%s\\t%s\\n' {index} \"$rc\" \"$(printf '%s' \"$out\" | tail -n1)\""
        )
    return "\n".join(lines) + "\n"


def parse_pings(output: list[str], count: int) -> dict[int, tuple[bool, str]]:
    results: dict[int, tuple[bool, str]] = {i: (False, "no answer from the ping script") for i in range(count)}
    for line in output:
        parts = line.split("\t")
        if len(parts) >= 4 and parts[0] == "PING" and parts[1].isdigit():
            results[int(parts[1])] = (parts[2] == "0", parts[3].strip())
    return results


def run_network_check(ctx: JobContext) -> dict[str, Any]:
    nodes = job_nodes(ctx)
    if not nodes:
        raise JobFailed("no nodes to check")
    probe_steps, probes, failures = _probe_nodes(ctx, nodes)
    links = _ping_links(ctx, nodes, probes)
    warnings = version_mismatches(list(probes.values()))
    for problem in warnings:
        ctx.log(f"warning: {problem}")
    reports = _save_reports(ctx, nodes, probe_steps, probes, links, warnings)
    if failures:
        raise JobFailed("; ".join(failures))
    # The job still succeeds on a "warn" verdict; the page shows these in amber.
    return {"verdicts": {name: r["verdict"] for name, r in reports.items()}, "warnings": warnings}


def _probe_nodes(ctx: JobContext, nodes: list[Node]) -> tuple[list[JobStep], dict[str, NodeProbe], list[str]]:
    """One probe step per node; a node that cannot be reached (or whose host key is new) is a failure, not the end."""
    probe_steps = ctx.declare_steps([(f"probe.{n.name}", "preflight", n.name, f"Probe RoCE devices on {n.name}")
                                     for n in nodes])
    probes: dict[str, NodeProbe] = {}
    failures: list[str] = []
    for node, step in zip(nodes, probe_steps, strict=True):
        endpoint = ctx.endpoint(node)
        try:
            with ctx.step(step):
                result = ctx.run(endpoint, "bash -s", stdin=PROBE_SCRIPT, capture=True, timeout_s=60)
                step.exit_code = result.exit_code
                if not result.ok:
                    raise JobFailed(f"{node.name}: probe exited {result.exit_code}")
                probes[node.name] = parse_probe(node.name, "\n".join(result.stdout))
                _summarise(ctx, probes[node.name])
        except (TransportError, JobFailed) as exc:
            failures.append(str(exc))
            ctx.log(f"✗ {exc}", node=node.name)
            if isinstance(exc, TransportError) and exc.presented_host_key:
                node_record_captured_host_key(node=node, host_key_line=exc.presented_host_key)
                ctx.log("the presented host key is waiting for an admin's confirmation on the node page",
                        node=node.name)
            elif isinstance(exc, TransportError):
                node_set_state(node=node, state=NodeState.UNREACHABLE)
    return probe_steps, probes, failures


def _ping_links(ctx: JobContext, nodes: list[Node], probes: dict[str, NodeProbe]) -> dict[str, list[dict[str, Any]]]:
    """Jumbo pings over every paired link (two probed nodes or more): each node's links with their verdicts."""
    pairs = pair_links(list(probes.values()))
    links: dict[str, list[dict[str, Any]]] = {name: [] for name in probes}
    if len(probes) > 1:
        ping_steps = ctx.declare_steps([(f"ping.{name}", "preflight", name, f"Jumbo ping from {name} over each link")
                                        for name in probes])
        for step in ping_steps:
            own = [pair for pair in pairs if pair.node == step.node]
            node = next(n for n in nodes if n.name == step.node)
            with ctx.step(step):
                for pair in own:
                    ctx.log(f"$ {ping_command(pair)}", node=step.node)
                result = ctx.run(ctx.endpoint(node), "bash -s", stdin=ping_script(own), capture=True, quiet=True,
                                 timeout_s=30 + 10 * len(own))
                pings = parse_pings(result.stdout, len(own))
                for index, pair in enumerate(own):
                    ok, detail = pings[index]
                    link = link_verdict(pair, ok, detail)
                    links[step.node].append(link)
                    ctx.log(f"{pair.device.name} {link['local_ip']} → {pair.peer} {link['peer_ip']}: "
                            f"{link['verdict'].upper()} ({link['detail']})", node=step.node,
                            stream="stdout" if link["verdict"] == "ok" else "stderr")
                # A warn (e.g. MTU 1500) is not a failure, but must not show green either.
                if link_warnings(links[step.node]):
                    step.state = StepState.WARNED
                    step.detail = "; ".join(link_warnings(links[step.node]))[:2000]
    return links


def _save_reports(ctx: JobContext, nodes: list[Node], probe_steps: list[JobStep], probes: dict[str, NodeProbe],
                  links: dict[str, list[dict[str, Any]]], warnings: list[str]) -> dict[str, Any]:
    """Each probed node's report saved (the node is online), broadcast and logged; adds its findings to `warnings`."""
    checked_at = timezone.now()
    reports: dict[str, Any] = {}
    for name, probe in probes.items():
        report = build_report(probe, links[name], checked_at.isoformat().replace("+00:00", "Z"),
                              had_peers=len(probes) > 1)
        reports[name] = report
        if report["notes"]:  # the node's own findings (compaction, GID disagreement) belong to its probe
            ctx.step_warned(probe_steps[[n.name for n in nodes].index(name)], "; ".join(report["notes"]))
        warnings.extend(f"{name}: {reason}" for reason in link_warnings(links[name]) + report["notes"])
        node = next(n for n in nodes if n.name == name)
        node_record_network_report(node=node, report=report)
        node_set_state(node=node, state=NodeState.ONLINE, last_seen=checked_at)
        broadcast(DASHBOARD_GROUP, "node.network", node_network_payload(node))
        ctx.log(f"report saved: verdict {report['verdict']}, eth_if {report['eth_if'] or '-'}, "
                f"fabric_ip {report['fabric_ip'] or '-'}, ib_hca {','.join(report['ib_hca']) or '-'}, "
                f"GID index {report['gid_index']}", node=name)
    return reports

