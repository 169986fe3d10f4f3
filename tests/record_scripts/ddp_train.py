"""A plain DistributedDataParallel job on Gloo: one process group (the world), gradients all-reduced in
buckets during backward. ``torchrun --nproc-per-node N ddp_train.py``; STEPS (default 6), BUCKET_MB (1)."""

import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def main() -> None:
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    width = 512  # 4 layers x 1 MiB of fp32 weights: several 1 MiB buckets
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(4)])
    ddp = DistributedDataParallel(model, bucket_cap_mb=float(os.environ.get("BUCKET_MB", "1")))
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    for _ in range(int(os.environ.get("STEPS", "6"))):
        ddp(torch.randn(64, width)).square().mean().backward()
        opt.step()
        opt.zero_grad()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
