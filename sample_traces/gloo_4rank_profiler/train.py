"""A 4-rank Gloo job on CPU, profiled with plain torch.profiler: the first bundled sample.

Layout: a 2 x 2 DeviceMesh (dp, tp). Each step runs a DDP forward/backward over the dp group
(bucketed gradient all-reduce overlapping backward), a tensor-parallel style all-reduce and an async
all-gather on the tp group, and a send/recv pair between tp partners.

Re-record (writes rank-N.json.gz here, about 10 s on 2 cores):

    torchrun --nproc-per-node 4 sample_traces/gloo_4rank_profiler/train.py
"""

from __future__ import annotations

import gzip
import os
import shutil
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.nn.parallel import DistributedDataParallel

OUT = Path(__file__).resolve().parent
STEPS = 6


def main() -> None:
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    rank = dist.get_rank()
    dp, tp = mesh.get_group("dp"), mesh.get_group("tp")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 256))
    ddp = DistributedDataParallel(model, process_group=dp, bucket_cap_mb=0.25)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    tp_rank = dist.get_rank(tp)
    tp_peer = dist.get_global_rank(tp, 1 - tp_rank)
    tmp = OUT / f".tmp-rank-{rank}"
    schedule = torch.profiler.schedule(wait=1, warmup=1, active=3)
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU], schedule=schedule, record_shapes=True,
        on_trace_ready=torch.profiler.tensorboard_trace_handler(str(tmp)),
    ) as prof:
        for _ in range(STEPS):
            x = torch.randn(64, 256)
            ddp(x).sum().backward()
            activation = torch.ones(4096)
            dist.all_reduce(activation, group=tp)
            gathered = torch.empty(2 * 2048)
            work = dist.all_gather_into_tensor(gathered, torch.ones(2048), group=tp, async_op=True)
            torch.mm(torch.randn(128, 128), torch.randn(128, 128))  # compute while the gather runs
            work.wait()
            if tp_rank == 0:
                dist.send(torch.ones(1024), tp_peer)
            else:
                dist.recv(torch.empty(1024), tp_peer)
            opt.step()
            opt.zero_grad()
            prof.step()
    (trace,) = tmp.glob("*.json")
    with trace.open("rb") as src, gzip.open(OUT / f"rank-{rank}.json.gz", "wb", compresslevel=9) as dst:
        shutil.copyfileobj(src, dst)
    shutil.rmtree(tmp)
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo")
    main()
