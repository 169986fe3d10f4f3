"""A single-process training loop (no torchrun, no process group): ``python plain_train.py [exit code]``."""

import sys

import torch


def main() -> None:
    model = torch.nn.Linear(8, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(6):
        model(torch.randn(4, 8)).sum().backward()
        opt.step()
        opt.zero_grad()
    sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 0)


if __name__ == "__main__":
    main()
