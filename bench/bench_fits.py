"""What each stage of ``commprof analyze`` costs as ranks, group size, calls and steps grow (issue 39): series of
``commprof synth`` runs, each opened and analyzed cold in a fresh process with ``commprof.stages`` on, and per
stage the exponent b of a fit ``seconds ~ x^b`` over each series (log-log least squares). b near 1 is linear in
what grew; b near 2 in a ranks series is ranks x group size (or ranks^2).

    python bench/bench_fits.py [--max-ranks 4096] [--workers 2]
    python bench/bench_fits.py --run RUN   # one run's stages, cold

Series (all 8 GPUs per host, 1 layer unless said):
- ``ranks, dp grows``: tp=8, dp=R/8 (one data-parallel group as big as the job / 8), R = 512 .. max, 2 steps;
- ``ranks, groups fixed``: tp=8, dp=64, pp=R/512, R = 512 .. max, 2 steps: the groups keep their size;
- ``steps``: tp=8, dp=128 (1,024 ranks), 2, 4, 8 steps;
- ``calls``: the same, 2 steps, 1, 2, 4 layers (tensor-parallel calls per step grow with the layers).

The runs are cached under ``$COMMPROF_BENCH_CACHE/fits``. Rows to .bench/fits.json and a Markdown table on stdout
(docs/scale.md, "What each stage costs"). Stages under 0.05 s at the largest point are left out of the fit (noise).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("COMMPROF_BENCH_CACHE") or "/tmp/commprof-bench-scale") / "fits"
OUT_JSON = REPO / ".bench" / "fits.json"

CHILD = """
import json, sys, time
from commprof import stages
stages.enable()
import commprof
from commprof.ingest.runner import make_runner
from commprof.report import analysis_json
path, cache, workers = sys.argv[1], sys.argv[2], int(sys.argv[3])
t0 = time.perf_counter()
with make_runner(workers) as runner:
    run = commprof.open_run(path, cache_dir=cache, runner=runner)
    run.tables()
    analysis = commprof.analyze(run, runner=runner)
    with stages.timed("report.json"):
        analysis_json.build(analysis)
total = time.perf_counter() - t0
with open("/proc/self/status") as fh:
    hwm = next(int(line.split()[1]) for line in fh if line.startswith("VmHWM:"))
print(json.dumps({"total": total, "hwm_mb": hwm / 1024, **stages.TIMES}))
"""


def _run(name: str, nodes: int, layout: str, steps: int, layers: int) -> Path:
    run = CACHE / name
    if not (run / ".complete").exists():
        subprocess.run([sys.executable, "-m", "commprof", "synth", str(run), "--force", "--nodes", str(nodes),
                        "--gpus-per-node", "8", "--layout", layout, "--steps", str(steps), "--layers", str(layers)],
                       check=True, cwd=REPO, stdout=subprocess.DEVNULL)
        (run / ".complete").touch()
    return run


def measure(run: Path, workers: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="bench-fits-") as cache:
        env = {**os.environ, "PYTHONPATH": str(REPO), "COMMPROF_REPORT_CACHE": "0"}
        done = subprocess.run([sys.executable, "-c", CHILD, str(run), cache, str(workers)], capture_output=True,
                              text=True, cwd=REPO, env=env, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def series(max_ranks: int) -> dict[str, list[tuple[float, str, int, str, int, int]]]:
    """name -> [(x, run name, nodes, layout, steps, layers)]"""
    sizes = [r for r in (512, 1024, 2048, 4096, 8192, 16384) if r <= max_ranks]
    return {
        "ranks, dp grows": [(r, f"dpgrow-{r}", r // 8, f"tp=8,dp={r // 8}", 2, 1) for r in sizes],
        "ranks, groups fixed": [(r, f"fixed-{r}", r // 8, f"tp=8,dp=64,pp={r // 512}" if r > 512 else "tp=8,dp=64",
                                 2, 1) for r in sizes],
        "steps": [(s, f"steps-{s}", 128, "tp=8,dp=128", s, 1) for s in (2, 4, 8)],
        "calls": [(layers, f"layers-{layers}", 128, "tp=8,dp=128", 2, layers) for layers in (1, 2, 4)],
    }


def slope(points: list[tuple[float, float]]) -> float | None:
    pts = [(math.log(x), math.log(y)) for x, y in points if y > 0]
    if len(pts) < 2:
        return None
    mx, my = sum(p[0] for p in pts) / len(pts), sum(p[1] for p in pts) / len(pts)
    den = sum((p[0] - mx) ** 2 for p in pts)
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / den if den else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-ranks", type=int, default=4096)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--only", help="series names, comma-separated (default: all)")
    parser.add_argument("--run", type=Path, help="only this run's stages, cold (where a big run's time goes)")
    args = parser.parse_args(argv)
    if args.run is not None:
        times = measure(args.run, args.workers)
        print(json.dumps({k: round(v, 1) for k, v in sorted(times.items(), key=lambda kv: -kv[1])}))
        return 0
    rows: list[dict[str, Any]] = []
    for name, points in series(args.max_ranks).items():
        if args.only and name not in args.only.split(","):
            continue
        for x, run_name, nodes, layout, steps, layers in points:
            t0 = time.perf_counter()
            run = _run(run_name, nodes, layout, steps, layers)
            gen = time.perf_counter() - t0
            times = measure(run, args.workers)
            rows.append({"series": name, "x": x, "run": run_name, "layout": layout, "steps": steps, "layers": layers,
                         "generate_s": round(gen, 1), **{k: round(v, 3) for k, v in times.items()}})
            print(f"{name} x={x}: total {times['total']:.1f} s, peak {times['hwm_mb']:.0f} MB", flush=True)
    OUT_JSON.parent.mkdir(exist_ok=True)
    OUT_JSON.write_text(json.dumps(rows, indent=1) + "\n")
    stages = sorted({k for r in rows for k in r if "." in k or k in ("total", "hwm_mb")} - {"generate_s"})
    names = list(dict.fromkeys(r["series"] for r in rows))
    print("\n| stage | " + " | ".join(f"{n}: b (s at max)" for n in names) + " |")
    print("|---|" + "---|" * len(names))
    for stage in stages:
        cells = []
        for n in names:
            pts = [(r["x"], r.get(stage, 0.0)) for r in rows if r["series"] == n]
            top = pts[-1][1] if pts else 0.0
            b = slope(pts) if top >= 0.05 else None
            unit = "MB" if stage == "hwm_mb" else "s"
            cells.append(f"{b:.2f} ({top:.2f} {unit})" if b is not None else f"- ({top:.2f} {unit})")
        print(f"| {stage} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
