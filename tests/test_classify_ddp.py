"""A plain DDP job's only group is data-parallel: with `--layout dp=N`, and without a layout when the world
group's calls are gradient-sized bucketed all-reduces overlapping backward. Synthetic traces (answers known
by construction) and a real torchrun DDP run on Gloo."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import commprof
from commprof.analyzers.classify import parse_layout
from commprof.analyzers.pipeline import AnalysisSettings
from commprof.run import Run, open_run
from commprof.synth import TraceBuilder

SCRIPT = Path(__file__).parent / "record_scripts" / "ddp_train.py"
MiB = 1 << 20


def _args(pg: str, desc: str, ranks: list[int], nbytes: int) -> dict[str, object]:
    return {"Collective name": "allreduce", "In msg nelems": nbytes // 4, "Out msg nelems": nbytes // 4,
            "dtype": "Float", "Group size": len(ranks), "Process Group Name": pg,
            "Process Group Description": desc, "Process Group Ranks": str(ranks)}


def write_ddp(out: Path, world: int = 4, buckets: int = 4, nbytes: int = 25 * MiB, placement: str = "overlap",
              tp_group: bool = False) -> Path:
    """Per step: forward compute, then backward compute with `buckets` all-reduces. ``placement``:
    "overlap" launches them during the backward (DDP's buckets); "after" back to back after it (a gradient
    sync after the backward); "between" between the layers' compute from the first forward layer on, on
    the critical path (tensor-parallel all-reduces)."""
    world_ranks = list(range(world))
    groups = [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl", "pg_size": world,
               "ranks": world_ranks}]
    if tp_group:
        groups.append({"pg_name": "1", "pg_desc": "undefined", "backend_config": "cuda:nccl", "pg_size": 2,
                       "ranks": [0, 1]})
    for rank in world_ranks:
        b = TraceBuilder(rank=rank, world_size=world, pg_config=groups, gpu=rank)
        for step in range(3):
            t0 = 10_000.0 * step
            b.step(step, t0, t0 + 10_000)
            if placement == "between":
                # each layer's compute, then its all-reduce: forward (1 unit per layer), backward (2 units),
                # then the embedding's backward and the optimizer step
                s = t0 + 100
                for dur in [600] * buckets + [1_200] * buckets:
                    b.compute(s, s + dur)
                    b.nccl(s + dur, s + dur + 200, dev=True, **_args("0", "default_pg", world_ranks, nbytes))
                    s += dur + 200
                b.compute(s, t0 + 9_900)
            else:
                b.compute(t0 + 100, t0 + 3_000)  # forward
                b.compute(t0 + 3_000, t0 + 8_000)  # backward
                start = t0 + 3_500 if placement == "overlap" else t0 + 8_000
                for k in range(buckets):
                    s = start + k * 450
                    b.nccl(s, s + 400, dev=True, **_args("0", "default_pg", world_ranks, nbytes))
            if tp_group and rank in (0, 1):
                b.nccl(t0 + 9_900, t0 + 9_950, dev=True, **_args("1", "undefined", [0, 1], 4 * MiB))
        b.write(out / f"rank-{rank}.json")
    return out


def _dims(run: Path | Run, layout: str | None = None) -> dict[str, tuple[str, str, float]]:
    opened = run if isinstance(run, Run) else open_run(run)
    settings = AnalysisSettings(layout=parse_layout(layout) if layout else None)
    pgs = commprof.analyze(opened, settings).process_groups
    return {r["pg"]: (r["dimension"], r["dimension_source"], r["confidence"]) for r in pgs.iter_rows(named=True)}


def test_bucketed_gradient_allreduces_overlapping_backward_are_dp(tmp_path: Path) -> None:
    assert _dims(write_ddp(tmp_path))["0"] == ("dp", "structure", 0.8)


def test_gradient_sync_after_the_backward_is_dp(tmp_path: Path) -> None:
    """All-reduces back to back after the step's compute (DP sync after the backward, no overlap): dp."""
    assert _dims(write_ddp(tmp_path, placement="after"))["0"] == ("dp", "structure", 0.7)


def test_layout_dp_names_the_world_group_dp(tmp_path: Path) -> None:
    assert _dims(write_ddp(tmp_path, placement="between"), "dp=4")["0"] == ("dp", "layout", 1.0)


@pytest.mark.parametrize(("why", "kwargs"), [
    ("between the layers' compute on the critical path, like tensor-parallel all-reduces", {"placement": "between"}),
    ("scalars (a loss or a metric), not gradients", {"nbytes": 4096}),
    ("another group moves data", {"tp_group": True}),
])
def test_world_stays_world(tmp_path: Path, why: str, kwargs: dict[str, object]) -> None:
    assert _dims(write_ddp(tmp_path, **kwargs))["0"][0] == "world", why  # type: ignore[arg-type]


def test_layout_over_two_dimensions_keeps_world(tmp_path: Path) -> None:
    assert _dims(write_ddp(tmp_path), "tp=2,dp=2")["0"] == ("world", "layout", 1.0)


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    run_dir = tmp_path_factory.mktemp("ddp") / "run"
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", str(SCRIPT)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "STEPS": "6"}
    try:
        done = subprocess.run([sys.executable, "-m", "commprof", "record", "-o", str(run_dir), "--no-analyze",
                               "--", *torchrun], capture_output=True, text=True, timeout=240, env=env)
    except subprocess.TimeoutExpired:
        pytest.skip("torchrun did not finish in 240 s")
    if done.returncode != 0 or not (run_dir / "raw" / "traces").is_dir():
        pytest.skip(f"torchrun failed (exit {done.returncode}): {done.stderr[-500:]}")
    return open_run(run_dir)


@pytest.mark.torchrun
@pytest.mark.slow
def test_real_ddp_on_gloo(ddp_run: Run) -> None:
    """torchrun, 2 Gloo ranks, DistributedDataParallel with 1 MiB buckets: default_pg is the only group."""
    assert list(ddp_run.process_groups["desc"]) == ["default_pg"]
    dim, source, confidence = _dims(ddp_run)["0"]
    assert (dim, source) == ("dp", "structure") and confidence >= 0.7
    assert _dims(ddp_run, "dp=2")["0"] == ("dp", "layout", 1.0)
