"""The training step every rank runs: a Megatron-style 1F1B pipeline of transformer layers.

Per micro-batch and layer (forward; backward mirrors it at twice the compute):

    [cp] all-gather of K/V in the CP group (blocking)      [fsdp] wait for this layer's parameters
    attention compute, then [tp] all-reduce (blocking)       (all-gathered one layer ahead, async)
    [ep] all-to-all dispatch, MLP compute, [ep] all-to-all combine; else MLP compute
    [tp] all-reduce (blocking)

Pipeline stages exchange activations (forward) and gradients (backward) with their neighbours:
receives block, sends run asynchronously on their own stream. Stage s runs pp-s-1 warm-up
forwards, then one forward and one backward in turn, then the cool-down backwards (1F1B), so the
first and last stages idle in the pipeline bubble. Gradients are synchronised over DP in buckets:
with ``dp_overlap`` each bucket's all-reduce (reduce-scatter under FSDP) starts as the last
micro-batch's backward finishes its layers, hidden behind the remaining backward; without it, all
buckets run after the backward, exposed. The optimizer step runs once all streams are drained.
A straggler's GPU spends ``straggler_us`` longer on its first forward of every step.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict

from commprof.synth.config import SynthConfig
from commprof.synth.engine import Call, Comm, Compute, Instr, Mark, Wait
from commprof.synth.groups import STREAM, Group, GroupIndex
from commprof.synth.network import duration_ns

SEND_NEXT, RECV_PREV, SEND_PREV, RECV_NEXT, FSDP_STREAM = 26, 27, 28, 29, 30
MEMCPY_NS = 25_000
OPTIMIZER_NS = 400_000


class Model:
    """Sizes and times derived from the model size: hidden h from P = 12·L·h², compute from 6·P
    FLOPs per token, bf16 messages."""

    def __init__(self, cfg: SynthConfig) -> None:
        self.cfg = cfg
        params = cfg.model_size_b * 1e9
        layers_total = cfg.layers * cfg.size("pp")
        self.hidden = int(math.sqrt(params / (12 * layers_total)))
        tokens = cfg.tokens // cfg.size("cp")
        self.act_bytes = tokens * self.hidden * 2
        split = cfg.size("tp") * cfg.size("cp")
        layer_fwd_flops = 24 * self.hidden**2 * cfg.tokens / split
        self.layer_fwd_ns = max(2000, round(layer_fwd_flops / (cfg.gpu_tflops * 1e12) * 1e9))
        self.grad_bytes = int(params / (cfg.size("tp") * cfg.size("pp")) * 2)
        self.bucket_bytes = self.grad_bytes // cfg.dp_buckets
        self.layer_param_bytes = self.grad_bytes // cfg.layers


def one_f_one_b(stage: int, stages: int, micro_batches: int) -> list[tuple[str, int]]:
    warm = min(stages - stage - 1, micro_batches)
    order = [("F", m) for m in range(warm)]
    fwd, bwd = warm, 0
    while fwd < micro_batches:
        order += [("F", fwd), ("B", bwd)]
        fwd, bwd = fwd + 1, bwd + 1
    order += [("B", m) for m in range(bwd, micro_batches)]
    return order


class _Builder:
    """One rank's program, with per-group call counters shared by construction across members."""

    def __init__(self, cfg: SynthConfig, index: GroupIndex, model: Model, rank: int) -> None:
        self.cfg, self.index, self.model, self.rank = cfg, index, model, rank
        self.prog: list[Instr] = []
        self.seq: dict[str, int] = defaultdict(int)
        self.p2p: dict[tuple[int, int], int] = defaultdict(int)
        self.rng = random.Random(cfg.seed * 1_000_003 + rank)
        self.step = 0
        inner = next((d for d in cfg.order if cfg.size(d) > 1), None)
        self.desync_dim = inner if cfg.desync == rank else None  # cleared once the odd call is made

    def compute(self, dur: int, name: str, extra: int = 0) -> None:
        jitter = 1 + self.rng.uniform(-self.cfg.jitter, self.cfg.jitter)
        self.prog.append(Compute(max(1000, round(dur * jitter)) + extra, name, self.cfg.kernels_per_phase))

    def coll(self, dim: str, op: str, nbytes: int, blocking: bool = True, stream: int | None = None) -> None:
        g = self.index.of(self.rank, dim)
        if g is None:
            return
        self.seq[g.name] += 1
        seq = self.seq[g.name]
        dur = duration_ns(op, nbytes, g.size, g.tier, g.slow)
        if op == "all_to_all" and self.cfg.alltoall_imbalance > 1:
            # the hot expert (the group's first member) gets imbalance x the mean tokens, the others share the
            # rest; the call lasts until the hot share has moved, on every member
            hot = round(nbytes * self.cfg.alltoall_imbalance)
            dur = duration_ns(op, hot, g.size, g.tier, g.slow)
            cold = round(nbytes * (g.size - self.cfg.alltoall_imbalance) / (g.size - 1))
            nbytes = hot if g.ranks[0] == self.rank else cold
        if self.desync_dim == dim and self.step == self.cfg.steps - 1:
            op, nbytes, self.desync_dim = "all_gather", nbytes // g.size, None  # same seq, another op and size
        call = Call(g.name, g.desc, g.ranks, op, nbytes, seq)
        self.prog.append(Comm((g.name, seq), g.size, stream or STREAM[dim], dur, call, blocking))

    def p2p_op(self, peer_stage: int, send: bool, nbytes: int, stream: int) -> None:
        g = self.index.of(self.rank, "pp")
        assert g is not None
        peer = g.ranks[peer_stage]
        src, dst = (self.rank, peer) if send else (peer, self.rank)
        self.p2p[(src, dst)] += 1
        n = self.p2p[(src, dst)]
        call = Call(g.name, g.desc, g.ranks, "send" if send else "recv", nbytes, None, peer)
        pair = (self.rank, peer)
        slow = self.cfg.slow_link in {self.cfg.host(r) for r in pair}
        tier = self.cfg.intra if self.cfg.host(peer) == self.cfg.host(self.rank) else self.cfg.net_used
        dur = duration_ns("send", nbytes, 2, tier, slow)
        self.prog.append(Comm(("p2p", src, dst, n), 2, stream, dur, call, blocking=not send))


def _layer(b: _Builder, layer: int, backward: bool, extra: int = 0) -> None:
    m, cfg = b.model, b.cfg
    scale = 2 if backward else 1
    attn, mlp = m.layer_fwd_ns * scale // 3, m.layer_fwd_ns * scale - m.layer_fwd_ns * scale // 3
    if cfg.fsdp and not backward:
        b.prog.append(Wait(FSDP_STREAM))
        if layer + 1 < cfg.layers:
            b.coll("dp", "all_gather", m.layer_param_bytes, blocking=False, stream=FSDP_STREAM)
    if cfg.size("cp") > 1:
        b.coll("cp", "reduce_scatter" if backward else "all_gather", 2 * m.act_bytes // cfg.size("tp") * cfg.size("cp"))
    b.compute(attn, "attention", extra)
    b.coll("tp", "all_reduce", m.act_bytes)
    if cfg.size("ep") > 1:
        b.coll("ep", "all_to_all", m.act_bytes)
        b.compute(mlp, "moe_mlp")
        b.coll("ep", "all_to_all", m.act_bytes)
    else:
        b.compute(mlp, "mlp")
    b.coll("tp", "all_reduce", m.act_bytes)


def _grad_sync(b: _Builder, buckets: int) -> None:
    op = "reduce_scatter" if b.cfg.fsdp else "all_reduce"
    for _ in range(buckets):
        b.coll("dp", op, b.model.bucket_bytes, blocking=False)


def rank_program(cfg: SynthConfig, index: GroupIndex, model: Model, rank: int) -> list[Instr]:
    b = _Builder(cfg, index, model, rank)
    stage, stages = cfg.coords(rank)["pp"], cfg.size("pp")
    act = model.act_bytes
    dp = cfg.size("dp") > 1
    for step in range(cfg.steps):
        b.step = step
        b.prog.append(Mark(step))
        b.prog.append(Compute(MEMCPY_NS, "Memcpy HtoD (Pageable -> Device)", 1, "memory"))
        if cfg.fsdp and dp:
            b.coll("dp", "all_gather", model.layer_param_bytes, blocking=False, stream=FSDP_STREAM)
        delay = round(cfg.straggler_us * 1000) if rank == cfg.straggler else 0
        for kind, mb in one_f_one_b(stage, stages, cfg.micro_batches):
            last = mb == cfg.micro_batches - 1
            if kind == "F":
                if stage > 0:
                    b.p2p_op(stage - 1, False, act, RECV_PREV)
                for layer in range(cfg.layers):
                    if cfg.fsdp and dp and layer == 0 and mb > 0:  # parameters were freed after use
                        b.coll("dp", "all_gather", model.layer_param_bytes, blocking=False, stream=FSDP_STREAM)
                    _layer(b, layer, False, delay)
                    delay = 0
                if stage < stages - 1:
                    b.p2p_op(stage + 1, True, act, SEND_NEXT)
                continue
            if stage < stages - 1:
                b.p2p_op(stage + 1, False, act, RECV_NEXT)
            sent = 0
            for i, layer in enumerate(reversed(range(cfg.layers))):
                _layer(b, layer, True)
                if dp and last and cfg.dp_overlap:
                    due = (i + 1) * cfg.dp_buckets // cfg.layers - sent
                    _grad_sync(b, due)
                    sent += due
            if stage > 0:
                b.p2p_op(stage - 1, True, act, SEND_PREV)
        if dp and not cfg.dp_overlap:
            _grad_sync(b, cfg.dp_buckets)
        for stream in (STREAM["dp"], FSDP_STREAM, SEND_NEXT, SEND_PREV):
            b.prog.append(Wait(stream))
        b.compute(OPTIMIZER_NS, "optimizer")
    return b.prog


def programs(cfg: SynthConfig, groups: list[Group]) -> dict[int, list[Instr]]:
    index, model = GroupIndex(groups), Model(cfg)
    return {r: rank_program(cfg, index, model, r) for r in range(cfg.world_size)}
