"""Hang reports at scale (issue 39, item 3): Flight Recorder dumps of a job with one stuck data-parallel group,
written by commprof.synth.fr_hang (the 16,384-rank figures are bench/fr_scale.py's, in docs/scale.md). Here
1,024 ranks: the stuck group and the ranks behind it are named, long rank lists are summarised, each group's
members are kept once, and the column-wise reader makes what the reference per-entry row makes."""

from __future__ import annotations

import json
import pickle
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from click.testing import Result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from commprof.analyzers.hang import ENTRY_COLUMNS, hang_report
from commprof.ingest.flight_recorder import FLIGHT_RECORDER, find_dumps, read_dumps
from commprof.ingest.flight_recorder.dumps import _Entries, _row
from commprof.report.other_sources import LIST_MAX, _ranks
from commprof.synth.fr_hang import HangDumps, write_dumps

Cli = Callable[..., Result]
SMALL = HangDumps(tp=8, dp=128)  # 1,024 ranks, 256 entries each


@pytest.fixture(scope="module")
def dumps(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    out = tmp_path_factory.mktemp("fr-hang") / "dumps"
    return out, write_dumps(SMALL, out, jobs=1)


def test_the_stuck_group_and_the_ranks_behind_it_are_named(dumps: tuple[Path, dict[str, Any]]) -> None:
    out, truth = dumps
    warnings: list[str] = []
    entries, groups = read_dumps(find_dumps(out), warnings, ENTRY_COLUMNS)
    assert warnings == [] and entries.height == SMALL.world * SMALL.entries
    hang = hang_report(entries, groups)
    assert hang is not None and len(hang.ranks) == SMALL.world and hang.empty_dumps == ()
    lagging = truth["lagging"]
    assert hang.suspects == tuple(lagging) and len(lagging) == SMALL.lagging
    assert hang.groups.height == truth["stalled_groups"] == 1 + SMALL.dp  # the DP group, then every TP group
    first = hang.groups.row(0, named=True)  # the first to stall: its call was made before any other stalled one
    members = list(range(SMALL.stuck_group, SMALL.world, SMALL.tp))
    assert (first["pg"], first["desc"], first["size"], first["seq"], first["op"]) == \
        (truth["stuck_pg"], "DATA_PARALLEL_GROUP", SMALL.dp, truth["stuck_seq"], truth["stuck_op"])
    assert first["behind"] == lagging and first["behind_last_seq"] == [truth["lagging_last_seq"]] * len(lagging)
    assert first["waiting"] == [r for r in members if r not in lagging] and first["absent"] == []
    # every TP group waits for its member in the stuck group, which waits in the DP call: never a suspect
    tp = hang.groups.slice(1)
    assert set(tp["desc"].to_list()) == {"TENSOR_MODEL_PARALLEL_GROUP"}
    assert sorted(tp["behind"].explode().to_list()) == members


def test_without_the_cascade_the_stuck_group_is_the_only_one(tmp_path: Path) -> None:
    cfg = HangDumps(tp=4, dp=16, entries=64, lagging=2, stuck_group=1, cascade=False)
    truth = write_dumps(cfg, tmp_path, jobs=1)
    hang = hang_report(*read_dumps(find_dumps(tmp_path), []))
    assert hang is not None and hang.groups.height == 1 == truth["stalled_groups"]
    row = hang.groups.row(0, named=True)
    assert (row["pg"], row["seq"], row["behind"]) == (truth["stuck_pg"], truth["stuck_seq"], truth["lagging"])
    assert hang.suspects == tuple(truth["lagging"])


def test_the_report_names_them_and_summarises_long_lists(dumps: tuple[Path, dict[str, Any]], cli: Cli) -> None:
    out, truth = dumps
    text = cli("analyze", str(out), env={"COLUMNS": "160"}).output
    assert (f"first to stall: group {truth['stuck_pg']} (DATA_PARALLEL_GROUP, {SMALL.dp} ranks) in {truth['stuck_op']} "
            f"seq {truth['stuck_seq']}: {SMALL.dp - SMALL.lagging} waiting, {SMALL.lagging} behind") in text
    assert f"look first at rank(s) {','.join(map(str, truth['lagging']))}:" in text
    # the DP group's waiting ranks as runs; the table cut to 20 groups and a line counting the rest
    assert f"{SMALL.dp - SMALL.lagging} ranks: 3-" in text and f"{SMALL.dp + 1 - 20} more stalled" in text
    assert len(text.splitlines()) < 120
    assert not re.search(rf"(\d+,){{{LIST_MAX}}}", text)  # no list longer than LIST_MAX written out
    report = json.loads(cli("analyze", str(out), "--format", "json").stdout)["flight_recorder"]
    assert report["suspects"] == truth["lagging"] and len(report["groups"]) == truth["stalled_groups"]
    assert len(report["groups"][0]["waiting"]) == SMALL.dp - SMALL.lagging  # the JSON lists every rank


def test_each_groups_members_are_kept_once(dumps: tuple[Path, dict[str, Any]]) -> None:
    """Every dump lists the default group's 1,024 members: the table keeps them on one row (ranks x group size
    members would be 1M ints here and 268M at 16,384 ranks)."""
    out, _ = dumps
    _, groups = read_dumps(find_dumps(out), [], ["rank"])
    assert groups.height == 3 * SMALL.world  # a row per (rank, group) the dumps name
    listed = groups.drop_nulls("ranks")
    assert listed.height == 1 + SMALL.tp + SMALL.dp == listed["pg"].n_unique()
    assert listed["ranks"].list.len().sum() == 3 * SMALL.world
    default = listed.filter(pl.col("pg") == "0").row(0, named=True)
    assert (default["rank"], default["ranks"]) == (0, list(range(SMALL.world)))


def test_a_group_listed_differently_keeps_each_list(tmp_path: Path) -> None:
    """Two dumps that disagree on a group's members each keep theirs; the hang report takes the largest."""
    for rank, members in ((0, "[0, 1, 2]"), (1, "[0,1,2]"), (2, "[0, 1]")):
        doc = {"version": "2.9", "pg_config": {"5": {"name": "5", "desc": "DP", "ranks": members}},
               "entries": [{"process_group": ("5", "DP"), "collective_seq_id": 1 + (rank < 2), "time_created_ns": 10,
                            "state": "scheduled", "profiling_name": "nccl:all_reduce"}]}
        (tmp_path / f"_dump_{rank}").write_bytes(pickle.dumps(doc, protocol=2))
    entries, groups = read_dumps(find_dumps(tmp_path), [])
    assert groups["ranks"].to_list() == [[0, 1, 2], None, [0, 1]]  # "[0,1,2]" is the same list as "[0, 1, 2]"
    hang = hang_report(entries, groups)
    assert hang is not None and hang.groups.row(0, named=True)["size"] == 3 and hang.suspects == (2,)


WEIRD = st.one_of(st.none(), st.booleans(), st.integers(-(1 << 64), 1 << 64), st.floats(allow_nan=False),
                  st.text(max_size=5),
                  st.sampled_from(["nccl:all_reduce", "completed", "Float", "BFloat16", "x" * 300]))
VALUES = st.one_of(WEIRD, st.lists(WEIRD, max_size=3), st.tuples(WEIRD, WEIRD),
                   st.lists(st.lists(st.integers(0, 9) | WEIRD, max_size=3), max_size=2),
                   st.sampled_from([("7", "TP"), ["7", "TP"], (7, "TP"), (True, "x"), ("7",), [[4, 2]], [(4, 2)],
                                    ["BFloat16"], [[True]], [[1.0]]]))
FIELDS = ("record_id", "process_group", "collective_seq_id", "p2p_seq_id", "profiling_name", "is_p2p", "state",
          "input_sizes", "input_dtypes", "time_created_ns", "duration_ms")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(st.dictionaries(st.sampled_from(FIELDS), VALUES),
                          st.fixed_dictionaries({k: VALUES for k in FIELDS}), st.none()), max_size=12),
       st.sampled_from([None, ENTRY_COLUMNS]))
def test_the_column_reader_makes_what_the_row_reference_makes(entries: list[Any], columns: Any) -> None:
    want_rows = [_row(3, e, "f") for e in entries if isinstance(e, dict)]
    try:
        want: pl.DataFrame | None = pl.DataFrame(want_rows, schema=FLIGHT_RECORDER, strict=False)
    except (TypeError, ValueError, OverflowError, pl.exceptions.PolarsError):
        want = None
    reader = _Entries(columns)
    reader.add(3, entries, "f")
    got = reader.table()
    if want is None:
        assert got is None
        return
    assert got is not None
    assert_frame_equal(got, want.select(list(got.columns)))


@pytest.mark.parametrize(("ranks", "shown"), [
    ([], "-"), ([4], "4"), (list(range(LIST_MAX)), ",".join(map(str, range(LIST_MAX)))),
    (list(range(3, 800, 8)), "100 ranks: 3-795 step 8"),
    ([r for r in range(3, 1024, 8) if r not in (171, 515, 851)], "125 ranks: 3-163 step 8, 179-507 step 8, "
                                                                 "523-843 step 8, 859-1019 step 8"),
    ([*range(20), 40, 41, 60, 80, 81, 82, 100, 120, 140], "29 ranks: 0-19, 40, 41, 60, … (2 more runs)"),
])
def test_long_rank_lists_are_summarised(ranks: list[int], shown: str) -> None:
    assert _ranks(ranks) == shown
