"""The fault zoo's multi-node case: TP inside nodes against TP across nodes, recorded on a cluster of network
namespaces (tests/netns_cluster.py; root), ``make zoo-layout``.

    python tests/zoo/layout_zoo.py [--reps 3] [--gbit 0.5] [--batch 512] [--tp-layers 4] [--out DIR]

The same training (sample_traces/train_3d.py, tp=2 x dp=2 on 2 nodes of 2 ranks) is recorded with Megatron's
rank order (TP inside each node, DP across) and with TP slowest (``--tp-across-nodes``: TP across the nodes, DP
inside them); only the rank order changes. The two layouts alternate, ``--reps`` times each, on one cluster.
A layout cannot change inside one job, so the A/B here is between runs: the cost of the bad layout is the
median of the across runs' step time minus the median of the inside runs'. Judged:

* the across runs get ``tp_across_nodes`` (detection), the inside runs never do (false alarm);
* its saving against that measured difference;
* ``--what-if layout:tp=2,dp=2`` on each across run (Megatron's placement of the same sizes) against the
  inside runs' median step time: the what-if's error.

The table is printed and written to DIR/calibration.md, every run's figures to DIR/results.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))
import multinode  # noqa: E402 (test-support modules beside this script)
from netns_cluster import Cluster, cluster_unavailable  # noqa: E402

FIX = "layout:tp=2,dp=2"


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--gbit", type=float, default=0.5, help="the links between nodes, Gbit/s")
    p.add_argument("--batch", type=int, default=512, help="activation rows: the TP all-reduce is batch x 1 KiB")
    p.add_argument("--tp-layers", type=int, default=4, help="TP all-reduces per step")
    p.add_argument("--out", type=Path, default=Path("runs") / time.strftime("zoo-layout-%Y%m%d-%H%M%S",
                                                                             time.gmtime()))
    return p.parse_args()


def one(cluster: Cluster, out: Path, across: bool, args: argparse.Namespace) -> dict[str, Any]:
    train = multinode.train_args(2, tp_across=across) + ["--batch", str(args.batch), "--tp-layers", str(args.tp_layers)]
    launch = multinode.torchrun_per_node(cluster, out, train=train, timeout=300)
    if any(launch.codes):
        raise RuntimeError(f"{out}: the job failed\n{launch.explain()}")
    report = multinode.analyze_json(out, extra=("--what-if", FIX) if across else ())
    found = [f for f in report["findings"] if f["id"] == "tp_across_nodes"]
    tiers = {g["dimension"]: g["tier"] for g in report["process_groups"] if g["dimension"] in ("tp", "dp")}
    return {"run": str(out), "layout": "across" if across else "inside", "tiers": tiers,
            "step_ms": report["totals"]["step_ns"] / 1e6,
            "finding": ({"severity": found[0]["severity"], "saving_ms": found[0]["saving_ns_per_step"] / 1e6,
                         "model": found[0]["saving_model"]} if found else None),
            "what_if_step_ms": (report["what_if"]["totals"]["step_ns_after"] / 1e6 if report.get("what_if") else None),
            "what_if_method": (report["what_if"]["method"] if report.get("what_if") else None),
            "findings": [(f["id"], f["severity"]) for f in report["findings"]]}


def table(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    inside = [r["step_ms"] for r in rows if r["layout"] == "inside"]
    across = [r for r in rows if r["layout"] == "across"]
    cost = statistics.median(r["step_ms"] for r in across) - statistics.median(inside)
    named = [r for r in across if r["finding"]]
    false = [r for r in rows if r["layout"] == "inside" and r["finding"]]
    savings = [r["finding"]["saving_ms"] for r in named]
    across_steps = ", ".join(f"{r['step_ms']:.1f}" for r in across)
    what_ifs = ", ".join(f"{r['what_if_step_ms']:.1f}" for r in across if r["what_if_step_ms"] is not None)
    errors = [(r["what_if_step_ms"] - statistics.median(inside)) / statistics.median(inside) * 100
              for r in across if r["what_if_step_ms"] is not None]
    lines = [
        f"TP inside vs across nodes: 2 nodes x 2 ranks, links {args.gbit:g} Gbit/s (tbf), TP all-reduce "
        f"{args.batch} KiB x {args.tp_layers} per step, {args.reps} runs of each layout alternated on one cluster",
        "",
        "| layout | runs | step ms (each) | tp_across_nodes | saving ms (each) | what-if layout:tp=2,dp=2 step ms |",
        "|---|---|---|---|---|---|",
        f"| TP inside nodes (Megatron) | {len(inside)} | {', '.join(f'{s:.1f}' for s in inside)} | "
        f"{len(false)} of {len(inside)} (false alarms) | - | - |",
        f"| TP across nodes | {len(across)} | {across_steps} | "
        f"{len(named)} of {len(across)} | {', '.join(f'{s:.1f}' for s in savings) or '-'} | "
        f"{what_ifs} |",
        "",
        f"Measured cost of the bad layout (median across - median inside): {cost:.1f} ms/step; "
        f"finding's saving / measured cost: {', '.join(f'{s / cost:.2f}x' for s in savings) if cost > 0 else '-'}; "
        f"what-if error against the inside runs' median step ({statistics.median(inside):.1f} ms): "
        f"{', '.join(f'{e:+.0f} %' for e in errors)}",
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    args = parse()
    why = cluster_unavailable()
    if why:
        print(f"zoo-layout: {why}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    with Cluster(nodes=2, node_gbit=args.gbit) as cluster:
        for rep in range(args.reps):
            for across in ((False, True) if rep % 2 == 0 else (True, False)):
                t0 = time.monotonic()
                rows.append(one(cluster, args.out / f"{'across' if across else 'inside'}-{rep}", across, args))
                r = rows[-1]
                print(f"zoo-layout: {r['layout']} rep {rep}: step {r['step_ms']:.1f} ms, "
                      f"tp_across_nodes {r['finding'] or 'none'}, what-if {r['what_if_step_ms']} "
                      f"({time.monotonic() - t0:.0f} s)", flush=True)
    (args.out / "results.json").write_text(json.dumps(rows, indent=1))
    text = table(rows, args)
    (args.out / "calibration.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
