"""The bundled runs recorded with ``commprof record`` (sample_traces/tp2_dp2, tp2_pp2_dp2): every
collective and p2p call gets exactly the process group and bytes that the training script's layout
says (sample_traces/train_3d.py: expected_calls), and every group its dimension and tier."""

from __future__ import annotations

import importlib.util
from collections import Counter
from pathlib import Path

import polars as pl
import pytest

import commprof
from commprof.analyzers.pipeline import AnalysisSettings

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"
spec = importlib.util.spec_from_file_location("train_3d", SAMPLES / "train_3d.py")
assert spec is not None and spec.loader is not None
train_3d = importlib.util.module_from_spec(spec)
spec.loader.exec_module(train_3d)

LAYOUTS = {"tp2_dp2": (2, 1, 2), "tp2_pp2_dp2": (2, 2, 2)}


@pytest.fixture(scope="module", params=sorted(LAYOUTS))
def sample(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, commprof.run.Run]:
    name = request.param
    run = commprof.open_run(SAMPLES / name, cache_dir=tmp_path_factory.mktemp(name))
    return name, run


def test_every_call_has_its_group_and_bytes(sample: tuple[str, commprof.run.Run]) -> None:
    name, run = sample
    tp, pp, dp = LAYOUTS[name]
    analysis = commprof.analyze(run)
    desc = dict(zip(run.process_groups["pg"], run.process_groups["desc"], strict=True))
    coll = analysis.collectives.filter(pl.col("step").is_not_null())
    assert coll.height > 0 and coll["pg"].is_in(list(desc)).all(), "a call without its process group"
    steps = sorted(coll["step"].unique().to_list())
    assert len(steps) == 3  # the default window: wait 1, warmup 1, active 3
    for rank in range(tp * pp * dp):
        expected = train_3d.expected_calls(rank, tp, pp, dp)
        for step in steps:
            calls = coll.filter((pl.col("rank") == rank) & (pl.col("step") == step))
            seen: Counter[tuple[str, str, int | None]] = Counter()
            ddp_bytes = 0
            for row in calls.iter_rows(named=True):
                key = (desc[row["pg"]], row["op"])
                if key == ("mesh_dp", "all_reduce"):  # DDP's gradient buckets
                    ddp_bytes += row["bytes"]
                    continue
                seen[(*key, row["bytes"])] += 1
            if dp > 1:
                seen["mesh_dp", "all_reduce", None] += 1
                assert ddp_bytes == train_3d.param_bytes(), (name, rank, step)
            assert seen == expected, (name, rank, step)


def test_groups_are_classified(sample: tuple[str, commprof.run.Run]) -> None:
    name, run = sample
    pgs = commprof.analyze(run, AnalysisSettings()).process_groups
    dims = {r["desc"]: r["dimension"] for r in pgs.iter_rows(named=True)}
    expected = {"default_pg": "world", "mesh_tp": "tp", "mesh_dp": "dp"}
    if "pp" in name:
        expected["mesh_pp"] = "pp"
    assert dims == expected
    assert set(pgs["tier"]) == {"loopback"}  # Gloo, one host


def test_sample_runs_stay_small() -> None:
    for name in LAYOUTS:
        size = sum(p.stat().st_size for p in (SAMPLES / name).rglob("*") if p.is_file() and "tables" not in p.parts)
        assert size <= 3 * 1024 * 1024, (name, size)
