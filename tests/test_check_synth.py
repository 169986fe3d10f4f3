"""Synthetic two-rank GPU runs with known answers, shared by the check/diff/export tests (no tests here)."""

from __future__ import annotations

from pathlib import Path

from commprof.synth import TraceBuilder

PG = [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl", "pg_size": 2, "ranks": [0, 1]}]
NELEMS = 1 << 20  # float32 -> 4 MiB per all-reduce


def synthetic_run(folder: Path, step_us: float = 2000, comm_us: float = 500, late_us: float = 300,
                  steps: int = 3) -> Path:
    """Per step of ``step_us``: compute [0, 1000) µs, then an all-reduce of ``comm_us`` (rank 1 starts it
    ``late_us`` later). Exposed comm per step = comm_us on every rank; rank 0 waits late_us per call."""
    for rank in (0, 1):
        b = TraceBuilder(rank=rank, world_size=2, pg_config=PG)
        for k in range(steps):
            s = (k + 1) * step_us
            b.step(k + 1, s, s + step_us)
            b.compute(s, s + 1000)
            start = s + 1000 + (late_us if rank == 1 else 0)
            b.nccl(start, start + comm_us, **{
                "Process Group Name": "0", "Seq": k, "Collective name": "allreduce",
                "In msg nelems": NELEMS, "dtype": "Float", "Group size": 2,
            })
        b.write(folder / f"rank-{rank}.json")
    return folder
