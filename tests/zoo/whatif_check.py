"""Every kind of what-if checked against running the changed job (part of ``make zoo-calibrate``).

    python tests/zoo/whatif_check.py --out DIR [--reps 3] [--no-cluster] [--write]
    python tests/zoo/whatif_check.py --reanalyze DIR [--write]     # judge DIR's recordings again

A what-if keeps each rank's compute as measured and models only communication (analyzers/whatif.py). Here its
prediction on a recorded run is compared with the median step time of the job recorded with the change made:

* ``straggler:off``: the zoo's ``slow_rank`` (rank 2 computes 30 ms more per step) against ``clean`` (the same job);
* ``overlap:dp``: ``dp_after_backward`` (one all-reduce after the backward) against ``clean`` (DDP's buckets
  during the backward);
* ``layout:``: ``tp_megatron`` at tp=2 x dp=2 against the same model and global batch at tp=4 (``layout:tp=4``)
  and at tp=1 x dp=4 (``layout:dp=4``); the same with an MoE layer whose expert groups of 2 are folded into the
  dense ranks (``--moe 2``: the what-if keeps ep=2 as measured);
* on a cluster of network namespaces (root; tests/netns_cluster.py, the jobs of tests/zoo/layout_zoo.py):
  ``DIM:TIER``: TP across the nodes with ``tp:loopback`` and ``dp:ethernet`` against TP inside them; ``TIER=GB/s``:
  TP inside at a fast link with ``ethernet=`` the bandwidth it reached there times the ratio of the link rates,
  against the same job at the slow link.

Error = (predicted - measured) / measured, per recorded base run. ``--write`` puts the table into docs/findings.md
(between the ``calibration:whatif`` markers) and the error band per kind into analyzers/calibration.json, which
``commprof analyze --what-if`` prints beside its estimate.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ZOO = Path(__file__).resolve().parent
REPO = ZOO.parents[1]
sys.path.insert(0, str(ZOO))
sys.path.insert(0, str(ZOO.parent))
import zoolib  # noqa: E402 (test-support modules beside this script)

# job name -> (train_zoo fault, its extra arguments)
JOBS: dict[str, tuple[str, tuple[str, ...]]] = {
    "slow_rank": ("slow_rank", ()),
    "clean": ("clean", ()),
    "dp_after_backward": ("dp_after_backward", ()),
    "tp2": ("tp_megatron", ("--tp", "2")),
    "tp4": ("tp_megatron", ("--tp", "4")),
    "tp1": ("tp_megatron", ("--tp", "1")),
    "tp2_moe": ("tp_megatron", ("--tp", "2", "--moe", "2")),
    "tp4_moe": ("tp_megatron", ("--tp", "4", "--moe", "2")),
    "tp1_moe": ("tp_megatron", ("--tp", "1", "--moe", "2")),
}
# (kind, the what-if changes, the recorded base job, the job recorded with the change made)
CASES: list[tuple[str, tuple[str, ...], str, str]] = [
    ("straggler", ("straggler:off",), "slow_rank", "clean"),
    ("overlap", ("overlap:dp",), "dp_after_backward", "clean"),
    ("layout", ("layout:tp=4",), "tp2", "tp4"),
    ("layout", ("layout:dp=4",), "tp2", "tp1"),
    ("layout", ("layout:tp=4",), "tp2_moe", "tp4_moe"),
    ("layout", ("layout:dp=4",), "tp2_moe", "tp1_moe"),
]
KIND_TEXT = {"straggler": "straggler:off", "overlap": "overlap:DIM", "layout": "layout:...", "move": "DIM:TIER",
             "bandwidth": "TIER=GB/s"}
FAST_FACTOR = 4  # the fast link of the bandwidth case, times the slow one


def analyze(run_dir: Path, *changes: str) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "commprof", "analyze", str(run_dir), "--format", "json"]
    for c in changes:
        cmd += ["--what-if", c]
    done = subprocess.run(cmd, env=zoolib.env(), capture_output=True, text=True, timeout=zoolib.JOB_TIMEOUT_S, cwd=REPO)
    if done.returncode != 0:
        raise RuntimeError(f"analyze {run_dir} {changes} failed ({done.returncode}): {done.stderr[-1500:]}")
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def step_ms(report: dict[str, Any]) -> float:
    return float(report["totals"]["step_ns"]) / 1e6


def predicted_ms(report: dict[str, Any]) -> float:
    return float(report["what_if"]["totals"]["step_ns_after"]) / 1e6


def record_node(out: Path, reps: int) -> None:
    for rep in range(reps):
        for name, (fault, extra) in JOBS.items():
            run_dir = out / "node" / name / f"rep{rep}"
            t0 = time.monotonic()
            zoolib.record(run_dir, fault, train_args=extra)
            print(f"whatif: {name} rep {rep} recorded ({time.monotonic() - t0:.0f} s)", flush=True)


def judge_node(out: Path) -> list[dict[str, Any]]:
    rows = []
    steps = {name: [step_ms(analyze(d)) for d in sorted((out / "node" / name).glob("rep*"))] for name in JOBS}
    for kind, changes, base, target in CASES:
        if not steps[target]:
            continue
        measured = statistics.median(steps[target])
        for d in sorted((out / "node" / base).glob("rep*")):
            report = analyze(d, *changes)
            rows.append(_row(kind, changes, base, target, d, step_ms(report), predicted_ms(report), measured))
    return rows


def _row(kind: str, changes: tuple[str, ...], base: str, target: str, run: Path, before: float, predicted: float,
         measured: float) -> dict[str, Any]:
    return {"kind": kind, "changes": list(changes), "base": base, "target": target, "run": str(run),
            "before_ms": before, "predicted_ms": predicted, "measured_ms": measured,
            "error_pct": 100.0 * (predicted - measured) / measured}


def record_cluster(out: Path, reps: int, gbit: float) -> None:
    import multinode
    from netns_cluster import Cluster

    train_extra = ["--batch", "512", "--tp-layers", "4"]

    def job(cluster: Cluster, run_dir: Path, across: bool) -> None:
        train = multinode.train_args(2, tp_across=across) + train_extra
        launch = multinode.torchrun_per_node(cluster, run_dir, train=train, timeout=300)
        if any(launch.codes):
            raise RuntimeError(f"{run_dir}: the job failed\n{launch.explain()}")

    with Cluster(nodes=2, node_gbit=gbit) as cluster:
        for rep in range(reps):
            for across in ((False, True) if rep % 2 == 0 else (True, False)):
                job(cluster, out / "cluster" / f"{'across' if across else 'inside'}-{rep}", across)
                print(f"whatif: cluster {'across' if across else 'inside'} rep {rep} at {gbit:g} Gbit/s", flush=True)
    with Cluster(nodes=2, node_gbit=gbit * FAST_FACTOR) as cluster:
        for rep in range(reps):
            job(cluster, out / "cluster" / f"fast-{rep}", False)
            print(f"whatif: cluster inside rep {rep} at {gbit * FAST_FACTOR:g} Gbit/s", flush=True)
    (out / "cluster" / "links.json").write_text(json.dumps({"slow_gbit": gbit, "fast_gbit": gbit * FAST_FACTOR}))


def judge_cluster(out: Path) -> list[dict[str, Any]]:
    import commprof
    from commprof.analyzers import whatif

    folder = out / "cluster"
    if not (folder / "links.json").exists():
        return []
    links = json.loads((folder / "links.json").read_text())
    inside = statistics.median(step_ms(analyze(d)) for d in sorted(folder.glob("inside-*")))
    rows = []
    for d in sorted(folder.glob("across-*")):
        changes = ("tp:loopback", "dp:ethernet")
        report = analyze(d, *changes)
        rows.append(_row("move", changes, "TP across nodes", "TP inside nodes", d, step_ms(report),
                         predicted_ms(report), inside))
        report = analyze(d, "layout:tp=2,dp=2")
        rows.append(_row("layout", ("layout:tp=2,dp=2",), "TP across nodes", "TP inside nodes", d, step_ms(report),
                         predicted_ms(report), inside))
    ratio = links["slow_gbit"] / links["fast_gbit"]
    for d in sorted(folder.glob("fast-*")):
        reached = whatif.measured_gbps(commprof.analyze(str(d)), "ethernet")
        if not reached:
            continue
        change = f"ethernet={reached * ratio:.4g}"
        report = analyze(d, change)
        rows.append(_row("bandwidth", (change,), f"links at {links['fast_gbit']:g} Gbit/s",
                         f"links at {links['slow_gbit']:g} Gbit/s", d, step_ms(report), predicted_ms(report), inside))
    return rows


def bands(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for kind in KIND_TEXT:
        errors = [r["error_pct"] for r in rows if r["kind"] == kind]
        if errors:
            out[kind] = {"cases": len(errors), "low_pct": round(min(errors), 1), "high_pct": round(max(errors), 1),
                         "runs": "Gloo on CPU, 4 ranks"}
    return out


def markdown(rows: list[dict[str, Any]], source: str) -> str:
    lines = [f"Measured by `make zoo-calibrate` ({source}): each what-if on a recorded run against the median step of "
             "the job recorded with the change made. Error = (predicted - measured) / measured.", "",
             "| what-if | recorded | rerun with the change | step before ms | predicted ms | measured ms | error |",
             "|---|---|---|---|---|---|---|"]
    lines.extend(f"| `{' '.join(r['changes'])}` | {r['base']} | {r['target']} | {r['before_ms']:.1f} | "
                 f"{r['predicted_ms']:.1f} | {r['measured_ms']:.1f} | {r['error_pct']:+.0f} % |" for r in rows)
    lines += ["", "| kind | cases | error band |", "|---|---|---|"]
    for kind, b in bands(rows).items():
        lines.append(f"| {KIND_TEXT[kind]} | {b['cases']} | {b['low_pct']:+.0f} % .. {b['high_pct']:+.0f} % |")
    return "\n".join(lines)


BEGIN, END = "<!-- calibration:whatif -->", "<!-- /calibration:whatif -->"


def write(rows: list[dict[str, Any]], source: str) -> None:
    target = REPO / "analyzers" / "calibration.json"
    data = json.loads(target.read_text()) if target.exists() else {}
    # a kind this pass did not measure (the cluster cases without root) keeps its band from the pass that did
    kept = data.get("whatif", {}).get("bands", {})
    data["whatif"] = {"source": source, "bands": {**kept, **bands(rows)}}
    target.write_text(json.dumps(data, indent=1) + "\n")
    doc = REPO / "docs" / "findings.md"
    body = doc.read_text()
    if BEGIN in body and END in body:
        head, rest = body.split(BEGIN, 1)
        doc.write_text(head + BEGIN + "\n" + markdown(rows, source) + "\n" + END + rest.split(END, 1)[1])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path)
    p.add_argument("--reanalyze", type=Path)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--gbit", type=float, default=0.5, help="the cluster's slow link, Gbit/s")
    p.add_argument("--no-cluster", action="store_true")
    p.add_argument("--write", action="store_true")
    args = p.parse_args()
    out = args.reanalyze or args.out
    if out is None:
        p.error("--out DIR or --reanalyze DIR")
    if args.reanalyze is None:
        record_node(out, args.reps)
        if not args.no_cluster:
            from netns_cluster import cluster_unavailable

            why = cluster_unavailable()
            if why:
                print(f"whatif: the cluster cases need network namespaces: {why}; skipped", file=sys.stderr)
            else:
                record_cluster(out, args.reps, args.gbit)
    rows = judge_node(out) + judge_cluster(out)
    (out / "whatif.json").write_text(json.dumps(rows, indent=1))
    source = f"{len({r['run'] for r in rows})} recorded runs, {time.strftime('%Y-%m-%d', time.gmtime())}"
    print(markdown(rows, source))
    if args.write:
        write(rows, source)
    return 0


if __name__ == "__main__":
    sys.exit(main())
