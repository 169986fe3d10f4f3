"""A data-parallel loop on Gloo profiled by its own ``torch.profiler`` (no ``commprof record``, no commprof
annotations): ``torchrun --nproc-per-node 4 plain_profiled.py OUT_DIR [options]`` writes
``OUT_DIR/rank-<RANK>.json``, a plain folder of Kineto traces as a user would hand it over.

Each step: forward and backward of a small MLP, then every gradient all-reduced synchronously (one call
per parameter, in order). ``--slow-rank R --slow-ms MS`` makes rank R sleep (or busy-compute with
``--slow-kind compute``) MS milliseconds more per step before its backward, so its peers wait for it at
the first all-reduce of every step.
"""

import argparse
import os
import time

import torch
import torch.distributed as dist


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--steps", type=int, default=8, help="profiled steps")
    p.add_argument("--width", type=int, default=384)
    p.add_argument("--batch", type=int, default=96)
    p.add_argument("--slow-rank", type=int, default=None)
    p.add_argument("--slow-ms", type=float, default=30.0)
    p.add_argument("--slow-kind", choices=("sleep", "compute"), default="sleep")
    return p.parse_args()


def delay(kind: str, seconds: float) -> None:
    if kind == "sleep":
        time.sleep(seconds)
        return
    end = time.perf_counter() + seconds
    a = torch.randn(64, 64)
    while time.perf_counter() < end:
        a = torch.tanh(a @ a)


def main() -> None:
    args = parse()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(args.width, args.width) for _ in range(4)])
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    world = dist.get_world_size()

    def step() -> None:
        loss = model(torch.randn(args.batch, args.width)).square().mean()
        if rank == args.slow_rank:
            delay(args.slow_kind, args.slow_ms / 1000.0)
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad.div_(world)
        opt.step()
        opt.zero_grad()

    os.makedirs(args.out, exist_ok=True)
    schedule = torch.profiler.schedule(wait=1, warmup=1, active=args.steps)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=schedule) as prof:
        for _ in range(args.steps + 2):
            step()
            prof.step()
    prof.export_chrome_trace(os.path.join(args.out, f"rank-{rank}.json"))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
