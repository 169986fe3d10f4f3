"""``commprof export --perfetto``: a valid Chrome Trace Event file that commprof's own ingest reads
back with the same collectives and the same exposed/overlapped time."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
from click.testing import Result
from polars.testing import assert_frame_equal
from test_check_synth import synthetic_run

import commprof
from commprof.export import perfetto

PHASES = {"X", "B", "E", "C", "M", "i", "I"}
COLLECTIVE_COLUMNS = ["rank", "pg", "seq", "op", "bytes", "group_size", "peer", "start_ns", "end_ns", "step",
                      "exposed_ns", "overlapped_ns"]


def assert_chrome_trace(trace: dict[str, Any]) -> None:
    """The Trace Event format as chrome://tracing and ui.perfetto.dev read it."""
    assert isinstance(trace["traceEvents"], list) and trace["traceEvents"]
    open_spans: dict[tuple[Any, Any], list[tuple[int, int]]] = defaultdict(list)
    named_pids, named_tids, used = set(), set(), set()
    for ev in trace["traceEvents"]:
        assert {"ph", "name", "pid", "tid", "ts"} <= ev.keys(), ev
        assert ev["ph"] in PHASES and isinstance(ev["name"], str)
        assert isinstance(ev["pid"], int) and isinstance(ev["tid"], int) and isinstance(ev["ts"], (int, float))
        if ev["ph"] == "M":
            assert ev["name"] in {"process_name", "thread_name", "process_sort_index", "thread_sort_index"}
            if ev["name"] == "process_name":
                named_pids.add(ev["pid"])
            if ev["name"] == "thread_name":
                named_tids.add((ev["pid"], ev["tid"]))
        elif ev["ph"] == "X":
            assert isinstance(ev["dur"], (int, float)) and ev["dur"] >= 0
            start = round(ev["ts"] * 1000)  # viewers work in integer ns
            open_spans[(ev["pid"], ev["tid"])].append((start, start + round(ev["dur"] * 1000)))
            used.add((ev["pid"], ev["tid"]))
        elif ev["ph"] == "C":
            assert ev["args"] and all(isinstance(v, (int, float)) for v in ev["args"].values())
    assert {pid for pid, _ in used} <= named_pids
    assert used <= named_tids
    for spans in open_spans.values():  # X events on one thread nest properly
        stack: list[int] = []
        for start, end in sorted(spans, key=lambda s: (s[0], -s[1])):
            while stack and stack[-1] <= start:
                stack.pop()
            assert not stack or end <= stack[-1], (start, end, stack)
            stack.append(end)


def _collectives(run: commprof.Run) -> pl.DataFrame:
    return commprof.analyze(run).collectives.select(COLLECTIVE_COLUMNS).sort("rank", "start_ns")


def test_export_sample_run(cli: Callable[..., Result], sample_run: Path, tmp_path: Path) -> None:
    out, split = tmp_path / "trace.json", tmp_path / "split"
    result = cli("export", str(sample_run), "--perfetto", str(out), "--split-ranks", str(split))
    assert result.exit_code == 0, result.output
    trace = json.loads(out.read_text())
    assert_chrome_trace(trace)
    assert {ev["pid"] for ev in trace["traceEvents"]} == {0, 1, 2, 3}
    kernels = [ev for ev in trace["traceEvents"] if ev.get("cat") == "kernel" and ev["name"].startswith("nccl:")]
    assert len(kernels) == 60
    annotated = {"dimension", "tier", "bytes", "busbw_gbps", "exposed_ns", "overlapped_ns", "pg", "op"}
    assert annotated <= kernels[0]["args"].keys()
    assert kernels[0]["args"]["original_name"].startswith("gloo:")
    assert min(ev["ts"] for ev in trace["traceEvents"] if ev["ph"] == "X") == 0
    counters = [ev for ev in trace["traceEvents"] if ev["ph"] == "C"]
    assert len(counters) == 4 * (3 + 1)
    # read back per rank: the same collectives, the same step parts
    original, back = commprof.open_run(sample_run), commprof.open_run(split)
    assert_frame_equal(_collectives(original), _collectives(back))
    assert_frame_equal(commprof.analyze(original).steps, commprof.analyze(back).steps)
    # the merged file reads back as the run it came from: every rank, the same collectives and parts
    merged = commprof.open_run(out)
    assert merged.ranks["rank"].to_list() == [0, 1, 2, 3]
    assert_frame_equal(_collectives(original), _collectives(merged))
    assert_frame_equal(commprof.analyze(original).steps, commprof.analyze(merged).steps)


def test_export_single_rank_round_trip(cli: Callable[..., Result], tmp_path: Path) -> None:
    run_dir = synthetic_run(tmp_path / "synth")
    (run_dir / "rank-1.json").unlink()
    out = tmp_path / "one.json"
    assert cli("export", str(run_dir), "--perfetto", str(out)).exit_code == 0
    trace = json.loads(out.read_text())
    assert_chrome_trace(trace)
    exposed = [ev for ev in trace["traceEvents"] if ev["name"] == "exposed comm" and ev["ph"] == "X"]
    assert [ev["dur"] for ev in exposed] == [500.0] * 3  # µs
    coll = next(ev for ev in trace["traceEvents"] if ev.get("cat") == "kernel" and ev["name"].startswith("nccl"))
    assert coll["args"]["exposed_ns"] == 500_000 and coll["args"]["bytes"] == 4 << 20
    original, back = commprof.open_run(run_dir), commprof.open_run(out)
    assert_frame_equal(_collectives(original), _collectives(back))
    assert_frame_equal(commprof.analyze(original).steps, commprof.analyze(back).steps)


def test_pack_nests_overlapping_events() -> None:
    events = [(0, 10, {"n": 1}), (2, 5, {"n": 2}), (4, 12, {"n": 3}), (12, 13, {"n": 4})]
    tracks = perfetto._pack(events)
    assert [[e[2]["n"] for e in t] for t in tracks] == [[1, 2, 4], [3]]


def test_export_missing_path(cli: Callable[..., Result], tmp_path: Path) -> None:
    result = cli("export", str(tmp_path / "nope"), "--perfetto", str(tmp_path / "o.json"))
    assert result.exit_code == 2


def test_export_library_kernels_keep_their_names(cli: Callable[..., Result], tmp_path: Path) -> None:
    """DeepEP's dispatch/combine (no process group in the trace; synthetic, 2 ranks) are exported under their own
    names with the library's group, dimension and exposed time, and read back as the same communication."""
    from commprof.synth import TraceBuilder

    ep = "dpsk::ep::internode::"
    for rank in range(2):
        b = TraceBuilder(rank=rank, world_size=2)
        for step in range(3):
            t = step * 1000
            b.step(step + 1, t, t + 1000)
            b.kernel("void dpsk::gemm::fp8_gemm_kernel<7168, 2048, 128>(__nv_bfloat16*, float*)", t, t + 900)
            b.kernel(f"void {ep}dispatch<false, 8, true, 8>(int4*, float*, long*)", t + 100, t + 300, stream=16)
            b.kernel(f"void {ep}combine<false, 8, __nv_bfloat16, 8>(int4*, float*)", t + 500, t + 950, stream=16)
        b.write(tmp_path / "run" / f"rank-{rank}.json")
    out = tmp_path / "deepep.json"
    result = cli("export", str(tmp_path / "run"), "--perfetto", str(out))
    assert result.exit_code == 0, result.output
    trace = json.loads(out.read_text())
    assert_chrome_trace(trace)
    calls = [ev for ev in trace["traceEvents"] if ev.get("cat") == "kernel" and "::ep::" in ev["name"]]
    assert len(calls) == 12 and not [ev for ev in trace["traceEvents"] if ev["name"].startswith("nccl:")]
    first = calls[0]["args"]
    assert (first["library"], first["pg"], first["dimension"], first["op"]) == ("DeepEP", "DeepEP: internode", "ep",
                                                                                "all_to_all")
    assert first["bytes"] is None  # unknown, not 0
    assert sum(ev["args"]["exposed_ns"] for ev in calls) == 2 * 3 * 50_000  # combine's 50 us past the GEMM
    original, back = commprof.open_run(tmp_path / "run"), commprof.open_run(out)
    assert_frame_equal(_collectives(original), _collectives(back))
    assert_frame_equal(commprof.analyze(original).steps, commprof.analyze(back).steps)
    groups = commprof.analyze(back).process_groups.filter(pl.col("pg") == "DeepEP: internode")
    assert groups["dimension"].to_list() == ["ep"]
