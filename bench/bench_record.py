"""`make bench-record`: what `commprof record` costs the training steps of the sample job, phase by phase.

Variants of sample_traces/train_3d.py (unchanged), run interleaved so that they share the machine's noise
(round r runs them in rotated order):

- ``commprof``:  ``commprof record -o <tmp> --no-analyze -- torchrun ... wrapper.py`` (defaults: Flight Recorder on)
- ``nofr``:      the same with ``--fr-entries 0`` (Flight Recorder off): what the Flight Recorder setting costs
- ``ondemand``:  ``commprof record --on-demand`` never triggered: the whole run is idle time of a production
                 recording (the step hook, the progress file every 2 s, a look for requests every 0.5 s)
- ``plain``:     ``torchrun ... wrapper.py`` with a plain ``torch.profiler.profile`` on the same schedule
                 (wait/warmup/active as commprof's, repeat=1, CPU, record_shapes=True), stepped from the
                 same place as commprof's (after every optimizer step), exporting like commprof
                 (``export_chrome_trace`` on the training thread, gzip on a background thread)
- ``none``:      ``torchrun ... wrapper.py`` with no profiler

The wrapper (written into a temp dir) stamps ``time.perf_counter_ns()`` after every optimizer step
from a post-step hook of the first optimizer that steps, runs ``train_3d.main()`` and writes the
stamps to one JSON file per rank. Instance hooks run before global ones, so the stamp ending step N
is taken just before the profiler's step (commprof's global hook, or the plain variant's ``step()``
right after the stamp): step N = stamp N-1 .. stamp N ~ ``ProfilerStep#N``, and the export at the
window's end falls at the start of the first step after the window, in both profiling variants.

Figures per run (pooled over ranks, median), by phase: *before* = steps 2 .. wait-1 (the window not open yet:
the recorder idle), *window* = the recorded steps, *stall* = the export step minus *outside*, *outside* = steps
``--outside-from`` .. end (default: 3 steps after the export step, once the gzip thread is done); for
``ondemand`` every phase is idle. Steps 0-1 (warm-up of every run) are never used. Targets: commprof / plain
<= 1.02 in the window, commprof / none <= 1.01 before and outside the window, ondemand / none <= 1.01; judged
on the median of the per-round ratios (each round's runs shared the same minute of the machine), in wall time
and in the ranks' own CPU time per step (less disturbed when ranks share cores). Ranks <= cores: `make
bench-record` runs 1 rank and 2 ranks (`--nproc`). NCCL's log settings cost nothing on Gloo runs and are not
measured here (no GPU). The figures go to .bench/record-<nproc>.json. The exit status is 0 even when a target
fails: this is a report, not a test.

    python bench/bench_record.py [--nproc N --tp T --dp D] [--rounds N] [--steps N] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "sample_traces" / "train_3d.py"
OUT_DIR = REPO / ".bench"
BIN = Path(sys.executable).parent
VARIANTS = ("commprof", "nofr", "ondemand", "plain", "none")
RECORDED = {"commprof": (), "nofr": ("--fr-entries", "0"), "ondemand": ("--on-demand",)}
TARGET_WINDOW = 1.02  # commprof / plain torch.profiler, steps inside the recording window
TARGET_OUTSIDE = 1.01  # commprof / no profiler, steps after the window closed

WRAPPER = r'''
"""Runs train_3d.main() unchanged, stamping every optimizer step (written by bench/bench_record.py)."""
import gzip
import json
import os
import shutil
import sys
import threading
import time

sys.path.insert(0, os.environ["BENCH_SAMPLE_DIR"])

import torch  # noqa: E402  (under commprof its rank hook registers here, before ours)
from torch.optim.optimizer import register_optimizer_step_pre_hook  # noqa: E402

import train_3d  # noqa: E402

VARIANT = os.environ["BENCH_VARIANT"]
OUT = os.environ["BENCH_OUT"]
RANK = int(os.environ.get("RANK", "0"))
stamps = []
export = {}
prof = None

if VARIANT == "plain":
    from torch.profiler import ProfilerActivity, profile, schedule

    def on_trace_ready(p):
        started = time.perf_counter()
        path = os.path.join(OUT, f"plain-trace-rank-{RANK}.json")
        p.export_chrome_trace(path)
        export["export_ms"] = (time.perf_counter() - started) * 1e3

        def compress():
            t = time.perf_counter()
            with open(path, "rb") as src, gzip.open(path + ".gz", "wb") as dst:
                shutil.copyfileobj(src, dst)
            os.remove(path)
            export["gzip_ms"] = (time.perf_counter() - t) * 1e3
            export["trace_bytes"] = os.path.getsize(path + ".gz")

        thread = threading.Thread(target=compress, daemon=True)
        thread.start()
        export["thread"] = thread

    window = json.loads(os.environ["BENCH_WINDOW"])
    prof = profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=window["wait"], warmup=window["warmup"], active=window["active"], repeat=1),
        on_trace_ready=on_trace_ready,
        record_shapes=True,
    )
    prof.start()


cpu_stamps = []


def on_step(optimizer, args, kwargs):
    stamps.append(time.perf_counter_ns())
    cpu_stamps.append(time.process_time_ns())
    if prof is not None:
        prof.step()


# An instance hook (run before the global ones, commprof's included) attached by a global pre-hook to
# the first optimizer that steps. So the stamp of step i is taken just before the
# profiler's step (and export) at the end of step i, in both profiling variants.
attached = set()


def attach(optimizer, args, kwargs):
    if id(optimizer) not in attached:
        attached.add(id(optimizer))
        if len(attached) == 1:
            optimizer.register_step_post_hook(on_step)


register_optimizer_step_pre_hook(attach)
try:
    train_3d.main()
finally:
    if prof is not None:
        prof.stop()
    thread = export.pop("thread", None)
    if thread is not None:
        thread.join()
    with open(os.path.join(OUT, f"{VARIANT}-rank-{RANK}.json"), "w") as f:
        json.dump({"rank": RANK, "variant": VARIANT, "stamps_ns": stamps, "cpu_stamps_ns": cpu_stamps,
                   "export": export}, f)
'''


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8, help="runs per variant, interleaved (default 8, >= 3)")
    parser.add_argument("--steps", type=int, default=40, help="training steps per run (default 40)")
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--dp", type=int, default=2)
    parser.add_argument("--batch", type=int, default=2048,
                        help="train_3d.py --batch: rows per micro-batch (default 2048: steps of some ms, so that "
                             "a recorder's cost is not below the timer's noise)")
    parser.add_argument("--wait", type=int, default=8, help="window: steps before it opens (steps 2..wait-1: before)")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--active", type=int, default=3)
    parser.add_argument("--outside-from", type=int, default=None,
                        help="first step counted as 'outside' (default: 4 steps after the export step)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per run before it is killed")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (wrapper, logs, run dirs)")
    parser.add_argument("--record-option", action="append", default=[], metavar="OPT",
                        help="extra option for `commprof record` (repeatable), e.g. --record-option=--fr-entries=0")
    args = parser.parse_args(argv)
    if args.rounds < 3:
        parser.error("--rounds must be >= 3")
    if args.wait < 4:
        parser.error("--wait must be >= 4 (steps 2..wait-1 are the idle phase before the window)")
    if args.outside_from is None:
        args.outside_from = args.wait + args.warmup + args.active + 3
    if args.steps <= args.outside_from + 2:
        parser.error(f"--steps must leave steps after {args.outside_from}")
    return args


def command(variant: str, args: argparse.Namespace, wrapper: Path, run_dir: Path) -> list[str]:
    torchrun = [str(BIN / "torchrun"), "--standalone", "--nproc-per-node", str(args.nproc), str(wrapper),
                "--tp", str(args.tp), "--dp", str(args.dp), "--steps", str(args.steps), "--batch", str(args.batch)]
    if variant not in RECORDED:
        return torchrun
    window = [] if variant == "ondemand" else ["--wait", str(args.wait), "--warmup", str(args.warmup), "--active",
                                               str(args.active)]
    return [str(BIN / "commprof"), "record", "-o", str(run_dir), "--no-analyze", *window, *RECORDED[variant],
            *args.record_option, "--", *torchrun]


def run_once(variant: str, index: int, args: argparse.Namespace, tmp: Path, wrapper: Path) -> dict[str, Any] | None:
    out = tmp / f"{variant}-{index}"
    out.mkdir()
    run_dir = tmp / f"{variant}-{index}-run"
    env = dict(os.environ)
    env.update(BENCH_VARIANT=variant, BENCH_OUT=str(out), BENCH_SAMPLE_DIR=str(SAMPLE.parent),
               BENCH_WINDOW=json.dumps({"wait": args.wait, "warmup": args.warmup, "active": args.active}),
               PYTHONWARNINGS="ignore")
    log = tmp / f"{variant}-{index}.log"
    started = time.perf_counter()
    with open(log, "wb") as fh:
        try:
            proc = subprocess.run(command(variant, args, wrapper, run_dir), env=env, stdout=fh,
                                  stderr=subprocess.STDOUT, timeout=args.timeout, cwd=tmp)
            code: int | str = proc.returncode
        except subprocess.TimeoutExpired:
            code = "timeout"
    wall = time.perf_counter() - started
    ranks = [json.loads(path.read_text()) for path in sorted(out.glob(f"{variant}-rank-*.json"))]
    if code != 0 or len(ranks) != args.nproc or any(len(r["stamps_ns"]) != args.steps for r in ranks):
        tail = log.read_text(errors="replace")[-2000:]
        print(f"  {variant} #{index}: FAILED (exit {code}, {len(ranks)} rank files)\n{tail}", file=sys.stderr)
        return None
    result = figures(ranks, args)
    result["wall_s"] = round(wall, 2)
    if variant in ("commprof", "nofr"):
        result["commprof_sidecar"] = commprof_sidecar_figures(run_dir, args.nproc)
    elif variant == "plain":
        result["plain_export_ms"] = statistics.median(r["export"].get("export_ms", float("nan")) for r in ranks)
        result["plain_gzip_ms"] = statistics.median(r["export"].get("gzip_ms", float("nan")) for r in ranks)
    return result


def figures(ranks: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    """Per-run figures in ms, pooled over ranks (the per-step barrier keeps them in lock step)."""
    first_recorded = args.wait + args.warmup  # step N = stamp N-1 .. stamp N ~ ProfilerStep#N
    export_step = first_recorded + args.active  # its start holds the export (right after stamp N-1)
    window: list[float] = []
    export: list[float] = []
    outside: list[float] = []
    before: list[float] = []
    window_cpu: list[float] = []
    outside_cpu: list[float] = []
    before_cpu: list[float] = []
    for r in ranks:
        stamps, cpu = r["stamps_ns"], r.get("cpu_stamps_ns") or []
        steps = [(b - a) / 1e6 for a, b in zip(stamps, stamps[1:], strict=False)]  # steps[i - 1] = step i
        cpu_steps = [(b - a) / 1e6 for a, b in zip(cpu, cpu[1:], strict=False)]
        before += steps[1:args.wait - 1]  # steps 2 .. wait-1: nothing open yet
        before_cpu += cpu_steps[1:args.wait - 1]
        window += steps[first_recorded - 1:export_step - 1]  # every recorded step
        export.append(steps[export_step - 1])
        outside += steps[args.outside_from - 1:]
        window_cpu += cpu_steps[first_recorded - 1:export_step - 1]
        outside_cpu += cpu_steps[args.outside_from - 1:]
    window_ms = statistics.median(window)
    export_ms = statistics.median(export)
    outside_ms = statistics.median(outside)
    # process CPU time per step: what the rank itself spends, much less disturbed than wall time
    # when ranks outnumber cores
    return {"window_ms": window_ms, "export_step_ms": export_ms, "stall_ms": export_ms - outside_ms,
            "outside_ms": outside_ms, "before_ms": statistics.median(before),
            "before_cpu_ms": statistics.median(before_cpu) if before_cpu else float("nan"),
            "window_cpu_ms": statistics.median(window_cpu) if window_cpu else float("nan"),
            "outside_cpu_ms": statistics.median(outside_cpu) if outside_cpu else float("nan")}


def commprof_sidecar_figures(run_dir: Path, nproc: int) -> dict[str, Any]:
    """commprof's own account of the stall (rank sidecars), for comparison with the step-derived one."""
    totals, exports, statuses = [], [], []
    for rank in range(nproc):
        path = run_dir / "raw" / "ranks" / f"rank-{rank}.json"
        try:
            window = json.loads(path.read_text()).get("window") or {}
        except (OSError, ValueError):
            continue
        statuses.append(window.get("status"))
        stall = window.get("stall_ms") or {}
        if "total" in stall:
            totals.append(stall["total"])
            exports.append(stall.get("export", float("nan")))
    return {"window_status": sorted(set(map(str, statuses))),
            "stall_total_ms": statistics.median(totals) if totals else None,
            "export_ms": statistics.median(exports) if exports else None}


def summarize(values: list[float]) -> dict[str, float]:
    med = statistics.median(values)
    return {"median": med, "min": min(values), "max": max(values),
            "spread_pct": (max(values) - min(values)) / med * 100 if med else float("nan")}


def paired(rounds: list[dict[str, dict[str, Any]]], num: str, den: str, key: str) -> list[float]:
    return [r[num][key] / r[den][key] for r in rounds if num in r and den in r]


# (name, numerator variant, denominator variant, figure, target or None): the table and the JSON's "ratios"
CHECKS = (
    ("idle before the window: commprof / none", "commprof", "none", "before_ms", TARGET_OUTSIDE),
    ("inside the window: commprof / plain", "commprof", "plain", "window_ms", TARGET_WINDOW),
    ("after the window: commprof / none", "commprof", "none", "outside_ms", TARGET_OUTSIDE),
    ("on-demand, never triggered: ondemand / none", "ondemand", "none", "outside_ms", TARGET_OUTSIDE),
    ("Flight Recorder in the window: commprof / nofr", "commprof", "nofr", "window_ms", None),
    ("Flight Recorder after it: commprof / nofr", "commprof", "nofr", "outside_ms", None),
    ("plain torch.profiler after its window: plain / none", "plain", "none", "outside_ms", None),
)
FIGURES = ("before_ms", "window_ms", "outside_ms", "stall_ms", "before_cpu_ms", "window_cpu_ms", "outside_cpu_ms")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="commprof-bench-record-"))
    wrapper = tmp / "wrapper.py"
    wrapper.write_text(WRAPPER)
    print(f"bench-record: {args.nproc}-rank train_3d.py --tp {args.tp} --dp {args.dp} --steps {args.steps} on "
          f"{os.cpu_count()} cores, window wait/warmup/active = {args.wait}/{args.warmup}/{args.active}, "
          f"{args.rounds} rounds of {', '.join(VARIANTS)}; before steps 2..{args.wait - 1}, window steps "
          f"{args.wait + args.warmup}..{args.wait + args.warmup + args.active - 1}, export step "
          f"{args.wait + args.warmup + args.active}, outside steps {args.outside_from}..{args.steps - 1}", flush=True)
    rounds: list[dict[str, dict[str, Any]]] = []
    try:
        for i in range(args.rounds):
            order = VARIANTS[i % len(VARIANTS):] + VARIANTS[:i % len(VARIANTS)]
            this: dict[str, dict[str, Any]] = {}
            for variant in order:
                res = run_once(variant, i, args, tmp, wrapper)
                if res is not None:
                    this[variant] = res
                    print(f"  round {i} {variant:8s} before {res['before_ms']:7.3f}  window {res['window_ms']:7.3f}"
                          f"  outside {res['outside_ms']:7.3f}  stall {res['stall_ms']:7.2f} ms  "
                          f"({res['wall_s']:.1f} s)", flush=True)
            rounds.append(this)
    finally:
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)

    per_variant: dict[str, dict[str, Any]] = {}
    for v in VARIANTS:
        runs = [r[v] for r in rounds if v in r]
        if runs:
            per_variant[v] = {k: summarize([run[k] for run in runs]) for k in FIGURES}
            per_variant[v]["runs"] = len(runs)
    if not set(VARIANTS) <= per_variant.keys():
        print("bench-record: not enough successful runs to compare", file=sys.stderr)
        return 1

    def cell(stats: dict[str, float]) -> str:
        return f"{stats['median']:7.3f} [{stats['min']:.3f}-{stats['max']:.3f}]"

    print()
    print(f"{'variant':9s} {'runs':>4s}  {'before ms':>24s}  {'window ms':>24s}  {'outside ms':>24s}  "
          f"{'stall ms':>24s}")
    for v, st in per_variant.items():
        print(f"{v:9s} {st['runs']:4d}  {cell(st['before_ms']):>24s}  {cell(st['window_ms']):>24s}  "
              f"{cell(st['outside_ms']):>24s}  {cell(st['stall_ms']):>24s}")
    commprof_side = [r["commprof"]["commprof_sidecar"] for r in rounds if "commprof" in r]
    plain_export = [r["plain"]["plain_export_ms"] for r in rounds if "plain" in r]
    side_total = [s["stall_total_ms"] for s in commprof_side if s["stall_total_ms"] is not None]
    side_export = [s["export_ms"] for s in commprof_side if s["export_ms"] is not None]
    if side_total:
        print(f"in-process: commprof stall_ms.total {statistics.median(side_total):.2f} ms "
              f"(export alone {statistics.median(side_export):.2f} ms); plain export_chrome_trace "
              f"{statistics.median(plain_export):.2f} ms (medians over runs of rank medians)")
    print()
    ratios: dict[str, Any] = {}
    passed: dict[str, bool] = {}
    print(f"{'ratio (median of per-round ratios [min-max])':52s} {'wall':>26s} {'rank CPU time':>26s}  target")
    for name, num, den, figure, target in CHECKS:
        wall = summarize(paired(rounds, num, den, figure))
        cpu = summarize(paired(rounds, num, den, figure.replace("_ms", "_cpu_ms")))
        ratios[name] = {"wall": wall, "cpu": cpu, "target": target}
        verdict = ""
        if target is not None:
            passed[name] = cpu["median"] <= target or wall["median"] <= target
            verdict = f"<= {target}  {'PASS' if passed[name] else 'FAIL'}"
        print(f"{name:52s} {wall['median']:8.4f} [{wall['min']:.3f}-{wall['max']:.3f}] "
              f"{cpu['median']:8.4f} [{cpu['min']:.3f}-{cpu['max']:.3f}]  {verdict}")
    out = OUT_DIR / f"record-{args.nproc}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "config": {k: v for k, v in vars(args).items() if k != "keep"},
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
        "pass": passed, "variants": per_variant, "ratios": ratios, "rounds": rounds,
    }, indent=1))
    print(f"figures: {out.relative_to(REPO)} (a ratio passes when wall or rank CPU time meets its target)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
