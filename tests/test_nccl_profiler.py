"""The NCCL example profiler plugin's traces (commprof/ingest/nccl_profiler): hand-written in the plugin's
shape (tests/fixtures/nccl_profiler: NCCL 2.28-era unquoted datatype and Stream values, a rank-0 file cut
mid-event by a killed process, a rank-1 file closed with ``{}]``), read leniently."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from click.testing import Result

from commprof.analyzers.nccl_profiler import algorithm_summary
from commprof.ingest.nccl_profiler import find_traces, read_traces

Cli = Callable[..., Result]
FIXTURES = Path(__file__).parent / "fixtures" / "nccl_profiler"


def test_lenient_read_gives_algorithm_protocol_and_channels() -> None:
    warnings: list[str] = []
    colls = read_traces(find_traces(FIXTURES), warnings)
    assert colls.height == 4  # 3 COLL begins in rank 0 (the 4th is cut) and 1 in rank 1
    assert warnings == ["NCCL profiler plugin: skipped 1 line(s): 1 × not an event even after repair"]
    ag = colls.filter(colls["op"] == "all_gather").row(0, named=True)
    # "Datatype": ncclBfloat16 unquoted (invalid JSON) is repaired; a CommHash past 2**53 stays exact
    assert (ag["dtype"], ag["bytes"], ag["algorithm"], ag["protocol"], ag["channels"]) == \
        ("ncclBfloat16", 2 * 1_048_576, "RING", "SIMPLE", 4)
    assert ag["comm_hash"] == f"{14627581913227093503:#x}"
    summary = algorithm_summary(colls)
    ring = summary.filter((summary["op"] == "all_reduce") & (summary["algorithm"] == "RING")).row(0, named=True)
    assert (ring["calls"], ring["ranks"], ring["protocol"], ring["bytes_min"]) == (2, 2, "LL", 4 * 262_144)
    assert summary.filter(summary["algorithm"] == "NVLS")["channels_max"].to_list() == [16]


def test_analyze_on_plugin_traces(cli: Cli) -> None:
    result = cli("analyze", str(FIXTURES), "--format", "json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["nccl_profiler"]["collectives"] == 4 and len(report["nccl_profiler"]["algorithms"]) == 3
    assert any("enqueued" in what for what in report["not_available"])
