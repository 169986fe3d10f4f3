"""Flight Recorder dumps (commprof/ingest/flight_recorder, analyzers/hang.py): PyTorch's pickles read with an
unpickler that constructs nothing, the real 16-rank Megatron dumps with injected faults
(../shared/real_inputs/flight_recorder), hand-built dumps with a known hang, and hostile pickles."""

from __future__ import annotations

import json
import pickle
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from commprof.analyzers.hang import hang_report
from commprof.ingest.flight_recorder import find_dumps, read_dumps
from commprof.ingest.flight_recorder.unpickle import RefusedPickle, load_plain

Cli = Callable[..., Result]
REAL = Path(__file__).resolve().parents[1].parent / "shared" / "real_inputs" / "flight_recorder"
needs_real = pytest.mark.skipif(not REAL.is_dir(), reason=f"real Flight Recorder dumps not here ({REAL})")


def _fault_ranks(case: str) -> list[int]:
    text = (REAL / case / "fault_injection.log").read_text()
    return [int(r) for r in re.findall(r"\d+", text.splitlines()[0])]


@needs_real
def test_real_gpu_error_dumps_give_16_ranks_their_groups_and_the_rank_that_stopped() -> None:
    warnings: list[str] = []
    entries, groups = read_dumps(find_dumps(REAL / "megatron16_gpu_error"), warnings)
    assert warnings == [] and sorted(entries["rank"].unique().to_list()) == list(range(16))
    rank0 = groups.filter(groups["rank"] == 0)
    assert rank0.height == 13 and set(groups["version"].unique().to_list()) == {"2.9"}
    tp = rank0.filter(rank0["desc"] == "TENSOR_MODEL_PARALLEL_GROUP").row(0, named=True)
    assert (tp["pg"], tp["ranks"]) == ("35", [0, 1])
    hang = hang_report(entries, groups)
    assert hang is not None and hang.stalled and not hang.timed
    # the log injects a GPU error on ranks 12 and 14; the dumps show rank 12 stopped behind its peers in
    # every group it shares with them (rank 14 kept pace until the dump: nothing in the dumps says otherwise)
    assert hang.suspects == (12,) and 12 in _fault_ranks("megatron16_gpu_error")
    assert set(hang.groups["behind"].explode().to_list()) == {12}
    tp12 = hang.groups.filter(hang.groups["pg"] == "41").row(0, named=True)
    assert (tp12["seq"], tp12["waiting"], tp12["behind_last_seq"]) == (42826, [13], [42817])


@needs_real
def test_real_lock_gil_dumps_name_the_two_ranks_that_never_arrived() -> None:
    entries, groups = read_dumps(find_dumps(REAL / "megatron16_lock_gil"), [])
    hang = hang_report(entries, groups)
    assert hang is not None
    assert hang.suspects == hang.empty_dumps == (9, 14) == tuple(_fault_ranks("megatron16_lock_gil"))
    assert len(hang.ranks) == 16


@needs_real
def test_analyze_on_a_folder_of_dumps_reports_the_hang_and_what_it_cannot_know(cli: Cli) -> None:
    result = cli("analyze", str(REAL / "megatron16_lock_gil"), "--format", "json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["flight_recorder"]["suspects"] == [9, 14]
    assert any("bandwidth" in what for what in report["not_available"])
    text = cli("analyze", str(REAL / "megatron16_gpu_error"), env={"COLUMNS": "200"}).output
    assert "look first at rank(s) 12" in text and "TENSOR_MODEL_PARALLEL_GROUP" in text


def _entry(pg: str, seq: int, op: str, record_id: int, t: int, state: str = "scheduled") -> dict[str, Any]:
    return {"record_id": record_id, "pg_id": 0, "process_group": (pg, "TENSOR_MODEL_PARALLEL_GROUP"),
            "collective_seq_id": seq, "p2p_seq_id": 0, "op_id": seq, "profiling_name": f"nccl:{op}",
            "time_created_ns": t, "input_sizes": [[1024]], "output_sizes": [[1024]], "input_dtypes": ["Float"],
            "output_dtypes": ["Float"], "state": state, "time_discovered_started_ns": None,
            "time_discovered_completed_ns": None, "retired": False, "timeout_ms": 600000, "is_p2p": False,
            "duration_ms": 1.5}


def _dump(path: Path, entries: list[dict[str, Any]], members: str = "[0, 1, 2, 3]") -> None:
    doc = {"version": "2.9", "pg_config": {"7": {"name": "7", "desc": "TENSOR_MODEL_PARALLEL_GROUP",
                                                 "ranks": members}},
           "pg_status": {}, "entries": entries}
    path.write_bytes(pickle.dumps(doc, protocol=4))


def test_hand_built_hang_behind_and_absent(tmp_path: Path) -> None:
    """Ranks 0 and 1 wait in all_reduce seq 5; rank 2 stopped at seq 4; rank 3 dumped nothing."""
    for rank in (0, 1):
        _dump(tmp_path / f"nccl_trace_rank_{rank}", [_entry("7", s, "all_reduce", s, 1_000 * s) for s in (3, 4, 5)])
    _dump(tmp_path / "nccl_trace_rank_2", [_entry("7", s, "all_reduce", s, 1_000 * s, "completed") for s in (3, 4)])
    _dump(tmp_path / "nccl_trace_rank_3", [])
    entries, groups = read_dumps(find_dumps(tmp_path), [])
    assert entries.height == 8 and entries["bytes_in"].unique().to_list() == [4096]
    hang = hang_report(entries, groups)
    assert hang is not None and hang.timed
    row = hang.groups.row(0, named=True)
    assert (row["seq"], row["op"], row["waiting"], row["behind"], row["behind_last_seq"], row["absent"]) == \
        (5, "all_reduce", [0, 1], [2], [4], [3])
    assert hang.suspects == (2, 3) and hang.empty_dumps == (3,)


def test_no_hang_when_every_member_reached_the_last_call(tmp_path: Path) -> None:
    for rank in (0, 1):
        _dump(tmp_path / f"_dump_{rank}", [_entry("7", 9, "all_gather", 1, 100, "completed")], "[0, 1]")
    hang = hang_report(*read_dumps(find_dumps(tmp_path), []))
    assert hang is not None and not hang.stalled and hang.suspects == ()


class Boom:
    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (Path("/tmp/commprof-fr-must-not-exist"),))


def test_a_pickle_that_names_a_class_is_refused_and_runs_nothing(tmp_path: Path, cli: Cli) -> None:
    marker = Path("/tmp/commprof-fr-must-not-exist")
    marker.unlink(missing_ok=True)
    hostile = pickle.dumps({"version": "2.9", "entries": [Boom()]}, protocol=4)
    with pytest.raises(RefusedPickle, match="names a class"):
        load_plain(hostile)
    (tmp_path / "nccl_trace_rank_0").write_bytes(hostile)
    _dump(tmp_path / "nccl_trace_rank_1", [_entry("7", 1, "all_reduce", 1, 100)], "[1]")
    (tmp_path / "nccl_trace_rank_2").write_bytes(pickle.dumps({"entries": []}, protocol=4)[:9])  # cut short
    result = cli("analyze", str(tmp_path), "--format", "json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert not marker.exists()
    said = " ".join(report["warnings"])
    assert "2 dump(s) unreadable" in said and "names a class" in said and "Traceback" not in result.output
    assert report["flight_recorder"]["ranks_dumped"] == [1]


def test_dumps_beside_a_synth_run_reach_the_analysis(tmp_path: Path, cli: Cli) -> None:
    out = tmp_path / "run"
    made = cli("synth", str(out), "--nodes", "1", "--gpus-per-node", "2", "--layout", "tp=2", "--steps", "2",
               "--micro-batches", "1", "--layers", "1", "--flight-recorder")
    assert made.exit_code == 0, made.output
    report = json.loads(cli("analyze", str(out), "--format", "json").stdout)
    fr = report["flight_recorder"]
    assert fr["ranks_dumped"] == [0, 1] and fr["stalled"] is False
    assert report["run"]["sources"] == {"kineto": [0, 1]}
