"""Process-group attribution of Gloo ops: the rules on hand-built events, then exactness on a real
4-rank DeviceMesh run (dp=2 x tp=2, DDP over dp, collectives and p2p on every group)."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from commprof.ingest.kineto.gloo_groups import Attribution, attribute_gloo_ops, parse_annotation, worker_threads
from commprof.record.rank.annotate import escape, format_annotation

SCRIPTS = Path(__file__).resolve().parent / "record_scripts"


def x(name: str, tid: int, ts: float, dur: float) -> dict[str, Any]:
    return {"ph": "X", "name": name, "tid": tid, "ts": ts, "dur": dur, "pid": 1}


SIDECAR = {"process_groups": [
    {"name": "0", "desc": "default_pg", "ranks": [0, 1], "worker_tids": [11, 12]},
    {"name": "2", "desc": "mesh_tp", "ranks": [0, 1], "worker_tids": [21, 22]},
    {"name": "9", "desc": "uncaught", "ranks": [0, 1], "worker_tids": None},
]}


def test_annotation_format_round_trips_with_escaping() -> None:
    name = format_annotation("odd;name=5%", "send", seq=7, peer=3)
    assert name == "commprof:pg=odd%3Bname%3D5%25;op=send;seq=7;peer=3"
    assert parse_annotation(name) == {"pg": "odd;name=5%", "op": "send", "seq": "7", "peer": "3"}
    assert parse_annotation("commprof:op=send") is None  # no pg: not ours
    assert parse_annotation("ProfilerStep#3") is None
    assert escape("a=b") == "a%3Db"


def test_worker_threads_map_every_op_on_them() -> None:
    assert worker_threads(SIDECAR) == {11: "0", 12: "0", 21: "2", 22: "2"}
    events = [x("gloo:all_reduce", 21, 100.0, 5.0), x("gloo:all_reduce", 12, 90.0, 5.0),
              x("aten::add", 21, 101.0, 1.0), {"ph": "M", "name": "thread_name", "tid": 21}]
    assert attribute_gloo_ops(events, SIDECAR) == {
        0: Attribution("2", "worker_thread"), 1: Attribution("0", "worker_thread")}


def test_inline_ops_take_the_innermost_enclosing_annotation() -> None:
    events = [
        x("commprof:pg=2;op=send;seq=4;peer=1", 1, 100.0, 50.0),  # outer call
        x("commprof:pg=0;op=recv;seq=9;peer=1", 1, 110.0, 20.0),  # nested inside it
        x("gloo:recv", 1, 115.0, 10.0),  # inside both: the inner one wins
        x("gloo:send", 1, 140.0, 30.0),  # starts in the outer only (ends after it: async)
        x("gloo:send", 1, 150.0, 5.0),  # starts at the outer's end: rounding tolerance
        x("gloo:send", 1, 200.0, 5.0),  # outside every annotation
        x("gloo:send", 2, 115.0, 5.0),  # another thread: the annotations of thread 1 do not apply
    ]
    got = attribute_gloo_ops(events, SIDECAR)
    assert got[2] == Attribution("0", "annotation", op="recv", seq=9, peer=1)
    assert got[3] == Attribution("2", "annotation", op="send", seq=4, peer=1)
    assert got[4].pg == "2"
    assert got[5] == Attribution(None, "none")
    assert got[6] == Attribution(None, "none")


def test_lookup_climbs_past_closed_siblings() -> None:
    # many short annotations closed before the op; the enclosing one started long before them
    events = [x("commprof:pg=2;op=all_reduce", 1, 0.0, 10_000.0)]
    events += [x(f"commprof:pg=0;op=all_reduce;seq={i}", 1, 10.0 + i * 5, 2.0) for i in range(1000)]
    events.append(x("gloo:send", 1, 9_000.0, 1.0))
    assert attribute_gloo_ops(events, SIDECAR)[len(events) - 1].pg == "2"


# ---- a real run ----------------------------------------------------------------------------------

# numel -> group desc, as built into mesh_tp_dp.py (DDP's one bucket on dp: 7*5 + 5 = 40 floats)
TRUTH = {n: "mesh_tp" for n in (111, 55, 77, 88, 12)} | {n: "mesh_dp" for n in (222, 66, 99, 40, 14)}
TRUTH[333] = "default_pg"


@pytest.fixture(scope="module")
def mesh_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("mesh") / "run"
    command = [sys.executable, "-m", "commprof", "record", "-o", str(run_dir), "--no-analyze", "--",
               sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4",
               str(SCRIPTS / "mesh_tp_dp.py")]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMMPROF_", "NCCL_", "TORCH_FR_"))}
    env["HANG_DUMP_S"] = "90"  # a hung rank prints its stacks and exits instead of eating the timeout
    done = subprocess.run(command, capture_output=True, text=True, timeout=180, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return run_dir


@pytest.mark.torchrun
@pytest.mark.slow
def test_every_gloo_op_gets_its_process_group_exactly(mesh_run: Path) -> None:
    groups_by_rank: dict[int, dict[str, tuple[str, tuple[int, ...]]]] = {}
    for rank in range(4):
        sidecar = json.loads((mesh_run / "raw" / "ranks" / f"rank-{rank}.json").read_text())
        with gzip.open(mesh_run / "raw" / "traces" / f"rank-{rank}.json.gz", "rt") as fh:
            events = json.load(fh)["traceEvents"]
        desc = {g["name"]: g["desc"] for g in sidecar["process_groups"]}
        groups_by_rank[rank] = {g["desc"]: (g["name"], tuple(g["ranks"])) for g in sidecar["process_groups"]}
        got = attribute_gloo_ops(events, sidecar)
        ops = [i for i, e in enumerate(events) if e.get("ph") == "X" and str(e.get("name")).startswith("gloo:")]
        assert sorted(got) == ops
        counted: dict[tuple[str, str], int] = {}
        for index in ops:
            event, attribution = events[index], got[index]
            dims = event.get("args", {}).get("Input Dims")
            numel = dims[0][0] if dims and dims[0] else None
            expected = TRUTH[numel] if numel is not None else "mesh_tp"  # the one op without a size: tp barrier
            assert attribution.pg is not None, (rank, event)
            assert desc[attribution.pg] == expected, (rank, event["name"], numel, attribution)
            inline = event["name"] in ("gloo:send", "gloo:recv")
            assert attribution.source == ("annotation" if inline else "worker_thread")
            if inline:
                assert attribution.op in ("send", "recv") and attribution.peer is not None
                assert attribution.peer in groups_by_rank[rank][expected][1] and attribution.peer != rank
            key = (event["name"], expected)
            counted[key] = counted.get(key, 0) + 1
        # the three recorded iterations hold every op of the script on every rank
        assert counted[("gloo:all_reduce", "mesh_dp")] == 3 * 2  # explicit + DDP's bucket
        assert counted[("gloo:all_reduce", "mesh_tp")] == 3 * 3  # sync, async, reduce_scatter
        assert counted[("gloo:all_reduce", "default_pg")] == 3
        assert counted[("gloo:barrier", "mesh_tp")] == 3
        assert sum(n for (name, _), n in counted.items() if name in ("gloo:send", "gloo:recv")) == 3 * 4
    # group names and members agree across ranks: tp pairs {0,1},{2,3}, dp pairs {0,2},{1,3}
    for rank, groups in groups_by_rank.items():
        assert groups["mesh_tp"][1] == (rank - rank % 2, rank - rank % 2 + 1)
        assert groups["mesh_dp"][1] == (rank % 2, rank % 2 + 2)
        assert groups["default_pg"] == ("0", (0, 1, 2, 3))
        peer_tp = groups["mesh_tp"][1][1 - rank % 2]
        assert groups_by_rank[peer_tp]["mesh_tp"] == groups["mesh_tp"]


@pytest.mark.torchrun
@pytest.mark.slow
def test_flight_recorder_dump_names_the_same_groups(mesh_run: Path) -> None:
    sidecar = json.loads((mesh_run / "raw" / "ranks" / "rank-0.json").read_text())
    names = {g["name"]: g["desc"] for g in sidecar["process_groups"]}
    dump = json.loads((mesh_run / "raw" / "flight_recorder" / "rank-0.json").read_text())
    entries = dump["entries"]
    assert entries and sidecar["flight_recorder_entries"] == len(entries)
    assert {tuple(e["process_group"]) for e in entries} <= set(names.items())
