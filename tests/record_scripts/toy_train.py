"""A tiny DDP training loop on Gloo whose behaviour tests switch on with options.

It writes ``$REPORT_DIR/rank-<RANK>.json`` at the end (what the rank saw), so tests can check that
commprof changed nothing the script observes.
"""

import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--exit-code", type=int, default=0)
    p.add_argument("--raise-on-rank", type=int, default=None)
    p.add_argument("--raise-at-step", type=int, default=None)
    p.add_argument("--workers", type=int, default=0, help="DataLoader workers")
    p.add_argument("--user-profiler", default="none",
                   help="none | whole | late (starts at step 3), or one per rank, comma-separated")
    p.add_argument("--sleep", type=float, default=0.0, help="seconds per step")
    p.add_argument("--no-optimizer", action="store_true", help="all_reduce loop only (time windows)")
    p.add_argument("--user-step-hook", action="store_true",
                   help="register the script's own global optimizer post-step hook (after commprof's)")
    return p.parse_args()


class Numbers(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 10_000

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.full((8,), float(i % 7))


def main() -> None:
    args = parse()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    modes = args.user_profiler.split(",")
    user_mode = modes[rank] if len(modes) > 1 else modes[0]
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(8, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = torch.utils.data.DataLoader(Numbers(), batch_size=4, num_workers=args.workers)
    batches = iter(loader)
    user_hook_calls = [0]
    if args.user_step_hook:
        def count(*_: object) -> None:
            user_hook_calls[0] += 1

        from torch.optim.optimizer import register_optimizer_step_post_hook

        register_optimizer_step_post_hook(count)
    user_prof = None
    if user_mode == "whole":
        user_prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
        user_prof.start()
    steps_done = 0
    for step in range(args.steps):
        if user_mode == "late" and step == 3:
            user_prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
            user_prof.start()
        if args.raise_on_rank == rank and args.raise_at_step == step:
            raise RuntimeError(f"rank {rank} fails on purpose at step {step}")
        if args.no_optimizer:
            dist.all_reduce(torch.ones(64))
        else:
            loss = model(next(batches)).sum()
            loss.backward()
            opt.step()
            opt.zero_grad()
        if args.sleep:
            time.sleep(args.sleep)
        steps_done += 1
    user_events = None
    if user_prof is not None:
        user_prof.stop()
        user_events = len(user_prof.events())
    report_dir = os.environ.get("REPORT_DIR")
    if report_dir:
        seen = {k: os.environ.get(k) for k in ("NCCL_DEBUG", "TORCH_FR_BUFFER_SIZE", "USER_SITECUSTOMIZE_PID")}
        with open(os.path.join(report_dir, f"rank-{rank}.json"), "w") as fh:
            json.dump({"steps_done": steps_done, "env": seen, "user_profiler_events": user_events,
                       "pid": os.getpid(), "user_hook_calls": user_hook_calls[0],
                       "sys_path_has_shim": any("commprof-shim" in p for p in sys.path)}, fh)
    dist.barrier()  # leave together; see mesh_tp_dp.py
    del model, opt
    dist.destroy_process_group()
    sys.exit(args.exit_code)


if __name__ == "__main__":
    main()
