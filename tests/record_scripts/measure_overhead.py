"""Measure what commprof costs a training process (not a test; numbers for the docs/report).

    python measure_overhead.py                         # baseline
    commprof record --wait 100000 -- python measure_overhead.py   # hook installed, window never opens
    commprof record -- python measure_overhead.py --layers 60      # export stall: see the rank sidecar

Prints JSON: import time of torch, median/mean step time over the steps outside the window.
"""

import argparse
import json
import statistics
import sys
import time

t0 = time.perf_counter()
import torch  # noqa: E402

IMPORT_S = time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--width", type=int, default=32)
    args = p.parse_args()
    torch.manual_seed(0)
    layers = []
    for _ in range(args.layers):
        layers += [torch.nn.Linear(args.width, args.width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(8, args.width)
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        model(x).sum().backward()
        opt.step()
        opt.zero_grad()
        times.append(time.perf_counter() - start)
    tail = times[20:]  # skip warm-up and commprof's window (first steps)
    json.dump({"import_torch_s": round(IMPORT_S, 4), "median_step_us": round(statistics.median(tail) * 1e6, 2),
               "mean_step_us": round(statistics.fmean(tail) * 1e6, 2)}, sys.stdout)
    print()


if __name__ == "__main__":
    main()
