"""The fault zoo's training job: 4 ranks, Gloo on CPU, one switch per fault as users make them.

    torchrun --nproc-per-node 4 tests/zoo/train_zoo.py --fault slow_rank [--ab] [--stamps DIR]

The model is an MLP of ``--layers`` blocks (Linear + LayerNorm + ReLU, hidden ``--hidden``) trained with
DDP over the data-parallel group (the world, or dp=2 beside tp=2 for ``tp_megatron``); a step is about
100-300 ms on 2 cores. ``--fault`` picks what goes wrong (see FAULTS). ``--ab`` applies it on odd
iterations only (every rank decides from the same iteration number, so the groups stay in step) and runs
the clean configuration on even ones: the fault's cost per step is then median(odd) - median(even) of the
iteration wall times in ``--stamps DIR/rank-R.json`` (``time.perf_counter_ns()`` at the end of every
optimizer step). For ``tp_megatron`` and ``ddp_async``, both clean configurations, the odd iterations
run their communication and the even ones skip it: the A/B then measures what that communication costs.

This script imports only the standard library and torch (it runs inside every rank).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any

FAULTS = {
    "clean": "DDP over the world, several buckets overlapped with the backward",
    "clean_alltoall": "clean plus an MoE-style dispatch/combine all_to_all with even splits",
    "slow_rank": "rank SLOW_RANK does ~30 ms extra compute per step before its collectives",
    "barrier": "a world dist.barrier() every step",
    "small_grads": "gradients all-reduced one tensor at a time after the backward instead of DDP's buckets",
    "dp_after_backward": "one all-reduce of all gradients after the backward instead of DDP's overlapped buckets",
    "uneven_alltoall": "the dispatch/combine all_to_all with uneven splits: rank HOT_RANK receives most tokens",
    "mismatch": "a world broadcast where rank MISMATCH_RANK receives into a buffer twice the root's size",
    "tp_megatron": "tp=2 x dp=2: Megatron MLP blocks, TP all-reduce inside a torch.autograd.Function",
    "ddp_async": "DDP with many small buckets: async bucket all-reduces on Gloo's worker threads",
    "tp_small": "tp=2 x dp=2 Megatron MLP of a narrow hidden size (TP_SMALL_HIDDEN) in TP_SMALL_MICRO micro-batches: "
                "small TP all-reduces, one per block and pass; the A/B's twin sends twice the tokens per call (one "
                "micro-batch of the same rows): what the small-message finding proposes for TP",
    "pp_uneven": "pp=2 x dp=2: GPipe over PP_MICRO micro-batches (send/recv between stages), stage 1 holds "
                 "PP_LAST_SHARE of the blocks plus the loss, DP all-reduce after the flush",
}
SLOW_RANK = 2
SLOW_S = 0.030
HOT_RANK = 1
HOT_SHARE = 0.7  # of every rank's tokens go to HOT_RANK in uneven_alltoall
MISMATCH_RANK = 3
BROADCAST_NUMEL = 64 * 1024
TP_SMALL_HIDDEN = 64  # tp_small: 128 rows x 64 x 4 B = 32 KiB per TP all-reduce at 2 micro-batches
TP_SMALL_LAYERS = 16  # 8 blocks: 16 TP all-reduces per micro-batch (forward and backward)
TP_SMALL_MICRO = 2
PP_MICRO = 4
PP_FIX_FACTOR = 4  # analyzers/findings_rules.MICRO_BATCH_FACTOR: the pipeline_bubble finding's proposal
PP_LAST_SHARE = 0.625  # of the blocks on the last stage (5 of 8): both of its ranks do more work per step
MOE_TOPK = 4  # --moe: experts per token (each token is sent to this many)


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--fault", choices=sorted(FAULTS), default="clean")
    p.add_argument("--ab", action="store_true", help="apply the fault on odd iterations only")
    p.add_argument("--stamps", type=Path, help="write each rank's end-of-step perf_counter_ns to DIR/rank-R.json")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--a2a-mb", type=float, default=4.0, help="MiB each rank sends in each all_to_all")
    p.add_argument("--tp", type=int, default=2, help="tp_megatron: the TP degree (dp = world / tp); the model and the "
                   "global batch stay the same (--batch rows per DP replica at tp=2 on 4 ranks, scaled by 2 / dp)")
    p.add_argument("--moe", type=int, default=0, metavar="EP",
                   help="tp_megatron: an MoE layer after the blocks, its tokens dispatched and combined by all_to_all "
                        "(forward and backward) over expert groups of EP ranks folded into the dense ranks as "
                        "Megatron-Core lays them out (ranks r, r + world/EP, ...); a rank dispatches its TP share of "
                        "its replica's rows (sequence parallelism), MOE_TOPK copies each: the same bytes at every --tp")
    return p.parse_args()


def busy(seconds: float) -> None:
    """Compute (not sleep) for about ``seconds``: a rank that is slow because it has more work."""
    import torch

    a = torch.randn(128, 128)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        torch.mm(a, a)


def mlp(hidden: int, layers: int) -> Any:
    from torch import nn

    blocks: list[nn.Module] = []
    for _ in range(layers):
        blocks += [nn.Linear(hidden, hidden), nn.LayerNorm(hidden), nn.ReLU()]
    return nn.Sequential(*blocks)


def megatron_mlp(hidden: int, layers: int, tp_group: Any) -> Any:
    """Megatron-LM's tensor-parallel MLP: f (identity forward, all-reduce backward) -> column-parallel
    Linear -> ReLU -> row-parallel Linear -> g (all-reduce forward, identity backward)."""
    import torch
    import torch.distributed as dist
    from torch import nn

    tp = dist.get_world_size(tp_group)
    state = {"comm": True}  # the A/B switch: off on even iterations

    class CopyToTP(torch.autograd.Function):  # Megatron's _CopyToModelParallelRegion
        @staticmethod
        def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
            return x

        @staticmethod
        def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
            grad = grad.contiguous()
            if state["comm"]:
                dist.all_reduce(grad, group=tp_group)
            return grad

    class ReduceFromTP(torch.autograd.Function):  # Megatron's _ReduceFromModelParallelRegion
        @staticmethod
        def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
            x = x.contiguous()
            if state["comm"]:
                dist.all_reduce(x, group=tp_group)
            return x

        @staticmethod
        def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
            return grad

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.col = nn.Linear(hidden, 2 * hidden // tp)
            self.row = nn.Linear(2 * hidden // tp, hidden, bias=False)
            self.norm = nn.LayerNorm(hidden)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = torch.relu(self.col(CopyToTP.apply(x)))  # type: ignore[no-untyped-call]
            reduced: torch.Tensor = ReduceFromTP.apply(self.row(h))  # type: ignore[no-untyped-call]
            out: torch.Tensor = self.norm(x + reduced)
            return out

    model = nn.Sequential(*[Block() for _ in range(layers // 2)])
    return model, state


def pipeline_step(stages: Any, x: Any, pp_group: Any, stage: int, peer: int, micro: int) -> None:
    """One GPipe step over two stages: every micro-batch's forward (stage 0 sends its activations to its
    peer on stage 1, which finishes the forward and takes the loss), then every backward (stage 1 sends the
    activations' gradients back). Blocking send/recv on the PP group, as a simple pipeline schedule does."""
    import torch
    import torch.distributed as dist

    kept = []
    for mb in x.chunk(micro):
        if stage == 0:
            out = stages(mb)
            dist.send(out.detach().contiguous(), dst=peer, group=pp_group)
            kept.append(out)
        else:
            act = torch.empty_like(mb)
            dist.recv(act, src=peer, group=pp_group)
            act.requires_grad_(True)
            kept.append((act, stages(act).square().mean()))
    for item in kept:
        if stage == 0:
            grad = torch.empty_like(item)
            dist.recv(grad, src=peer, group=pp_group)
            item.backward(grad)
        else:
            act, loss = item
            loss.backward()
            dist.send(act.grad.contiguous(), dst=peer, group=pp_group)


def flat_all_reduce(params: list[Any], group: Any) -> None:
    """One all-reduce of every gradient, flattened, after the backward (DP sync not overlapped)."""
    import torch
    import torch.distributed as dist
    from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

    grads = [p.grad for p in params]
    flat = _flatten_dense_tensors(grads)  # type: ignore[no-untyped-call]
    dist.all_reduce(flat, group=group)
    flat /= dist.get_world_size(group)
    with torch.no_grad():
        new_grads = _unflatten_dense_tensors(flat, grads)  # type: ignore[no-untyped-call]
        for g, new in zip(grads, new_grads, strict=True):
            g.copy_(new)


def tensor_all_reduce(params: list[Any], group: Any) -> None:
    """Every gradient on its own, one small all-reduce after another (what a hand-written DP loop does)."""
    import torch.distributed as dist

    for p in params:
        dist.all_reduce(p.grad, group=group)
        p.grad /= dist.get_world_size(group)


def all_to_all(tokens: Any, fault_on: bool, group: Any) -> Any:
    """MoE dispatch then combine over the world. Uneven: HOT_RANK receives HOT_SHARE of every rank's
    tokens (and sends them back in the combine); the same total bytes either way."""
    import torch
    import torch.distributed as dist

    rank, world = dist.get_rank(group), dist.get_world_size(group)
    n = tokens.numel()
    if fault_on:
        cold = int(n * (1 - HOT_SHARE)) // (world - 1)
        splits = [n - cold * (world - 1) if dst == HOT_RANK else cold for dst in range(world)]
    else:
        splits = [n // world] * world
        splits[-1] += n - sum(splits)
    sizes = torch.tensor(splits)
    gathered = torch.empty(world * world, dtype=torch.int64)
    dist.all_gather_into_tensor(gathered, sizes, group=group)  # what each rank sends to each (MoE routing metadata)
    recv_splits = [int(gathered[src * world + rank]) for src in range(world)]
    routed = torch.empty(sum(recv_splits))
    dist.all_to_all_single(routed, tokens, recv_splits, splits, group=group)
    routed = routed * 1.0001  # "expert" compute
    back = torch.empty(n)
    dist.all_to_all_single(back, routed, splits, recv_splits, group=group)
    return back


def expert_groups(ep: int) -> Any:
    """--moe: this rank's expert group (ranks r, r + world/ep, ...), every group made on every rank."""
    import torch.distributed as dist

    rank, world = dist.get_rank(), dist.get_world_size()
    stride = world // ep
    mine = None
    for first in range(stride):
        group = dist.new_group([first + k * stride for k in range(ep)])
        if rank % stride == first:
            mine = group
    return mine


def moe_layer(tokens: Any, group: Any) -> Any:
    """Dispatch each token to MOE_TOPK experts and combine them back: two all_to_all in the forward and two in
    the backward (the gradient takes the same route back), as MoE token dispatchers do."""
    import torch
    import torch.distributed as dist

    def route(flat: torch.Tensor) -> torch.Tensor:
        sent = flat.repeat(MOE_TOPK)
        routed = torch.empty_like(sent)
        dist.all_to_all_single(routed, sent, group=group)  # dispatch
        back = torch.empty_like(sent)
        dist.all_to_all_single(back, routed * 1.0001, group=group)  # the experts, then combine
        return back.view(MOE_TOPK, -1).sum(0)

    class Dispatch(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
            return route(x.contiguous().view(-1)).view_as(x)

        @staticmethod
        def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
            return route(grad.contiguous().view(-1)).view_as(grad)

    return Dispatch.apply(tokens)


def grad_sync(fault: str, on: bool, ab: bool) -> str:
    """How this iteration's gradients are synchronised: "ddp" (DDP's buckets during the backward), "flat"
    (one all-reduce after it), "per_tensor" (one per gradient after it) or "none" (the A/B's off
    iterations of ddp_async, to measure what its DP sync costs)."""
    if fault == "small_grads":
        return "per_tensor" if on else "flat"  # the A/B twin: the same sync, bucketed
    if fault == "dp_after_backward":
        return "flat" if on else "ddp"
    if fault == "ddp_async" and ab and not on:
        return "none"
    return "ddp"


def main() -> None:  # noqa: PLR0915 (one training loop, read top to bottom)
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    args = parse()
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    fault = args.fault
    torch.manual_seed(1234)  # same weights on every rank (DDP would broadcast them anyway)
    tp_state: dict[str, bool] = {}
    dp_group: Any
    tp_small = fault == "tp_small"
    hidden = TP_SMALL_HIDDEN if tp_small else args.hidden
    if fault in ("tp_megatron", "tp_small"):
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh("cpu", (world // args.tp, args.tp), mesh_dim_names=("dp", "tp"))
        dp_group = mesh.get_group("dp")
        tp_rank = mesh.get_local_rank("tp")
        moe_group = expert_groups(args.moe) if args.moe > 1 else None
        model, tp_state = megatron_mlp(hidden, TP_SMALL_LAYERS if tp_small else args.layers, mesh.get_group("tp"))
        # the same global batch at every TP degree: rows per replica = batch x (world / 2) / dp
        rows = args.batch * (world // 2) // (world // args.tp)
    else:
        rows = args.batch
        dp_group = dist.group.WORLD
        model = mlp(args.hidden, args.layers)
        tp_rank, moe_group = 0, None
    # the experts' all-to-all has its own group, as in MoE frameworks (an "ep" group over the world)
    ep_group = dist.new_group(list(range(world))) if fault.endswith("alltoall") else None
    bucket_mb = 0.25 if fault == "ddp_async" else 2.0
    if fault == "pp_uneven":  # mesh (pp, dp): ranks 0,1 are stage 0, ranks 2,3 stage 1; peer = rank +- 2
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh("cpu", (2, world // 2), mesh_dim_names=("pp", "dp"))
        dp_group, pp_group = mesh.get_group("dp"), mesh.get_group("pp")
        stage, last = mesh.get_local_rank("pp"), round(args.layers * PP_LAST_SHARE)
        model = mlp(args.hidden, last if stage == 1 else args.layers - last)
        peer = rank + world // 2 if stage == 0 else rank - world // 2
    # the pipeline syncs its gradients itself after the flush (DDP expects one forward per backward)
    ddp = model if fault == "pp_uneven" else DistributedDataParallel(model, process_group=dp_group,
                                                                     bucket_cap_mb=bucket_mb)
    params = [p for p in ddp.parameters() if p.requires_grad]
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-4)
    torch.manual_seed(rank)
    a2a_numel = int(args.a2a_mb * 2**20 / 4)
    stamps: list[int] = []
    for it in range(args.steps):
        on = it % 2 == 1 if args.ab else True  # the same decision on every rank
        x = torch.randn(rows, args.hidden)
        if fault == "slow_rank" and on and rank == SLOW_RANK:
            busy(SLOW_S)
        if fault == "tp_megatron":
            tp_state["comm"] = on
        sync = grad_sync(fault, on, args.ab)
        if fault == "pp_uneven":
            # the A/B: odd iterations as recorded, even ones with the fix the bubble finding proposes
            # (MICRO_BATCH_FACTOR x the micro-batches at the same global batch)
            pipeline_step(model, x, pp_group, stage, peer, PP_MICRO if on else PP_MICRO * PP_FIX_FACTOR)
            flat_all_reduce(params, dp_group)  # the DP sync after the pipeline's flush
            opt.step()
            opt.zero_grad(set_to_none=False)
            stamps.append(time.perf_counter_ns())
            continue
        if tp_small:  # the micro-batches of one step: DDP syncs on the last one's backward
            micro = TP_SMALL_MICRO if on else 1
            for m, chunk in enumerate(torch.randn(rows, hidden).chunk(micro)):
                with ddp.no_sync() if m < micro - 1 else contextlib.nullcontext():
                    ddp(chunk).square().mean().backward()
            opt.step()
            opt.zero_grad(set_to_none=False)
            stamps.append(time.perf_counter_ns())
            continue
        with ddp.no_sync() if sync != "ddp" else contextlib.nullcontext():
            out = ddp(x)
            if fault in ("uneven_alltoall", "clean_alltoall"):
                routed = all_to_all(torch.randn(a2a_numel), fault == "uneven_alltoall" and on, ep_group)
                out = out + routed[: out.numel()].view_as(out)
            loss = out.square().mean()
            if moe_group is not None:  # the MoE layer on this TP rank's share of the rows
                loss = loss + moe_layer(out.chunk(args.tp)[tp_rank], moe_group).square().mean()
            loss.backward()
        if sync == "per_tensor":
            tensor_all_reduce(params, dp_group)
        elif sync == "flat":
            flat_all_reduce(params, dp_group)
        if fault == "mismatch":
            numel = BROADCAST_NUMEL * (2 if on and rank == MISMATCH_RANK else 1)
            dist.broadcast(torch.zeros(numel), src=0)  # a rank-dependent shape: Gloo completes it
        opt.step()
        opt.zero_grad(set_to_none=False)
        if fault == "barrier" and on:
            dist.barrier()
        stamps.append(time.perf_counter_ns())
    if args.stamps:
        args.stamps.mkdir(parents=True, exist_ok=True)
        (args.stamps / f"rank-{rank}.json").write_text(json.dumps(
            {"rank": rank, "fault": fault, "ab": args.ab, "stamps_ns": stamps}))
    # leave together and drop DDP before its group: Gloo can hang in destroy otherwise
    dist.barrier()
    del ddp, opt
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
