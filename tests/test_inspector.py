"""NCCL Inspector logs (commprof/ingest/inspector, analyzers/inspector.py): hand-written JSON-lines logs in
the plugin's v4.0 format (tests/fixtures/inspector: two processes, a 2-rank intra-node communicator with
AllReduce and a 2.30-style p2p record, a 4-rank two-node AllGather, and a line cut mid-JSON)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from commprof.analyzers.inspector import inspector_summary
from commprof.ingest.inspector import find_logs, read_logs

Cli = Callable[..., Result]
FIXTURES = Path(__file__).parent / "fixtures" / "inspector"


def test_records_and_the_cut_line() -> None:
    warnings: list[str] = []
    records = read_logs(find_logs(FIXTURES), warnings)
    assert records.height == 5
    assert warnings == ["NCCL Inspector: skipped 1 line(s): 1 × not JSON (cut mid-line?)"]
    assert sorted(records["kind"].to_list()) == ["coll", "coll", "coll", "coll", "p2p"]
    send = records.filter(records["kind"] == "p2p").row(0, named=True)
    assert (send["op"], send["peer"], send["bytes"], send["host"], send["pid"]) == ("send", 0, 4096, "h1", 101)


def test_bandwidth_on_commprofs_convention() -> None:
    summary = inspector_summary(read_logs(find_logs(FIXTURES), []))
    ag = summary.filter(summary["op"] == "all_gather").row(0, named=True)
    # 1 MiB per rank x 4 ranks over 200 µs: algbw 20.97 GB/s, busbw x 3/4
    assert ag["bytes"] == 4 * 1_048_576 and ag["tier"] == "network"
    assert ag["algbw_gbps"] == pytest.approx(4 * 1_048_576 / 200_000)
    assert ag["busbw_gbps"] == pytest.approx(4 * 1_048_576 / 200_000 * 3 / 4)
    assert ag["busbw_gbps"] == pytest.approx(ag["inspector_busbw_gbps"])  # the plugin's own figure agrees
    ar = summary.filter(summary["op"] == "all_reduce").row(0, named=True)
    assert (ar["calls"], ar["ranks_reporting"], ar["tier"]) == (3, 2, "NVLink or PCIe")
    assert ar["mean_us"] == pytest.approx(500 / 3) and ar["max_us"] == 300
    per_call = [1_048_576 / 100_000, 1_048_576 / 100_000, 1_048_576 / 300_000]
    assert ar["busbw_gbps"] == pytest.approx(sum(per_call) / 3)  # all-reduce on 2 ranks: factor 2(n-1)/n = 1


def test_analyze_on_inspector_logs_names_what_it_cannot_give(cli: Cli, tmp_path: Path) -> None:
    result = cli("analyze", str(FIXTURES), "--format", "json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["inspector"]["records"] == 5 and len(report["inspector"]["summary"]) == 3
    assert any("step time" in what for what in report["not_available"])
    assert report["flight_recorder"] is None
    hostile = tmp_path / "h-pid1.log"
    hostile.write_text('{"header": {"id": "0x1", "rank": 1e400}, "metadata": {}, "coll_perf": {"coll": []}}\n'
                       '{"header": 5, "metadata": {}}\n' + "[" * 100_000 + "\n")
    result = cli("analyze", str(tmp_path))
    assert result.exit_code in (0, 2) and "Traceback" not in result.output


def test_synth_run_written_as_inspector_logs_reads_back_its_calls(cli: Cli, tmp_path: Path) -> None:
    """The same run as Kineto traces and as Inspector logs (commprof synth --write-as inspector): per group
    and op, the calls and the mean kernel time the Inspector reader gives are the traces' own."""
    import polars as pl

    from commprof.run import open_run
    from commprof.synth.nsys import comm_hash

    args = ["--nodes", "2", "--gpus-per-node", "2", "--layout", "tp=2,dp=2", "--steps", "2", "--micro-batches", "1",
            "--layers", "1"]
    assert cli("synth", str(tmp_path / "k"), *args).exit_code == 0
    made = cli("synth", str(tmp_path / "i"), *args, "--write-as", "inspector")
    assert made.exit_code == 0, made.output
    calls = open_run(tmp_path / "k").tables().collectives.with_columns(
        ((pl.col("end_ns") - pl.col("start_ns")) / 1000).round(0).alias("us"))
    want = {(f"{comm_hash(pg):#x}", op): (n, us) for pg, op, n, us in calls.group_by("pg", "op").agg(
        pl.len(), pl.col("us").mean()).iter_rows()}
    report = json.loads(cli("analyze", str(tmp_path / "i"), "--format", "json").stdout)
    got = {(r["comm_id"], r["op"]): (r["calls"], r["mean_us"]) for r in report["inspector"]["summary"]}
    assert got.keys() == want.keys()
    for key, (n, us) in want.items():
        assert got[key][0] == n and got[key][1] == pytest.approx(us, abs=0.5)
