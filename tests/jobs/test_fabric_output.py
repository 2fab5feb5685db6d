"""Parsers of the fabric tools' output, on captured output: seed 003's full-mesh matrix as
printed, and perftest / nccl-tests tables in the tools' own layout carrying the figures
the references measured (seed 003, the NCCL playbook, the raw-RDMA guide)."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs.fabric.output import (
    ToolOutputError,
    cable_of,
    latency_cell_state,
    nccl_verdict,
    parse_bandwidth,
    parse_latency,
    parse_matrix,
    parse_nccl,
    render_matrix,
)

OUTPUTS = Path(__file__).parent / "fabric_outputs"


def captured(name: str) -> str:
    return (OUTPUTS / name).read_text()


def test_seed_003_matrix_parses_every_ordered_pair_of_each_test() -> None:
    matrices = parse_matrix(captured("seed003_matrix.txt"))
    assert sorted(matrices) == ["ib_read_lat", "ib_send_lat", "ib_write_lat"]
    assert all(len(cells) == 12 for cells in matrices.values())  # 4 nodes, 12 ordered pairs
    assert matrices["ib_write_lat"][("spark1", "spark2")] == (3.49, 4.94)
    assert matrices["ib_read_lat"][("spark2", "spark4")] == (6.28, 10.45)
    assert matrices["ib_send_lat"][("spark4", "spark3")] == (2.55, 2.95)
    # The seed's summary table: write 2.93-3.49, read 5.64-6.34, send 2.55-3.44 us.
    write = [average for average, _ in matrices["ib_write_lat"].values()]
    assert (min(write), max(write)) == (2.93, 3.49)
    read = [average for average, _ in matrices["ib_read_lat"].values()]
    assert (min(read), max(read)) == (5.64, 6.34)


def test_rendered_matrix_is_seed_003s_layout_and_reads_back() -> None:
    seed = parse_matrix(captured("seed003_matrix.txt"))
    nodes = ["spark1", "spark2", "spark3", "spark4"]
    text = render_matrix(seed, nodes, device="roceP2p1s0f1", gid=11, size=2, iterations=10000,
                         title="QRS812 Spark Fabric RDMA Latency Matrix")
    seed_lines = [line for line in captured("seed003_matrix.txt").splitlines() if line.strip()]
    assert [line for line in text.splitlines() if line.strip()] == seed_lines
    assert parse_matrix(text) == seed


def test_perftest_latency_row_is_read_by_column_name() -> None:
    result = parse_latency(captured("ib_write_lat_client.txt"))
    assert (result.bytes, result.iterations) == (2, 10000)
    assert (result.t_avg, result.p99, result.p999, result.t_typical) == (3.49, 4.94, 7.83, 3.41)


def test_perftest_failure_says_what_the_tool_said() -> None:
    with pytest.raises(ToolOutputError, match="Unable to init the socket connection"):
        parse_latency(captured("ib_send_lat_refused.txt"))


def test_ib_write_bw_in_gbits_and_cable_sum_of_the_guide() -> None:
    result = parse_bandwidth(captured("ib_write_bw_client.txt"))
    assert result.average_gbps == 92.57 and result.peak_gbps == 92.62
    # performance_benchmarking_guide.md: 92.57 + 97.28 = 189.85 Gb/s on one cable.
    assert round(result.average_gbps + 97.28, 2) == 189.85
    assert cable_of("rocep1s0f0") == cable_of("roceP2p1s0f0") == "port 0"
    assert cable_of("rocep1s0f1") == "port 1"


def test_ib_write_bw_in_megabytes_is_converted() -> None:
    text = captured("ib_write_bw_client.txt").replace("Gb/sec", "MB/sec").replace(
        "92.62              92.57", "11577.50           11571.25")
    assert parse_bandwidth(text).average_gbps == pytest.approx(92.57, abs=0.01)


def test_nccl_all_gather_over_ib_passes_the_playbook_threshold() -> None:
    run = parse_nccl(captured("all_gather_perf_ib.txt"))
    assert run.network == "IB" and run.ib_devices == ("rocep1s0f0", "roceP2p1s0f0")
    assert [row.size for row in run.rows] == [512 * 2**20, 2**30, 2 * 2**30, 4 * 2**30]
    assert run.rows[-1].busbw_gbs == 23.70 and run.avg_busbw_gbs == 23.2
    assert nccl_verdict(run).state == "ok"  # 185.6 Gb/s ≥ 175


def test_nccl_socket_fallback_is_a_failure_with_a_clear_reason() -> None:
    run = parse_nccl(captured("all_reduce_perf_socket.txt"))
    assert run.network == "Socket" and run.via == ("NET/Socket",)
    verdict = nccl_verdict(run)
    assert verdict.state == "fail"
    assert any("socket fallback" in reason for reason in verdict.reasons)
    assert any("24.0 Gb/s" in reason and "below 175 Gb/s" in reason for reason in verdict.reasons)


def test_nccl_below_threshold_names_the_devices_it_used() -> None:
    text = captured("all_gather_perf_ib.txt").replace("[1]roceP2p1s0f0:1/RoCE ", "").replace(
        "# Avg bus bandwidth    : 23.2000", "# Avg bus bandwidth    : 11.6000")
    verdict = nccl_verdict(parse_nccl(text))
    assert verdict.state == "fail" and "92.8 Gb/s" in verdict.reasons[0] and "1 device(s) rocep1s0f0" in verdict.reasons[0]


def test_nccl_without_a_table_fails() -> None:
    verdict = nccl_verdict(parse_nccl("spark2: Test NCCL failure common.cu:1279 'remote process exited'\n"))
    assert verdict.state == "fail" and "no result table" in verdict.reasons[0]


@pytest.mark.parametrize(("test", "average", "state"), [
    ("ib_write_lat", 3.49, "ok"), ("ib_write_lat", 6.0, "warn"), ("ib_write_lat", 12.5, "fail"),
    ("ib_read_lat", 6.34, "ok"), ("ib_read_lat", 10.45, "warn"), ("ib_send_lat", 13.0, "fail"),
])
def test_latency_cells_are_coloured_against_thresholds(test: str, average: float, state: str) -> None:
    assert latency_cell_state(test, average) == state
