"""The tests' fixed-step synthetic runs, written by the ``commprof synth`` generator.

``make_run(out_dir, ranks=64, steps=3, layout=(tp, pp, dp))`` writes a run directory (traces, NCCL
logs, topology, manifest with ``"synthetic": true``, truth.json) whose every step is the same
template instead of the 1F1B training schedule. Ranks follow Megatron's order (tp fastest, then dp,
then pp); groups are described ``mesh_tp``, ``mesh_dp`` and ``mesh_pp``; ``gpus_per_host`` GPUs per
host (the largest divisor of ``ranks`` up to 8 by default). Every step, in µs from its start
(``S = SynthSpec``)::

    [0, M)             memcpy on stream 7                                         memory
    [M, M+F)           forward compute on stream 7 (+ S.straggler_delay_us on the straggler)
    TP all-reduce      stream 20, A_tp µs after the last member of the TP group arrives (blocking)
    backward compute   B µs; the DP all-reduce (stream 21) is issued A_dp/2 µs before it ends
    DP all-reduce      A_dp µs after the last DP member arrives; the step waits for it
    PP send / recv     streams 22 / 23, P µs after both sides arrive; receives block, sends are waited for
    the rest of the S.step_us window is idle

Calls end ``duration`` after the latest member starts, so the straggler's peers wait for it in every
group they share with it (or with a late rank of its TP group). ``expected_parts`` gives the exact
per-step parts of a rank, computed by the generator from the schedule (``commprof.synth.truth``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from commprof.synth.config import SynthConfig
from commprof.synth.engine import Call, Comm, Compute, Instr, Mark, Until, Wait, simulate
from commprof.synth.groups import Group, GroupIndex, build_groups
from commprof.synth.truth import rank_truth
from commprof.synth.writer import write_run

BASE_US = 1000


def _hosts_divisor(ranks: int) -> int:
    return max(d for d in range(1, 9) if ranks % d == 0)


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
    gpus_per_host: int | None = None
    extra: tuple[tuple[str, Any], ...] = field(default=())  # further SynthConfig fields (nccl_version, ...)

    def __post_init__(self) -> None:
        tp, pp, dp = self.layout
        if tp * pp * dp != self.ranks:
            raise ValueError(f"layout tp*pp*dp = {tp * pp * dp} does not match ranks = {self.ranks}")
        if self.dp_allreduce_us % 2:
            raise ValueError("dp_allreduce_us must be even (half of it is hidden)")
        busy = (self.memcpy_us + self.forward_us + 2 * self.straggler_delay_us + self.tp_allreduce_us
                + self.backward_us + self.dp_allreduce_us // 2 + 2 * self.p2p_us)
        if busy >= self.step_us:
            raise ValueError(f"step_us = {self.step_us} is too short for {busy} µs of work")

    @property
    def straggler(self) -> int:
        return self.straggler_rank if self.straggler_rank is not None else (self.ranks // 2 + 1) % self.ranks

    def config(self) -> SynthConfig:
        tp, pp, dp = self.layout
        per_host = self.gpus_per_host or _hosts_divisor(self.ranks)
        return SynthConfig(nodes=self.ranks // per_host, gpus_per_node=per_host,
                           sizes={"tp": tp, "dp": dp, "pp": pp}, steps=self.steps, straggler=self.straggler,
                           straggler_us=self.straggler_delay_us, kernels_per_phase=self.kernels_per_phase,
                           group_names="mesh", epoch_ts=False, mark_lead_us=0.0, **dict(self.extra))


@dataclass(frozen=True)
class Parts:
    """Expected ns per step of one rank (the five parts of DESIGN §3)."""

    compute_ns: int
    overlapped_comm_ns: int
    exposed_comm_ns: int
    memory_ns: int
    idle_ns: int


def _coll(g: Group, op: str, nbytes: int, seq: int | None, stream: int, dur_us: int, blocking: bool,
          key: tuple[Any, ...], peer: int | None = None) -> Comm:
    call = Call(g.name, g.desc, g.ranks, op, nbytes, seq, peer, "Float")
    return Comm(key, 2 if peer is not None else g.size, stream, dur_us * 1000, call, blocking)


def template_program(spec: SynthSpec, cfg: SynthConfig, index: GroupIndex, rank: int) -> list[Instr]:
    us = 1000
    tp, dp, pp = (index.of(rank, d) for d in ("tp", "dp", "pp"))
    stage = cfg.coords(rank)["pp"]
    own = spec.straggler_delay_us if rank == spec.straggler else 0
    half = spec.dp_allreduce_us // 2
    prog: list[Instr] = []
    for k in range(spec.steps):
        t0 = (BASE_US + k * spec.step_us) * us
        prog += [Until(t0), Mark(k), Compute(spec.memcpy_us * us, "Memcpy HtoD (Pageable -> Device)", 1, "memory"),
                 Compute((spec.forward_us + own) * us, "gemm", spec.kernels_per_phase)]
        if tp is not None:
            prog.append(_coll(tp, "all_reduce", spec.tp_bytes, k, 20, spec.tp_allreduce_us, True, (tp.name, k)))
        if dp is not None:
            prog.append(Compute((spec.backward_us - half) * us, "gemm", spec.kernels_per_phase))
            prog.append(_coll(dp, "all_reduce", spec.dp_bytes, k, 21, spec.dp_allreduce_us, False, (dp.name, k)))
            prog += [Compute(half * us, "gemm", 1), Wait(21)]
        else:
            prog.append(Compute(spec.backward_us * us, "gemm", spec.kernels_per_phase))
        if pp is not None:
            if stage < len(pp.ranks) - 1:
                nxt = pp.ranks[stage + 1]
                prog.append(_coll(pp, "send", spec.p2p_bytes, None, 22, spec.p2p_us, False, ("p2p", rank, nxt, k), nxt))
            if stage > 0:
                prv = pp.ranks[stage - 1]
                prog.append(_coll(pp, "recv", spec.p2p_bytes, None, 23, spec.p2p_us, True, ("p2p", prv, rank, k), prv))
            prog.append(Wait(22))
    prog.append(Until((BASE_US + spec.steps * spec.step_us) * us))
    return prog


def _programs(spec: SynthSpec) -> tuple[SynthConfig, list[Group], dict[int, list[Instr]]]:
    cfg = spec.config()
    groups = build_groups(cfg)
    index = GroupIndex(groups)
    return cfg, groups, {r: template_program(spec, cfg, index, r) for r in range(spec.ranks)}


@lru_cache(maxsize=8)
def _truth(spec: SynthSpec) -> dict[int, dict[str, Any]]:
    cfg, _, progs = _programs(spec)
    lines = simulate(progs, 0)
    return {r: rank_truth(cfg, line) for r, line in lines.items()}


def expected_parts(spec: SynthSpec, rank: int, step: int = 0) -> Parts:
    """The exact parts of ``rank`` in ``step`` (every step of the template is the same)."""
    per_step = _truth(spec)[rank]["per_step"]
    return Parts(*(per_step[p][step] for p in ("compute_ns", "overlapped_comm_ns", "exposed_comm_ns",
                                                "memory_ns", "idle_ns")))


def make_run(out_dir: str | Path, ranks: int = 64, steps: int = 3, layout: tuple[int, int, int] = (8, 2, 4),
             seed: int = 0, **options: Any) -> Path:
    """Write a synthetic run directory and return its path. ``options`` are further ``SynthSpec`` fields
    (straggler_rank, straggler_delay_us, kernels_per_phase, …); ``seed`` only names the run: the
    template is deterministic so that its answers are exact."""
    spec = SynthSpec(ranks=ranks, steps=steps, layout=layout, **options)
    cfg, groups, progs = _programs(spec)
    out = Path(out_dir)
    write_run(out, replace(cfg, seed=seed), progs, groups,
              ["commprof.synth_run.make_run"], compresslevel=1)
    return out
