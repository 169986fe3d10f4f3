"""A plain script (profiled as rank 0) that meets SIGTERM in one of two ways:

- ``own-handler``: it installs its own SIGTERM handler after importing torch (a checkpoint on preemption),
  which takes 2 s and exits 0; it sends itself SIGTERM at step 5.
- ``child``: it forks a child (as a DataLoader worker is) and terminates it with SIGTERM; the script
  itself must go on and finish.

It writes ``$REPORT_DIR/done.json`` when it ends by itself or through its handler.
"""

import argparse
import json
import os
import signal
import sys
import time

import torch


def report(what: str) -> None:
    with open(os.path.join(os.environ["REPORT_DIR"], "done.json"), "w") as fh:
        json.dump({"how": what}, fh)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["own-handler", "child"], required=True)
    args = p.parse_args()
    if args.mode == "own-handler":
        def checkpoint(signum: int, frame: object) -> None:
            time.sleep(2.0)
            report("handler")
            sys.exit(0)

        signal.signal(signal.SIGTERM, checkpoint)
    model = torch.nn.Linear(4, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(12):
        model(torch.ones(2, 4)).sum().backward()
        opt.step()
        opt.zero_grad()
        if step == 5 and args.mode == "own-handler":
            os.kill(os.getpid(), signal.SIGTERM)
        if step == 5 and args.mode == "child":
            child = os.fork()
            if child == 0:
                time.sleep(30)
                os._exit(0)
            time.sleep(0.3)
            os.kill(child, signal.SIGTERM)
            os.waitpid(child, 0)
            time.sleep(2.0)  # the parent's watcher would act within a second
        time.sleep(0.05)
    report("end")


if __name__ == "__main__":
    main()
