"""A Gloo job whose true numbers are known from outside commprof (4 ranks). ``MODE``:

* ``tp``: tp=2 x dp=2, Megatron-style tensor parallelism: the TP all-reduce is called inside a
  ``torch.autograd.Function``'s forward (row-parallel output) and backward (column-parallel input
  gradient), synchronously, so every TP call blocks the training thread; the DP gradients are
  all-reduced synchronously after backward.
* ``ddp``: DistributedDataParallel over the world with many buckets of different sizes (``BUCKET_MB``,
  default 0.25; async all-reduces on
  Gloo's worker threads, overlapping backward).

Each rank stamps ``time.perf_counter_ns()`` at the end of every iteration, in the optimizer's own
post-step hook (per-optimizer hooks run before the global ones, so before commprof's, which closes
the ProfilerStep mark and stops the profiler): the differences between consecutive stamps are the
job's own wall clock per iteration. They go to ``REPORT_DIR/rank-<RANK>.json``. ``STEPS`` (default 8), ``WIDTH``.
"""

import json
import os
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

WIDTH = int(os.environ.get("WIDTH", "512"))
BATCH = 64


class _ReduceForward(torch.autograd.Function):
    """Megatron's reduce-from-TP-region: all-reduce in forward, identity in backward."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any) -> torch.Tensor:
        out = x.clone()
        dist.all_reduce(out, group=group)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad, None


class _ReduceBackward(torch.autograd.Function):
    """Megatron's copy-to-TP-region: identity in forward, all-reduce of the input gradient in backward."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any) -> torch.Tensor:
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        out = grad.clone()
        dist.all_reduce(out, group=ctx.group)
        return out, None


class TPBlock(torch.nn.Module):
    def __init__(self, tp: Any, tp_size: int) -> None:
        super().__init__()
        self.tp = tp
        self.col = torch.nn.Linear(WIDTH, 2 * WIDTH // tp_size)
        self.row = torch.nn.Linear(2 * WIDTH // tp_size, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.col(_ReduceBackward.apply(x, self.tp)))
        return _ReduceForward.apply(self.row(h), self.tp)


def tp_job(steps: int, stamps: list[int]) -> None:
    world, rank = dist.get_world_size(), dist.get_rank()
    tp_groups = [dist.new_group([r, r + 1]) for r in range(0, world, 2)]
    dp_groups = [dist.new_group([r, r + 2]) for r in range(2)]
    tp, dp = tp_groups[rank // 2], dp_groups[rank % 2]
    model = torch.nn.Sequential(*[TPBlock(tp, 2) for _ in range(3)])
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    opt.register_step_post_hook(lambda *_: stamps.append(time.perf_counter_ns()))
    for _ in range(steps):
        model(torch.randn(BATCH, WIDTH)).square().mean().backward()
        flat = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
        dist.all_reduce(flat, group=dp)
        opt.step()
        opt.zero_grad()


def ddp_job(steps: int, stamps: list[int]) -> None:
    # layers of different sizes: buckets of different sizes, so calls matched wrongly differ in bytes
    widths = [WIDTH, WIDTH // 2, WIDTH, 2 * WIDTH, WIDTH // 4, WIDTH, WIDTH]
    model = torch.nn.Sequential(*[torch.nn.Linear(a, b) for a, b in zip(widths, widths[1:], strict=False)])
    ddp = DistributedDataParallel(model, bucket_cap_mb=float(os.environ.get("BUCKET_MB", "0.25")))
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    opt.register_step_post_hook(lambda *_: stamps.append(time.perf_counter_ns()))
    for _ in range(steps):
        ddp(torch.randn(BATCH, WIDTH)).square().mean().backward()
        opt.step()
        opt.zero_grad()


def main() -> None:
    dist.init_process_group("gloo")
    torch.manual_seed(dist.get_rank())
    steps = int(os.environ.get("STEPS", "8"))
    stamps: list[int] = []
    {"tp": tp_job, "ddp": ddp_job}[os.environ.get("MODE", "tp")](steps, stamps)
    report = os.environ.get("REPORT_DIR")
    if report:
        Path(report, f"rank-{dist.get_rank()}.json").write_text(json.dumps({"stamps_ns": stamps}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
