"""Issue 39: costs that grow with the data, not with ranks x group size. Small runs here (the 16,384-rank
figures are `make bench-scale`'s, in docs/scale.md); each test pins one place that used to hold or send
ranks x group size, against the plain computation it replaced."""

from __future__ import annotations

import pickle
import random
import shutil
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import commprof
from commprof.ingest import store
from commprof.ingest.discover import discover
from commprof.ingest.rank_sidecar import SidecarIndex
from commprof.ingest.runner import InProcess
from commprof.synth_run import make_run

REPO = Path(__file__).resolve().parents[1]
SAMPLES = ("gloo_4rank_profiler", "tp2_pp2_dp2", "synth_2x8_tp8_dp2")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("frontier-runs")
    out = {}
    for name in SAMPLES:
        out[name] = root / name
        shutil.copytree(REPO / "sample_traces" / name, out[name], ignore=shutil.ignore_patterns("tables"))
    out["synth64"] = make_run(root / "synth64", ranks=64, steps=2)
    return out


@pytest.mark.parametrize("name", [*SAMPLES, "synth64"])
def test_distinct_group_rows_equal_the_unique_of_every_ranks_rows(runs: dict[str, Path], tmp_path: Path,
                                                                  name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store, "BATCH_MAX_FILES", 4)  # traces in several batch files, rows sliced from each
    run = commprof.open_run(runs[name], cache_dir=tmp_path / "cache", runner=InProcess())
    assert name == "gloo_4rank_profiler" or len({store.part_file(rf.meta, rf.entry.stem) for rf in run.rank_files}) > 1
    traces = [(rf.entry, rf.meta) for rf in run.rank_files]
    cache = run.ingested.cache
    for chunk in (1, 2, 32):  # files made distinct together
        monkeypatch.setattr(store, "DISTINCT_CHUNK", chunk)
        for order in (traces, list(reversed(traces)), random.Random(7).sample(traces, len(traces))):
            want = store.read_rows(cache, "process_groups", order).unique(maintain_order=True)
            got = store.distinct_rows(cache, "process_groups", order)
            assert_frame_equal(got, want, check_exact=True)
    assert run.process_groups.height == run.process_groups["pg"].n_unique()


def test_distinct_rows_tell_rows_of_one_hash_apart_by_value(runs: dict[str, Path], tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Every row hashed alike: rows still differ by value, none is lost, none doubled."""
    run = commprof.open_run(runs["synth64"], cache_dir=tmp_path / "cache", runner=InProcess())
    traces = [(rf.entry, rf.meta) for rf in run.rank_files]
    want = store.read_rows(run.ingested.cache, "process_groups", traces).unique(maintain_order=True)
    monkeypatch.setattr(pl.DataFrame, "hash_rows", lambda self, *a, **k: pl.Series([0] * self.height, dtype=pl.UInt64))
    got = store.distinct_rows(run.ingested.cache, "process_groups", traces)
    assert_frame_equal(got, want, check_exact=True)


def test_parse_tasks_carry_where_the_sidecars_are_not_their_members(runs: dict[str, Path]) -> None:
    """A task is sent the sidecars' paths and lookups: its size does not grow with the members listed."""
    source = discover(runs["synth64"])
    sidecars, key = store.read_sidecars(source)
    assert len(sidecars) == 64 and key
    sent = pickle.loads(pickle.dumps(sidecars))
    assert len(pickle.dumps(sidecars)) < 64 * 200  # paths and two small lookups, no member lists
    for rank in (0, 37, 63):
        picked = sent.pick(rank, None)
        assert picked is not None and picked["rank"] == rank
        assert any(len(g.get("ranks") or []) == 64 for g in picked["process_groups"])  # read from its file
    pid = next(s["pid"] for s in sidecars if s["rank"] == 5)
    assert sent.pick(None, pid)["rank"] == 5 and sent.pick(999, None) is None
    # what the commprof process keeps of each: no member lists
    assert all("process_groups" not in s for s in sidecars)
    assert isinstance(sidecars, SidecarIndex)


def test_leave_one_out_medians_equal_the_plain_computation() -> None:
    """The straggler rule's excess from sorted columns: the same floats as deleting each rank in turn (ties,
    even and odd group sizes, one step), without a (ranks, ranks - 1, steps) array."""
    import numpy as np

    from analyzers.lateness import _excess

    def plain(table: np.ndarray) -> list[float]:
        return [float(np.median(table[i] - np.median(np.delete(table, i, axis=0), axis=0)))
                for i in range(table.shape[0])]

    rng = np.random.default_rng(3)
    for m in (2, 3, 4, 5, 8, 17, 64):
        for n in (1, 2, 3, 20):
            for trial in range(6):
                table = (rng.integers(0, 4, (m, n)) * 1e6) if trial % 2 else rng.normal(size=(m, n)) * 1e7
                assert _excess(table.astype(float)) == plain(table.astype(float))


SIDECARS = [
    {"rank": 3, "pid": 77, "host": "h", "window": {"killed_by": "SIGTERM"}, "ended_at": None,
     "process_groups": [{"name": "0", "desc": "default_pg", "ranks": list(range(64)), "size": 64, "backend": "nccl",
                         "worker_tids": [1, 2]}]},
    {"rank": "3", "pid": -1, "process_groups": [{"name": None}, {"name": 5, "worker_tids": "x", "size": -2,
                                                                  "desc": 3, "ranks": "[0, 1]"}]},
    {"rank": 1 << 70, "process_groups": "not a list"},
    {"rank": 2, "process_groups": [7, {"name": "1"}]},
    {"rank": 2, "ended_at": "2026-12-07T00:00:00Z", "extra": {"deep": [1, 2, {"x": None}]}},
    [1, 2, 3],
]


@pytest.mark.parametrize("data", SIDECARS)
def test_slim_sidecars_clean_alike_the_whole_ones(data: object) -> None:
    """The commprof process reads sidecars without their member lists: the same fields kept and the same
    problems said as reading each whole."""
    import json

    from commprof.ingest.rank_sidecar import clean_sidecar, decode_sidecar, decode_slim

    raw = json.dumps(data).encode()
    whole, whole_problems = clean_sidecar(decode_sidecar(raw), "f")
    slim, slim_problems = clean_sidecar(decode_slim(raw), "f")
    assert slim_problems == whole_problems
    if whole is None:
        assert slim is None
        return
    assert slim is not None
    for key in ("rank", "pid", "host", "window", "ended_at"):
        assert slim.get(key) == whole.get(key)
    fields = ("name", "desc", "size", "backend", "worker_tids")
    assert [[g.get(k) for k in fields] for g in slim.get("process_groups") or []] == \
        [[g.get(k) for k in fields] for g in whole.get("process_groups") or []]


def test_work_table_equals_the_pivot_it_replaced() -> None:
    """The straggler rule's (steps, ranks) work table without a column per rank: the pivot's numbers (sums, a
    missing cell 0 as the pivot's sum makes it, NaN kept), ranks in first appearance, steps in order."""
    import numpy as np

    from analyzers.lateness import _work_table

    rng = random.Random(1)
    for _ in range(200):
        rows = [(r, s, rng.random() * 1e6 if rng.random() > 0.02 else float("nan"))
                for r in rng.sample(range(100), rng.randint(1, 8)) for s in rng.sample(range(50), rng.randint(1, 5))
                for _ in range(rng.choice([0, 1, 1, 1, 2]))]
        rng.shuffle(rows)
        if not rows:
            continue
        work = pl.DataFrame(rows, schema={"rank": pl.Int64, "step": pl.Int64, "work_ns": pl.Float64}, orient="row")
        pivot = work.pivot(on="rank", index="step", values="work_ns", aggregate_function="sum").sort("step")
        assert np.array_equal(pivot.drop("step").to_numpy().astype(float), _work_table(work), equal_nan=True)


@pytest.mark.parametrize("ports", [True, False], ids=["ports captured", "no topology capture"])
def test_a_slow_host_behind_pipeline_groups_is_named(tmp_path: Path, ports: bool) -> None:
    """Synthetic (answers known by construction): tp=8, pp=4, dp=4 on 16 hosts, gpu-node-10's NIC at a quarter
    of its speed. The DP groups of its stage are slow; its pipeline groups are mostly fast pairs and read healthy
    as a whole, which cleared the host (the 16,384-rank run with pp=4 named none). Now a rank's sends and
    receives clear its host only when each of its peers' links is fast: gpu-node-10 is named, with or without the
    topology capture's port speeds to narrow it."""
    from commprof.synth import SynthConfig, generate

    cfg = SynthConfig(nodes=16, gpus_per_node=8, sizes={"tp": 8, "pp": 4, "dp": 4}, slow_link="gpu-node-10",
                      steps=2, layers=1, micro_batches=2, seed=7)
    run = tmp_path / "pp4"
    generate(cfg, run, compresslevel=1)
    if not ports:
        shutil.rmtree(run / "raw" / "topology")
    report = commprof.analyze_run(run)
    links = [f for f in report["findings"] if f["id"] == "link_efficiency"]
    assert [f["key"] for f in links] == ["link_efficiency:ib:gpu-node-10"], [(f["key"], f["title"]) for f in links]
    assert "(hosts gpu-node-10)" in links[0]["title"]
    if not ports:
        return
    # --ranks: the slow host with another of its stage (they share its DP groups): the same finding; with a host
    # of another stage (no group of both traced: no call's transfer can be told from its wait) no link finding
    # (a send whose peer is not traced read at 7% of the peak and blamed the groups of both hosts)
    for other, want in (("gpu-node-09", ["link_efficiency:ib:gpu-node-10"]), ("gpu-node-01", [])):
        ranks = [r for r in range(128) if r // 8 in (10, int(other[-2:]))]
        part = _analyze(commprof.open_run(run, ranks=ranks))
        assert [f["key"] for f in part["findings"] if f["id"] == "link_efficiency"] == want, other


def _analyze(run: object) -> dict[str, object]:
    from commprof.analyzers.pipeline import AnalysisSettings
    from commprof.report import analysis_json

    return analysis_json.build(commprof.analyze(run, AnalysisSettings()))
