"""Record 4-rank Gloo runs with one rank late and clean twins, and print what the straggler rule says about
each (the recorded-run figures of docs/findings.md)::

    python tools/straggler_runs.py OUT_DIR [--runs 4] [--slow-ms 30] [--slow-kind sleep|compute]

Each pair: tests/record_scripts/plain_profiled.py under torchrun with ``--slow-rank (i % 4)`` and a clean
twin. Prints one line per run: the slow rank (or "clean"), the straggler findings, and the best candidate's
figures (lateness, jitter, steps last, chance) whether it was reported or not.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import commprof
from commprof.analyzers import lateness
from commprof.analyzers.findings_rules import Ctx

SCRIPT = Path(__file__).resolve().parents[1] / "tests" / "record_scripts" / "plain_profiled.py"


def record(out: Path, *args: str) -> None:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4", str(SCRIPT),
               str(out), *args]
    subprocess.run(command, check=True, capture_output=True, timeout=600)


def judge(path: Path, slow: int | None) -> str:
    a = commprof.analyze(str(path))
    c = Ctx(a)
    judged, scope = lateness.judged_calls(c.calls, c.doubtful, a.ranks.height, a.facts.world_size)
    said = [f"{f.severity}:rank{f.ranks[0]}" for f in a.finding_list if f.id == "straggler"]
    best = ", ".join(f"rank {x.rank} late {x.late_ns / 1e6:.1f} ms jitter {x.jitter_ns / 1e6:.1f} ms last "
                     f"{x.steps_last}/{x.steps} chance {x.chance:.2g}" for x in lateness.late_ranks(judged, scope))
    step_ms = a.totals["step_ns"] / 1e6
    return f"{path.name}: slow {'clean' if slow is None else slow}; step {step_ms:.0f} ms; said {said}; {best}"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out", type=Path)
    p.add_argument("--runs", type=int, default=4)
    p.add_argument("--slow-ms", type=float, default=30.0)
    p.add_argument("--slow-kind", choices=("sleep", "compute"), default="sleep")
    args = p.parse_args()
    for i in range(args.runs):
        slow = i % 4
        fault, clean = args.out / f"slow{i}", args.out / f"clean{i}"
        record(fault, "--slow-rank", str(slow), "--slow-ms", str(args.slow_ms), "--slow-kind", args.slow_kind)
        print(judge(fault, slow), flush=True)
        record(clean)
        print(judge(clean, None), flush=True)


if __name__ == "__main__":
    main()
