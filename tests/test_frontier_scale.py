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
                                                                  name: str) -> None:
    run = commprof.open_run(runs[name], cache_dir=tmp_path / "cache", runner=InProcess())
    traces = [(rf.entry, rf.meta) for rf in run.rank_files]
    cache = run.ingested.cache
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
