"""Synthetic multi-rank runs whose step-time breakdown is known exactly, by construction.

``make_run(out_dir, ranks=64, steps=3, layout=(tp, pp, dp))`` writes a commprof run directory
(``manifest.json`` with ``"synthetic": true`` and ``raw/traces/rank-N.json.gz``) of GPU-style traces:
NCCL kernels carrying record_param_comms-style args (collective name, message sizes, dtype, group size,
process group name/description/ranks, seq) and a ``distributedInfo.pg_config`` listing every group.

Ranks follow Megatron's order (tp fastest, then dp, then pp): ``rank = t + tp*(d + dp*p)``; groups are
described ``mesh_tp``, ``mesh_dp`` and ``mesh_pp``. Every step of every rank is, in µs from the step start
(``S = SynthSpec``; ``shift = S.straggler_delay_us`` for the straggler's TP group, else 0)::

    [0, M)                         memcpy on stream 7                         memory
    [M, M+F)                       forward compute, stream 7 (+delay on the straggler itself)
    TP all-reduce, stream 20       starts when the rank's forward ends, ends for the whole TP group
                                   at M+F+shift+A_tp (the straggler's peers wait for it)  fully exposed
    backward compute, stream 7     B µs from the TP all-reduce's end
    DP all-reduce, stream 21       starts A_dp/2 before the backward ends            half hidden
    PP send (stream 22) / recv (stream 23)  P µs after the DP all-reduce, fully exposed; a middle
                                   stage runs both at once (each gets half of the exposed time)
    the rest of the S.step_us window is idle

so the expected parts per rank and step are (``expected_parts`` returns them, in ns)::

    memory     = M
    compute    = F + (delay if straggler) + B - (A_dp/2 if dp > 1)
    overlapped = A_dp/2 if dp > 1
    exposed    = (A_tp + (delay if in the straggler's TP group and not the straggler)) if tp > 1
                 + (A_dp/2 if dp > 1) + (P if pp > 1)
    idle       = step_us - the others

Compute phases are split into ``kernels_per_phase`` back-to-back kernels (same union; more events for
benchmarks). The straggler arrives late by ``straggler_delay_us`` at every collective of its TP group.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from commprof.synth import CPU_PID, TraceBuilder

BASE_US = 1000.0
GPUS_PER_HOST = 8


@dataclass(frozen=True)
class SynthSpec:
    ranks: int = 64
    steps: int = 3
    layout: tuple[int, int, int] = (8, 2, 4)  # (tp, pp, dp)
    straggler_rank: int | None = None  # None: ranks // 2 + 1 (a TP-group member that is not its first rank)
    straggler_delay_us: int = 50
    memcpy_us: int = 10
    forward_us: int = 400
    backward_us: int = 600
    tp_allreduce_us: int = 100
    dp_allreduce_us: int = 200  # even: half of it is hidden
    p2p_us: int = 40
    step_us: int = 2000
    kernels_per_phase: int = 4
    tp_bytes: int = 16 << 20
    dp_bytes: int = 256 << 20
    p2p_bytes: int = 8 << 20
    gpus_per_host: int = GPUS_PER_HOST

    def __post_init__(self) -> None:
        tp, pp, dp = self.layout
        if tp * pp * dp != self.ranks:
            raise ValueError(f"layout tp*pp*dp = {tp * pp * dp} does not match ranks = {self.ranks}")
        if self.dp_allreduce_us % 2:
            raise ValueError("dp_allreduce_us must be even (half of it is hidden)")
        busy = (self.memcpy_us + self.forward_us + self.straggler_delay_us + self.tp_allreduce_us
                + self.backward_us + self.dp_allreduce_us // 2 + self.p2p_us)
        if busy >= self.step_us:
            raise ValueError(f"step_us = {self.step_us} is too short for {busy} µs of work")

    @property
    def straggler(self) -> int:
        return self.straggler_rank if self.straggler_rank is not None else (self.ranks // 2 + 1) % self.ranks

    def coords(self, rank: int) -> tuple[int, int, int]:
        """(t, p, d) of a rank in Megatron's order: tp fastest, then dp, then pp."""
        tp, _, dp = self.layout
        return rank % tp, rank // (tp * dp), (rank // tp) % dp

    def tp_group(self, rank: int) -> list[int]:
        tp = self.layout[0]
        first = rank - rank % tp
        return list(range(first, first + tp))

    def dp_group(self, rank: int) -> list[int]:
        tp, _, dp = self.layout
        t, p, _ = self.coords(rank)
        return [t + tp * (d + dp * p) for d in range(dp)]

    def pp_group(self, rank: int) -> list[int]:
        tp, pp, dp = self.layout
        t, _, d = self.coords(rank)
        return [t + tp * (d + dp * p) for p in range(pp)]

    def host(self, rank: int) -> str:
        return f"synth-node-{rank // self.gpus_per_host}"


@dataclass(frozen=True)
class Parts:
    """Expected ns per step of one rank (the five parts of DESIGN §3)."""

    compute_ns: int
    overlapped_comm_ns: int
    exposed_comm_ns: int
    memory_ns: int
    idle_ns: int


def expected_parts(spec: SynthSpec, rank: int) -> Parts:
    """The exact per-step parts of ``rank`` (the same every step)."""
    tp, pp, dp = spec.layout
    is_straggler = rank == spec.straggler
    in_group = spec.straggler in spec.tp_group(rank)
    half_dp = spec.dp_allreduce_us // 2 if dp > 1 else 0
    compute = spec.forward_us + (spec.straggler_delay_us if is_straggler else 0) + spec.backward_us - half_dp
    exposed = half_dp + (spec.p2p_us if pp > 1 else 0)
    if tp > 1:
        exposed += spec.tp_allreduce_us + (spec.straggler_delay_us if in_group and not is_straggler else 0)
    idle = spec.step_us - compute - half_dp - exposed - spec.memcpy_us
    us = 1000
    return Parts(compute * us, half_dp * us, exposed * us, spec.memcpy_us * us, idle * us)


def _pg_names(spec: SynthSpec) -> dict[tuple[str, tuple[int, ...]], str]:
    """Every group of the run -> its name ("0" is the default group)."""
    names: dict[tuple[str, tuple[int, ...]], str] = {("default_pg", tuple(range(spec.ranks))): "0"}
    for desc, group_of in (("mesh_tp", spec.tp_group), ("mesh_dp", spec.dp_group), ("mesh_pp", spec.pp_group)):
        for rank in range(spec.ranks):
            key = (desc, tuple(group_of(rank)))
            if len(key[1]) > 1 and key not in names:
                names[key] = str(len(names))
    return names


def _comm_args(op: str, nbytes: int, pg: str, desc: str, ranks: list[int], seq: int | None,
               peer: tuple[str, int] | None = None) -> dict[str, Any]:
    nelems = nbytes // 4
    args: dict[str, Any] = {
        "Collective name": op, "In msg nelems": nelems, "Out msg nelems": nelems, "dtype": "Float",
        "Group size": len(ranks), "Process Group Name": pg, "Process Group Description": desc,
        "Process Group Ranks": str(ranks),
    }
    if seq is not None:
        args["Seq"] = seq
    if peer is not None:
        args[peer[0]] = peer[1]
    return args


def _phase(builder: TraceBuilder, start: float, length: int, pieces: int) -> None:
    # whole-µs edges: back-to-back kernels whose ns times round exactly (no 1 ns gaps)
    edges = [start + (length * i) // pieces for i in range(pieces + 1)]
    for a, b in zip(edges[:-1], edges[1:], strict=True):
        builder.compute(a, b)


def build_rank(spec: SynthSpec, rank: int) -> TraceBuilder:
    """The trace of one rank (see the module docstring for the schedule)."""
    tp, pp, dp = spec.layout
    names = _pg_names(spec)
    groups = {desc: (names[(desc, tuple(g))], g) for desc, g in (
        ("mesh_tp", spec.tp_group(rank)), ("mesh_dp", spec.dp_group(rank)), ("mesh_pp", spec.pp_group(rank)),
    ) if len(g) > 1}
    pg_config = [
        {"pg_name": name, "pg_desc": desc, "backend_config": "cuda:nccl", "pg_size": len(members),
         "ranks": list(members)}
        for (desc, members), name in names.items() if rank in members
    ]
    b = TraceBuilder(rank=rank, world_size=spec.ranks, backend="nccl", pg_config=pg_config,
                     gpu=rank % spec.gpus_per_host, host=spec.host(rank))
    b.thread_name(1000, "python3")
    delay = spec.straggler_delay_us
    shift = delay if spec.straggler in spec.tp_group(rank) else 0
    own_delay = delay if rank == spec.straggler else 0
    _, stage, _ = spec.coords(rank)
    for k in range(spec.steps):
        t0 = BASE_US + k * spec.step_us
        b.step(k, t0, t0 + spec.step_us)
        b.cpu("aten::linear", t0 + 1, t0 + 5)
        b.memcpy(t0, t0 + spec.memcpy_us)
        fwd = t0 + spec.memcpy_us
        _phase(b, fwd, spec.forward_us + own_delay, spec.kernels_per_phase)
        t = fwd + spec.forward_us + shift
        if tp > 1:
            name, members = groups["mesh_tp"]
            end = t + spec.tp_allreduce_us
            b.nccl(fwd + spec.forward_us + own_delay, end, stream=20, op="AllReduce", dev=True,
                   **_comm_args("allreduce", spec.tp_bytes, name, "mesh_tp", members, k))
            t = end
        _phase(b, t, spec.backward_us, spec.kernels_per_phase)
        t += spec.backward_us
        if dp > 1:
            name, members = groups["mesh_dp"]
            half = spec.dp_allreduce_us // 2
            b.nccl(t - half, t + half, stream=21, op="AllReduce", dev=True,
                   **_comm_args("allreduce", spec.dp_bytes, name, "mesh_dp", members, k))
            t += half
        if pp > 1:
            name, members = groups["mesh_pp"]
            if stage < pp - 1:
                b.nccl(t, t + spec.p2p_us, stream=22, op="SendRecv", dev=True,
                       **_comm_args("send", spec.p2p_bytes, name, "mesh_pp", members, None,
                                    ("Dst Rank", members[stage + 1])))
            if stage > 0:
                b.nccl(t, t + spec.p2p_us, stream=23, op="SendRecv", dev=True,
                       **_comm_args("recv", spec.p2p_bytes, name, "mesh_pp", members, None,
                                    ("Src Rank", members[stage - 1])))
    return b


def make_run(out_dir: str | Path, ranks: int = 64, steps: int = 3, layout: tuple[int, int, int] = (8, 2, 4),
             seed: int = 0, **options: Any) -> Path:
    """Write a synthetic run directory and return its path. ``options`` are further ``SynthSpec`` fields
    (straggler_rank, straggler_delay_us, kernels_per_phase, …). ``seed`` only names the run: the schedule
    is deterministic so that its answers are exact."""
    spec = SynthSpec(ranks=ranks, steps=steps, layout=layout, **options)
    return write_run(Path(out_dir), spec, seed)


def write_run(out: Path, spec: SynthSpec, seed: int = 0) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    rank_info = []
    for rank in range(spec.ranks):
        rel = f"raw/traces/rank-{rank}.json.gz"
        build_rank(spec, rank).write(out / rel)
        rank_info.append({
            "rank": rank, "local_rank": rank % spec.gpus_per_host, "host": spec.host(rank),
            "pid": CPU_PID, "device": f"cuda:{rank % spec.gpus_per_host}", "gpu_name": "Synthetic GPU",
            "backend": "nccl", "files": {"trace": rel},
        })
    tp, pp, dp = spec.layout
    manifest = {
        "schema_version": 1, "tool": "commprof.synth_run", "synthetic": True, "seed": seed,
        "command": ["synthetic"], "status": "finished", "exit_code": 0,
        "world_size": spec.ranks, "hosts": sorted({spec.host(r) for r in range(spec.ranks)}),
        "ranks": rank_info, "versions": {"commprof": _version()},
        "settings": {"layout": {"tp": tp, "pp": pp, "dp": dp}, "straggler_rank": spec.straggler,
                     "straggler_delay_us": spec.straggler_delay_us},
        "notes": ["synthetic run: every number is known by construction (commprof/synth_run.py)"],
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return out


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("commprof")
    except PackageNotFoundError:
        return "unknown"
