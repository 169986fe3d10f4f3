"""A small 3-D parallel training job on CPU (Gloo) whose communication is known exactly.

Run it under ``commprof record`` (no change to this script is needed for profiling)::

    commprof record -o sample_traces/tp2_dp2 -- torchrun --nproc-per-node 4 sample_traces/train_3d.py --tp 2 --dp 2
    commprof record -o sample_traces/tp2_pp2_dp2 -- \\
        torchrun --nproc-per-node 8 sample_traces/train_3d.py --tp 2 --pp 2 --dp 2

Layout: a DeviceMesh over (pp, dp, tp), tp varying fastest (Megatron's order). Every step, each rank:

1. prefetches a parameter shard with an async all-gather on dp (FSDP style) and computes while it flies;
2. runs its pipeline stage's forward with a tensor-parallel all-reduce of the activations on tp;
3. sends activations to the next stage and gradients back (pp send/recv);
4. routes tokens to "experts" with an all_to_all of uneven splits on dp (MoE style);
5. runs backward under DDP on dp: gradient buckets all-reduce while backward still computes;
6. broadcasts a seed on tp and meets the others at a barrier on the whole world.

``expected_calls`` gives, for one rank and one step, every collective and p2p call with its process
group and bytes; tests compare commprof's analysis of the recorded runs against it.
"""

from __future__ import annotations

import argparse
import os
from collections import Counter

FLOAT = 4
PREFETCH_NUMEL = 2048  # per-rank shard of the all-gather prefetch
ACTIVATION = (16, 256)  # micro-batch x hidden: the TP all-reduce and the p2p messages
BROADCAST_NUMEL = 1000
HIDDEN = 256


def a2a_split(src: int, dst: int) -> int:
    """Elements dp-rank ``src`` sends to dp-rank ``dst`` in the MoE all-to-all (uneven on purpose)."""
    return 64 * (1 + src + 2 * dst)


def param_bytes() -> int:
    """Bytes of gradients DDP all-reduces per step: two Linear(HIDDEN, HIDDEN) layers per stage."""
    return 2 * (HIDDEN * HIDDEN + HIDDEN) * FLOAT


def coords(rank: int, tp: int, pp: int, dp: int, tp_across_nodes: bool = False) -> tuple[int, int, int]:
    """(pp, dp, tp) coordinates of a global rank, tp varying fastest (Megatron's order: a TP group is ranks next
    to each other, inside a node); with ``tp_across_nodes``, tp varies slowest (dp fastest): the same training
    with TP groups spread over the nodes, the layout the "TP across nodes" finding is about."""
    if tp_across_nodes:
        return (rank // dp) % pp, rank % dp, rank // (pp * dp)
    return rank // (tp * dp), (rank // tp) % dp, rank % tp


def expected_calls(rank: int, tp: int, pp: int, dp: int) -> Counter[tuple[str, str, int | None]]:
    """(group desc, op, bytes) of every call one rank makes in one step. DDP's gradient buckets are
    summarised as one ("mesh_dp", "all_reduce", None) entry per step: their split into buckets is
    DDP's choice, their total is ``param_bytes()``."""
    stage, dp_rank, _ = coords(rank, tp, pp, dp)
    act = ACTIVATION[0] * ACTIVATION[1] * FLOAT
    calls: Counter[tuple[str, str, int | None]] = Counter()
    if dp > 1:
        calls["mesh_dp", "all_gather", dp * PREFETCH_NUMEL * FLOAT] += 1
        sent = sum(a2a_split(dp_rank, j) for j in range(dp))
        calls["mesh_dp", "all_to_all", sent * FLOAT] += 1
        calls["mesh_dp", "all_reduce", None] += 1  # DDP buckets, total param_bytes()
    if tp > 1:
        calls["mesh_tp", "all_reduce", act] += 1
        calls["mesh_tp", "broadcast", BROADCAST_NUMEL * FLOAT] += 1
    if pp > 1:
        if stage > 0:
            calls["mesh_pp", "recv", act] += 1  # activations in
            calls["mesh_pp", "send", act] += 1  # gradients back
        if stage < pp - 1:
            calls["mesh_pp", "send", act] += 1
            calls["mesh_pp", "recv", act] += 1
    calls["default_pg", "barrier", None] += 1
    return calls


def rank_from_launcher() -> None:
    """srun and mpirun start one process per rank without torchrun: take the rank from what they set (as
    scripts launched that way do); MASTER_ADDR and MASTER_PORT come from the caller."""
    for rank, size, local, local_size in (
            ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"),
            ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
             "OMPI_COMM_WORLD_LOCAL_SIZE")):
        if "RANK" not in os.environ and rank in os.environ and size in os.environ:
            os.environ.update(RANK=os.environ[rank], WORLD_SIZE=os.environ[size],
                              LOCAL_RANK=os.environ.get(local, "0"))
            if os.environ.get(local_size, "").isdigit():
                os.environ["LOCAL_WORLD_SIZE"] = os.environ[local_size]


def main() -> None:
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.distributed.device_mesh import init_device_mesh
    from torch.nn.parallel import DistributedDataParallel

    parser = argparse.ArgumentParser()
    parser.add_argument("--tp", type=int, default=2)
    parser.add_argument("--pp", type=int, default=1)
    parser.add_argument("--dp", type=int, default=2)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--batch", type=int, default=ACTIVATION[0],
                        help="micro-batch rows of the activations (TP all-reduce and p2p messages: batch x 1 KiB)")
    parser.add_argument("--tp-layers", type=int, default=1, help="TP all-reduces of the activations per step")
    parser.add_argument("--tp-across-nodes", action="store_true",
                        help="rank order with tp slowest: TP groups span nodes (only the rank order changes)")
    args = parser.parse_args()
    tp, pp, dp = args.tp, args.pp, args.dp

    rank_from_launcher()
    if os.environ.get("LOCAL_WORLD_SIZE") == os.environ.get("WORLD_SIZE"):  # one node: its loopback
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    assert dist.get_world_size() == tp * pp * dp, "world size must be tp * pp * dp"
    order = (("tp", tp), ("pp", pp), ("dp", dp)) if args.tp_across_nodes else (("pp", pp), ("dp", dp), ("tp", tp))
    dims = [(name, n) for name, n in order if n > 1]
    mesh = init_device_mesh("cpu", tuple(n for _, n in dims), mesh_dim_names=tuple(name for name, _ in dims))
    group = {name: mesh.get_group(name) for name, _ in dims}
    stage, dp_rank, tp_rank = coords(rank, tp, pp, dp, args.tp_across_nodes)

    torch.manual_seed(stage)
    model = nn.Sequential(nn.Linear(HIDDEN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN))
    if dp > 1:
        model = DistributedDataParallel(model, process_group=group["dp"], bucket_cap_mb=0.1)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    shard = torch.ones(PREFETCH_NUMEL)

    for _ in range(args.steps):
        if dp > 1:  # 1. prefetch, overlapped with a matmul
            full = torch.empty(dp * PREFETCH_NUMEL)
            # all_gather_single is the current name (torch >= 2.13); older torch has only the other
            gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
            work = gather(full, shard, group=group["dp"], async_op=True)
            torch.mm(torch.randn(256, 256), torch.randn(256, 256))
            work.wait()
        # 2. forward (stage 0 makes its input, later stages receive it)
        x = torch.randn(args.batch, HIDDEN)
        if pp > 1 and stage > 0:
            dist.recv(x, group_src=stage - 1, group=group["pp"])
        x.requires_grad_(pp > 1 and stage > 0)
        out = model(x)
        for _ in range(args.tp_layers if tp > 1 else 0):
            partial = out.detach().clone()
            dist.all_reduce(partial, group=group["tp"])  # row-parallel output reduction
        # 3. pipeline: activations forward, gradients back
        if pp > 1 and stage < pp - 1:
            dist.send(out.detach(), group_dst=stage + 1, group=group["pp"])
            grad = torch.empty(args.batch, HIDDEN)
            dist.recv(grad, group_src=stage + 1, group=group["pp"])
        else:
            grad = torch.ones_like(out)
        # 4. MoE-style token routing with uneven splits
        if dp > 1:
            send_splits = [a2a_split(dp_rank, j) for j in range(dp)]
            recv_splits = [a2a_split(j, dp_rank) for j in range(dp)]
            tokens_out = torch.empty(sum(recv_splits))
            dist.all_to_all_single(tokens_out, torch.ones(sum(send_splits)), recv_splits, send_splits,
                                   group=group["dp"])
        # 5. backward: DDP all-reduces gradient buckets while backward runs
        out.backward(grad)
        if pp > 1 and stage > 0:
            dist.send(x.grad, group_dst=stage - 1, group=group["pp"])
        opt.step()
        opt.zero_grad()
        # 6. a seed broadcast and a barrier
        if tp > 1:
            dist.broadcast(torch.zeros(BROADCAST_NUMEL), group_src=0, group=group["tp"])
        dist.barrier()
    # a last barrier and dropping DDP's reducer before teardown: Gloo can hang in destroy otherwise
    dist.barrier()
    del model, opt
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
