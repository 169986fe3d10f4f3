"""A DDP loop on Gloo that hangs: at step ``--hang-at`` every rank but 0 enters an all-to-all that rank 0
never joins, and rank 0 waits for a message nobody sends. Every training thread is then blocked inside
a C++ wait (Python signal handlers cannot run there), as in a real hung job. Before blocking, each rank
writes ``$REPORT_DIR/rank-<RANK>.json`` with the optimizer steps it has taken.
"""

import argparse
import json
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--hang-at", type=int, default=4)
    p.add_argument("--timeout-s", type=float, default=None, help="the process group's timeout (Gloo's watchdog)")
    args = p.parse_args()
    if args.timeout_s is None:
        dist.init_process_group("gloo")
    else:
        import datetime

        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout_s))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(8, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(args.steps):
        if step == args.hang_at:
            with open(os.path.join(os.environ["REPORT_DIR"], f"rank-{rank}.json"), "w") as fh:
                json.dump({"rank": rank, "optimizer_steps": step}, fh)
            if rank == 0:
                dist.recv(torch.zeros(4), src=world - 1)  # never sent
            else:
                dist.all_to_all_single(torch.zeros(world), torch.ones(world))  # rank 0 never joins
        loss = model(torch.ones(4, 8)).sum()
        loss.backward()
        opt.step()
        opt.zero_grad()


if __name__ == "__main__":
    main()
