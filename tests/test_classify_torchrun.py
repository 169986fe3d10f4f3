"""Dimension and tier of every process group of a real recorded run: torchrun, 4 Gloo ranks on one host,
DeviceMesh dp=2 × tp=2 (tests/record_scripts/mesh_tp_dp.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

import commprof
from commprof.analyzers.classify import classify_dimensions, parse_layout
from commprof.analyzers.pipeline import AnalysisSettings
from commprof.run import Run, open_run

pytestmark = [pytest.mark.torchrun, pytest.mark.slow]
SCRIPT = Path(__file__).parent / "record_scripts" / "mesh_tp_dp.py"
EXPECTED = {"default_pg": ("world", [[0, 1, 2, 3]]), "mesh_tp": ("tp", [[0, 1], [2, 3]]),
            "mesh_dp": ("dp", [[0, 2], [1, 3]])}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Run:
    run_dir = tmp_path_factory.mktemp("mesh") / "run"
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "4", str(SCRIPT)]
    env = {**os.environ, "STEPS": "5", "HANG_DUMP_S": "150"}
    try:
        done = subprocess.run([sys.executable, "-m", "commprof", "record", "-o", str(run_dir), "--no-analyze",
                               "--", *torchrun], capture_output=True, text=True, timeout=240, env=env)
    except subprocess.TimeoutExpired:
        pytest.skip("torchrun did not finish in 240 s")
    if done.returncode != 0 or not (run_dir / "raw" / "traces").is_dir():
        pytest.skip(f"torchrun failed (exit {done.returncode}): {done.stderr[-500:]}")
    return open_run(run_dir)


def _by_desc(pgs: pl.DataFrame) -> dict[str, tuple[set[str], list[list[int]]]]:
    out: dict[str, tuple[set[str], list[list[int]]]] = {}
    for r in pgs.iter_rows(named=True):
        dims, ranks = out.setdefault(r["desc"], (set(), []))
        dims.add(r["dimension"])
        ranks.append(sorted(r["ranks"]))
    return {k: (v[0], sorted(v[1])) for k, v in out.items()}


def test_names_decide(recorded: Run) -> None:
    pgs = commprof.analyze(recorded).process_groups
    assert {d: ({dim}, ranks) for d, (dim, ranks) in EXPECTED.items()} == _by_desc(pgs)
    assert set(pgs["dimension_source"]) == {"name"} and set(pgs["confidence"]) == {0.95}
    assert set(pgs["tier"]) == {"loopback"} and set(pgs["tier_source"]) == {"hosts"}


@pytest.mark.parametrize("layout", [None, "tp=2,dp=2"])
def test_without_descriptions(recorded: Run, layout: str | None) -> None:
    """Descriptions removed: structure alone (contiguous, frequent, small -> tp; strided, rarer, larger
    -> dp; all ranks -> world), or the layout."""
    analysis = commprof.analyze(recorded)
    pgs = recorded.process_groups
    blind = classify_dimensions(pgs.with_columns(pl.lit(None, pl.String).alias("desc")), analysis.collectives,
                                analysis.steps, 4, parse_layout(layout) if layout else None)
    got = dict(zip(pgs["desc"], blind["dimension"], strict=True))
    assert got == {d: dim for d, (dim, _) in EXPECTED.items()}
    assert set(blind["dimension_source"]) == {"layout" if layout else "structure"}
    assert min(blind["confidence"]) >= (1.0 if layout else 0.5)


def test_layout_wins_and_dimension_tier_table(recorded: Run) -> None:
    analysis = commprof.analyze(recorded, AnalysisSettings(layout=parse_layout("tp=2,dp=2")))
    assert set(analysis.process_groups["dimension_source"]) == {"layout"}
    table = analysis.dimension_tier
    assert set(zip(table["dimension"], table["tier"], strict=True)) == {
        ("tp", "loopback"), ("dp", "loopback"), ("world", "loopback")}
    assert table["efficiency"].is_null().all()  # loopback has no peak
    total = analysis.steps["exposed_comm_ns"].sum() / analysis.steps.height
    assert table["exposed_ns_per_step"].sum() == pytest.approx(total, rel=1e-6, abs=1)
