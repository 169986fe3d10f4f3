"""Build small run directories whose process groups, hosts and pids are known, for the classification
tests: one step per rank, one NCCL (or Gloo) call per group, NCCL logs or topology captures copied in."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from commprof.synth import TraceBuilder


@dataclass(frozen=True)
class RankSpec:
    rank: int
    host: str | None
    pid: int | None
    dev: int


@dataclass(frozen=True)
class GroupSpec:
    pg: str
    desc: str | None
    ranks: tuple[int, ...]
    op: str = "allreduce"
    nbytes: int = 4_000_000
    dur_us: float = 100.0


def write_run(out: Path, ranks: list[RankSpec], groups: list[GroupSpec], backend: str = "nccl",
              gpu_name: str | None = "NVIDIA H100 80GB HBM3", nccl_logs: Path | None = None,
              topology: dict[str, dict[str, Any]] | None = None) -> Path:
    world = len(ranks)
    for spec in ranks:
        mine = [g for g in groups if spec.rank in g.ranks]
        pg_config = [{"pg_name": g.pg, "pg_desc": g.desc or "undefined", "backend_config": f"cuda:{backend}",
                      "pg_size": len(g.ranks), "ranks": list(g.ranks)} for g in groups]
        b = TraceBuilder(rank=spec.rank, world_size=world, backend=backend, pg_config=pg_config, gpu=spec.dev,
                         host=spec.host)
        b.step(0, 1000, 3000)
        t = 1100.0
        for g in mine:
            args = {"Collective name": g.op, "In msg nelems": g.nbytes // 4, "Out msg nelems": g.nbytes // 4,
                    "dtype": "Float", "Group size": len(g.ranks), "Process Group Name": g.pg,
                    "Process Group Description": g.desc or "undefined", "Process Group Ranks": str(list(g.ranks))}
            b.nccl(t, t + g.dur_us, stream=20, dev=True, **args)
            t += g.dur_us + 50
        trace = b.to_dict()
        if gpu_name:
            trace["deviceProperties"] = [{"id": spec.dev, "name": gpu_name}]
        path = out / "raw" / "traces" / f"rank-{spec.rank}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(trace))
    manifest = {
        "schema_version": 1, "tool": "tests", "synthetic": True, "status": "finished", "exit_code": 0,
        "world_size": world, "hosts": sorted({r.host for r in ranks if r.host}),
        "ranks": [{"rank": r.rank, "host": r.host, "pid": r.pid, "device": f"cuda:{r.dev}", "local_rank": r.dev,
                   "files": {"trace": f"raw/traces/rank-{r.rank}.json"}} for r in ranks],
    }
    (out / "manifest.json").write_text(json.dumps(manifest))
    if nccl_logs is not None:
        shutil.copytree(nccl_logs, out / "raw" / "nccl")
    for host, info in (topology or {}).items():
        folder = out / "raw" / "topology"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{host}.json").write_text(json.dumps({"host": host, **info}))
    return out
