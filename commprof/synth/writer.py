"""Write a synthetic run directory the way ``commprof record`` fills one (commprof/record/FORMAT.md):
``manifest.json`` (``"synthetic": true``), ``raw/traces/rank-N.json.gz``, ``raw/ranks/rank-N.json``,
``raw/nccl/nccl.<host>.<pid>.log``, ``raw/topology/<host>.json`` — plus ``truth.json`` beside the
manifest with the answers (``commprof.synth.truth``)."""

from __future__ import annotations

import gzip
import json
import multiprocessing
import sys
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from commprof.synth.config import SynthConfig
from commprof.synth.engine import Instr, Timeline, simulate
from commprof.synth.groups import Group, build_groups
from commprof.synth.kineto import EPOCH_NS, TraceWriter
from commprof.synth.nccl_logs import LogWriter
from commprof.synth.network import NIC_MBPS, algorithm
from commprof.synth.truth import findings, rank_truth

TORCH_VERSION = "2.5.1+cu124"
RECORD_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,GRAPH,ENV,NET"}


def _iso(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _pg_config(groups: list[Group]) -> list[dict[str, Any]]:
    """``distributedInfo.pg_config`` of a rank in ``groups`` (its own, groups_by_rank)."""
    return [{"pg_name": g.name, "pg_desc": g.desc, "backend_config": "cuda:nccl", "pg_size": g.size,
             "ranks": list(g.ranks)} for g in groups]


def groups_by_rank(groups: list[Group]) -> dict[int, list[Group]]:
    """Each rank's groups, in creation order (one pass over the members: testing each rank against every
    group's members cost ranks x groups x group size, hours at 16,384 ranks)."""
    out: dict[int, list[Group]] = {}
    for g in groups:
        for r in g.ranks:
            out.setdefault(r, []).append(g)
    return out


def smi_topo(cfg: SynthConfig) -> str:
    """``nvidia-smi topo -m`` of one host: NV18 between all GPUs with NVLink, else PCIe paths."""
    g = cfg.gpus_per_node
    head = "\t" + "\t".join(f"GPU{i}" for i in range(g)) + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"
    rows = [head]
    for a in range(g):
        cells = ["X" if a == b else "NV18" if cfg.intra == "nvlink" else
                 "PXB" if a // 4 == b // 4 else "SYS" for b in range(g)]
        numa = a * 2 // g
        rows.append(f"GPU{a}\t" + "\t".join(cells) + f"\t{numa * 48}-{numa * 48 + 47}\t{numa}\t\tN/A")
    rows += ["", "Legend:", "", "  X    = Self", "  SYS  = Connection traversing PCIe as well as the SMP "
             "interconnect between NUMA nodes", "  PXB  = Connection traversing multiple PCIe bridges",
             "  NV#  = Connection traversing a bonded set of # NVLinks"]
    return "\n".join(rows) + "\n"


def topology_capture(cfg: SynthConfig, host: str) -> dict[str, Any]:
    info: dict[str, Any] = {"host": host, "captured_at": _iso(EPOCH_NS - 60 * 10**9),
                            "nvidia_smi_topo": smi_topo(cfg),
                            "gpus": [{"index": str(i), "name": cfg.gpu_name, "memory_mib": "81559",
                                      "pci_bus_id": f"00000000:{0x18 + 2 * i:02X}:00.0"}
                                     for i in range(cfg.gpus_per_node)]}
    if cfg.network in ("ib", "roce"):
        gbps = NIC_MBPS[cfg.network] // 1000 // (4 if host == cfg.slow_link else 1)
        layer = "InfiniBand" if cfg.network == "ib" else "Ethernet"
        info["infiniband"] = [{"device": f"mlx5_{i}", "port": "1", "link_layer": layer,
                               "rate": f"{gbps} Gb/sec (4X)", "state": "4: ACTIVE"} for i in range(4)]
    return info


COMPACT_RANKS = 1024  # runs of this many ranks or more: compact JSON


def _write_json(path: Path, data: Any, compact: bool = False) -> None:
    """Indented for a person to read; ``compact``: a big run's files, by json's C encoder (an indent makes it
    use its Python one: the sidecars of 16,384 ranks, each listing the world group's members, took most of an
    hour)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text((json.dumps(data, separators=(",", ":")) if compact else json.dumps(data, indent=2)) + "\n")


def write_run(out: Path, cfg: SynthConfig, programs: dict[int, list[Instr]], groups: list[Group],
              command: list[str] | None = None, compresslevel: int = 6, jobs: int = 1) -> dict[str, Any]:
    """Simulate, write every file of the run directory, and return the truth (also in truth.json).
    ``jobs`` > 1 writes the ranks' traces in that many forked processes (big runs)."""
    lines = simulate(programs, 0)
    out.mkdir(parents=True, exist_ok=True)
    (out / "raw" / "traces").mkdir(parents=True, exist_ok=True)
    job = _TraceJob(out, cfg, groups, lines, compresslevel)
    if jobs > 1 and len(lines) > 1 and "fork" in multiprocessing.get_all_start_methods():
        # fork: the children inherit the simulated timelines instead of receiving them pickled; the
        # generator holds no thread pool that a forked child could inherit locked. The job is a module global
        # the children inherit: Pool.map pickles the function it is given with every task (the job holds every
        # rank's timeline: gigabytes at 16,384 ranks, once per rank)
        global _FORKED_JOB
        _FORKED_JOB = job
        try:
            with multiprocessing.get_context("fork").Pool(min(jobs, len(lines))) as pool:
                pool.map(_run_forked_job, sorted(lines), chunksize=max(1, len(lines) // (jobs * 16)))
        finally:
            _FORKED_JOB = None
    else:
        for rank in sorted(lines):
            job(rank)
    for name, text in LogWriter(cfg, groups).files().items():
        (out / "raw" / "nccl").mkdir(parents=True, exist_ok=True)
        (out / "raw" / "nccl" / name).write_text(text)
    for host in cfg.hosts:
        _write_json(out / "raw" / "topology" / f"{host}.json", topology_capture(cfg, host))
    if cfg.flight_recorder:
        from commprof.synth.flight_recorder import dump

        for rank, line in lines.items():
            path = out / "raw" / "flight_recorder" / f"rank-{rank}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(dump(cfg, groups, line), separators=(",", ":")))
    _write_json(out / "manifest.json", _manifest(cfg, lines, command))
    truth = build_truth(cfg, groups, lines)
    _write_json(out / "truth.json", truth, compact=cfg.world_size >= COMPACT_RANKS)
    return truth


_FORKED_JOB: _TraceJob | None = None  # the job of write_run's fork pool, inherited by its children


def _run_forked_job(rank: int) -> None:
    assert _FORKED_JOB is not None
    _FORKED_JOB(rank)


class _TraceJob:
    """Write one rank's trace and sidecar (a picklable callable for the fork pool)."""

    def __init__(self, out: Path, cfg: SynthConfig, groups: list[Group], lines: dict[int, Timeline],
                 compresslevel: int) -> None:
        self.out, self.cfg, self.groups, self.lines, self.compresslevel = out, cfg, groups, lines, compresslevel
        self.algo: dict[tuple[str, int, int], str] = {}  # (op, bytes, size) -> RING / TREE: calls repeat
        self.by_rank = groups_by_rank(groups)

    def algo_of(self, call: Any) -> str:
        key = (call.op, call.nbytes, len(call.ranks))
        if key not in self.algo:
            self.algo[key] = algorithm(*key)
        return self.algo[key]

    def __call__(self, rank: int) -> None:
        cfg, line = self.cfg, self.lines[rank]
        mine = self.by_rank.get(rank, [])
        trace = TraceWriter(cfg, rank, self.algo_of, _pg_config(mine)).trace(line)
        # stdlib json writes floats that read back exactly; epoch µs need all 17 digits
        data = json.dumps(trace, separators=(",", ":")).encode()
        del trace
        path = self.out / "raw" / "traces" / f"rank-{rank}.json.gz"
        path.write_bytes(gzip.compress(data, compresslevel=self.compresslevel, mtime=0))
        _write_json(self.out / "raw" / "ranks" / f"rank-{rank}.json", _sidecar(cfg, mine, rank, line),
                    compact=cfg.world_size >= COMPACT_RANKS)


def build_truth(cfg: SynthConfig, groups: list[Group], lines: dict[int, Timeline]) -> dict[str, Any]:
    return {
        "schema_version": 1, "synthetic": True, "seed": cfg.seed,
        "note": "exact answers by construction (commprof synth); times in ns, means per analyzed step",
        "ranks": [rank_truth(cfg, lines[r]) for r in sorted(lines)],
        "process_groups": [{"pg": g.name, "desc": g.desc, "ranks": list(g.ranks), "dimension": g.dim,
                            "tier": g.tier, "hosts": list(g.hosts), "nodes_spanned": len(g.hosts)} for g in groups],
        "straggler": cfg.straggler,
        "straggler_delay_ns": round(cfg.straggler_us * 1000) if cfg.straggler is not None else 0,
        "clock_offsets_ns": {h: cfg.clock_offset_ns(i) for i, h in enumerate(cfg.hosts)},
        "findings": findings(cfg, groups),
    }


def _sidecar(cfg: SynthConfig, groups: list[Group], rank: int, line: Timeline) -> dict[str, Any]:
    """The rank's record sidecar; ``groups``: the rank's own (groups_by_rank)."""
    steps = [s for s, _ in line.marks]
    return {
        "schema_version": 1, "rank": rank, "local_rank": cfg.local_rank(rank), "world_size": cfg.world_size,
        "local_world_size": cfg.gpus_per_node, "node_rank": cfg.host_index(rank), "restart_count": 0,
        "single_process": False, "host": cfg.host(rank), "pid": cfg.pid(rank), "training_tid": cfg.pid(rank),
        "device": f"cuda:{cfg.local_rank(rank)}", "gpu_name": cfg.gpu_name, "backend": "nccl",
        "versions": {"python": "3.11.9", "torch": TORCH_VERSION, "cuda": "12.4",
                     "nccl": ".".join(map(str, cfg.nccl_version))},
        "window": {"mode": "steps", "status": "complete", "first_profiler_step": steps[0] if steps else None,
                   "last_profiler_step": steps[-1] if steps else None, "activities": ["cpu", "cuda"]},
        "process_groups": [{"name": g.name, "desc": g.desc, "ranks": list(g.ranks), "size": g.size,
                            "backend": "nccl", "worker_tids": []} for g in groups],
        "files": {"sidecar": f"raw/ranks/rank-{rank}.json", "trace": f"raw/traces/rank-{rank}.json.gz"},
        "warnings": [],
    }


def _manifest(cfg: SynthConfig, lines: dict[int, Timeline], command: list[str] | None) -> dict[str, Any]:
    from commprof import __version__

    settings = {k: v for k, v in asdict(cfg).items()}
    settings["nccl_version"] = ".".join(map(str, cfg.nccl_version))
    end_ns = EPOCH_NS + max(line.end for line in lines.values())
    return {
        "schema_version": 1, "tool": "commprof synth", "synthetic": True, "seed": cfg.seed,
        "command": command or ["commprof", "synth"], "cwd": ".",
        "launcher": {"host": cfg.hosts[0], "pid": 40999},
        "start": _iso(EPOCH_NS - 90 * 10**9), "end": _iso(end_ns + 5 * 10**9),
        "status": "finished", "exit_code": 0, "exit_signal": None,
        "world_size": cfg.world_size, "hosts": list(cfg.hosts),
        "ranks": [{"rank": r, "local_rank": cfg.local_rank(r), "host": cfg.host(r), "pid": cfg.pid(r),
                   "device": f"cuda:{cfg.local_rank(r)}", "gpu_name": cfg.gpu_name, "backend": "nccl",
                   "window_status": "complete", "optimizer_steps": cfg.steps,
                   "files": {"trace": f"raw/traces/rank-{r}.json.gz", "sidecar": f"raw/ranks/rank-{r}.json"}}
                  for r in range(cfg.world_size)],
        "versions": {"python": "3.11.9", "commprof": __version__, "torch": TORCH_VERSION,
                     "launcher_python": sys.version.split()[0]},
        "settings": {"window": {"mode": "steps", "wait": 1, "warmup": 1, "active": cfg.steps},
                     "nccl_coll": False, "synth": settings},
        "env": {**{k: {"value": v, "source": "commprof"} for k, v in RECORD_ENV.items()},
                "NCCL_RUNTIME_CONNECT": {"value": "0", "source": "user"}},
        "notes": ["synthetic run: written by `commprof synth`, not recorded on a cluster; "
                  "truth.json holds the answers by construction"],
    }


def generate(cfg: SynthConfig, out: str | Path, command: list[str] | None = None,
             compresslevel: int = 6, jobs: int = 1) -> dict[str, Any]:
    """Write the run for ``cfg`` under ``out`` (the training schedule of ``commprof.synth.schedule``)."""
    from commprof.synth.schedule import programs

    groups = build_groups(cfg)
    return write_run(Path(out), cfg, programs(cfg, groups), groups, command, compresslevel, jobs)
