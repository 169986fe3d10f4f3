"""`make bench-record`: what `commprof record` costs the training steps of the 4-rank sample job.

Three variants of sample_traces/train_3d.py (unchanged), run interleaved so that they share the
machine's noise (round r runs them in rotated order: A B C, B C A, C A B, ...):

- ``commprof``: ``commprof record -o <tmp> --no-analyze -- torchrun ... wrapper.py``
- ``plain``:    ``torchrun ... wrapper.py`` with a plain ``torch.profiler.profile`` on the same schedule
                (wait/warmup/active as commprof's, repeat=1, CPU, record_shapes=True), stepped from the
                same place as commprof's (after every optimizer step), exporting like commprof
                (``export_chrome_trace`` on the training thread, gzip on a background thread)
- ``none``:     ``torchrun ... wrapper.py`` with no profiler

The wrapper (written into a temp dir) stamps ``time.perf_counter_ns()`` after every optimizer step
from a post-step hook of the first optimizer that steps, runs ``train_3d.main()`` and writes the
stamps to one JSON file per rank. Instance hooks run before global ones, so the stamp ending step N
is taken just before the profiler's step (commprof's global hook, or the plain variant's ``step()``
right after the stamp): step N = stamp N-1 .. stamp N ~ ``ProfilerStep#N``, and the export at the
window's end falls at the start of the first step after the window, in both profiling variants.
(Not a global post-step hook after commprof's: commprof removes its hook from inside the call that
closes the window, and torch then raises "OrderedDict mutated during iteration".)

Figures per run (pooled over ranks, median): *window* = the recorded steps (``ProfilerStep#2..#4``
with the defaults), *outside* = steps ``--outside-from`` .. end (default: 3 steps after the export
step, once the gzip thread is done), *export stall* = the export step (step 5 by default) minus
*outside*. Steps 0-1 (warm-up of every run) are never used. Targets: commprof / plain <= 1.02 in the
window, commprof / none <= 1.01 outside; judged on the median of the per-round ratios (each round's
three runs shared the same minute of the machine). The figures go to .bench/record.json. The exit
status is 0 even when a target fails: this is a report, not a test.

    python bench/bench_record.py [--rounds N] [--steps N] [--keep]
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
OUT_JSON = REPO / ".bench" / "record.json"
BIN = Path(sys.executable).parent
VARIANTS = ("commprof", "plain", "none")
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
    parser.add_argument("--steps", type=int, default=30, help="training steps per run (default 30)")
    parser.add_argument("--nproc", type=int, default=4)
    parser.add_argument("--tp", type=int, default=2)
    parser.add_argument("--dp", type=int, default=2)
    parser.add_argument("--wait", type=int, default=1, help="window: steps before it opens (commprof's default)")
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
    if args.outside_from is None:
        args.outside_from = args.wait + args.warmup + args.active + 3
    if args.steps <= args.outside_from + 2:
        parser.error(f"--steps must leave steps after {args.outside_from}")
    return args


def command(variant: str, args: argparse.Namespace, wrapper: Path, run_dir: Path) -> list[str]:
    torchrun = [str(BIN / "torchrun"), "--standalone", "--nproc-per-node", str(args.nproc), str(wrapper),
                "--tp", str(args.tp), "--dp", str(args.dp), "--steps", str(args.steps)]
    if variant != "commprof":
        return torchrun
    return [str(BIN / "commprof"), "record", "-o", str(run_dir), "--no-analyze", "--wait", str(args.wait),
            "--warmup", str(args.warmup), "--active", str(args.active), *args.record_option, "--", *torchrun]


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
    if variant == "commprof":
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
    window_cpu: list[float] = []
    outside_cpu: list[float] = []
    for r in ranks:
        stamps, cpu = r["stamps_ns"], r.get("cpu_stamps_ns") or []
        steps = [(b - a) / 1e6 for a, b in zip(stamps, stamps[1:], strict=False)]  # steps[i - 1] = step i
        cpu_steps = [(b - a) / 1e6 for a, b in zip(cpu, cpu[1:], strict=False)]
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
            "outside_ms": outside_ms,
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


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="commprof-bench-record-"))
    wrapper = tmp / "wrapper.py"
    wrapper.write_text(WRAPPER)
    print(f"bench-record: {args.nproc}-rank train_3d.py --tp {args.tp} --dp {args.dp} --steps {args.steps}, "
          f"window wait/warmup/active = {args.wait}/{args.warmup}/{args.active}, {args.rounds} rounds; "
          f"window steps {args.wait + args.warmup}..{args.wait + args.warmup + args.active - 1}, "
          f"export step {args.wait + args.warmup + args.active}, outside steps {args.outside_from}.."
          f"{args.steps - 1}", flush=True)
    rounds: list[dict[str, dict[str, Any]]] = []
    try:
        for i in range(args.rounds):
            order = VARIANTS[i % 3:] + VARIANTS[:i % 3]
            this: dict[str, dict[str, Any]] = {}
            for variant in order:
                res = run_once(variant, i, args, tmp, wrapper)
                if res is not None:
                    this[variant] = res
                    print(f"  round {i} {variant:8s} window {res['window_ms']:7.3f} ms  outside "
                          f"{res['outside_ms']:7.3f} ms  export stall {res['stall_ms']:7.2f} ms  "
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
        if not runs:
            continue
        per_variant[v] = {k: summarize([run[k] for run in runs])
                          for k in ("window_ms", "outside_ms", "stall_ms", "window_cpu_ms", "outside_cpu_ms")}
        per_variant[v]["runs"] = len(runs)
    if not {"commprof", "plain", "none"} <= per_variant.keys():
        print("bench-record: not enough successful runs to compare", file=sys.stderr)
        return 1

    window_ratios = paired(rounds, "commprof", "plain", "window_ms")
    outside_ratios = paired(rounds, "commprof", "none", "outside_ms")
    plain_outside = paired(rounds, "plain", "none", "outside_ms")
    ratios = {
        "cpu_window_commprof_over_plain": summarize(paired(rounds, "commprof", "plain", "window_cpu_ms")),
        "cpu_outside_commprof_over_none": summarize(paired(rounds, "commprof", "none", "outside_cpu_ms")),
        "cpu_outside_plain_over_none": summarize(paired(rounds, "plain", "none", "outside_cpu_ms")),
        "window_commprof_over_plain": summarize(window_ratios),
        "outside_commprof_over_none": summarize(outside_ratios),
        "outside_plain_over_none": summarize(plain_outside),
        "window_commprof_over_plain_of_medians": (per_variant["commprof"]["window_ms"]["median"]
                                                  / per_variant["plain"]["window_ms"]["median"]),
        "outside_commprof_over_none_of_medians": (per_variant["commprof"]["outside_ms"]["median"]
                                                  / per_variant["none"]["outside_ms"]["median"]),
    }
    window_pass = ratios["window_commprof_over_plain"]["median"] <= TARGET_WINDOW
    outside_pass = ratios["outside_commprof_over_none"]["median"] <= TARGET_OUTSIDE

    def cell(stats: dict[str, float]) -> str:
        return f"{stats['median']:8.3f} [{stats['min']:.3f}-{stats['max']:.3f}]"

    print()
    print(f"{'variant':9s} {'runs':>4s}  {'window step ms [min-max]':>28s}  {'outside step ms [min-max]':>28s}  "
          f"{'export stall ms [min-max]':>30s}")
    for v, st in per_variant.items():
        print(f"{v:9s} {st['runs']:4d}  {cell(st['window_ms']):>28s}  {cell(st['outside_ms']):>28s}  "
              f"{cell(st['stall_ms']):>30s}")
    commprof_side = [r["commprof"]["commprof_sidecar"] for r in rounds if "commprof" in r]
    plain_export = [r["plain"]["plain_export_ms"] for r in rounds if "plain" in r]
    side_total = [s["stall_total_ms"] for s in commprof_side if s["stall_total_ms"] is not None]
    side_export = [s["export_ms"] for s in commprof_side if s["export_ms"] is not None]
    if side_total:
        print(f"in-process: commprof stall_ms.total {statistics.median(side_total):.2f} ms "
              f"(export alone {statistics.median(side_export):.2f} ms); plain export_chrome_trace "
              f"{statistics.median(plain_export):.2f} ms (medians over runs of rank medians)")
    print()
    w, o, p = ratios["window_commprof_over_plain"], ratios["outside_commprof_over_none"], \
        ratios["outside_plain_over_none"]
    print(f"commprof / plain, window : {w['median']:.4f} (rounds {w['min']:.4f}-{w['max']:.4f}; of medians "
          f"{ratios['window_commprof_over_plain_of_medians']:.4f})  target <= {TARGET_WINDOW}  "
          f"{'PASS' if window_pass else 'FAIL'}")
    print(f"commprof / none, outside : {o['median']:.4f} (rounds {o['min']:.4f}-{o['max']:.4f}; of medians "
          f"{ratios['outside_commprof_over_none_of_medians']:.4f})  target <= {TARGET_OUTSIDE}  "
          f"{'PASS' if outside_pass else 'FAIL'}")
    print(f"plain / none, outside    : {p['median']:.4f} (rounds {p['min']:.4f}-{p['max']:.4f})  (for reference)")
    cw, co, cp = (ratios[k] for k in ("cpu_window_commprof_over_plain", "cpu_outside_commprof_over_none",
                                      "cpu_outside_plain_over_none"))
    print("process CPU time per step (less disturbed by other ranks sharing the cores):")
    print(f"  commprof / plain, window : {cw['median']:.4f} (rounds {cw['min']:.4f}-{cw['max']:.4f})  "
          f"target <= {TARGET_WINDOW}  {'PASS' if cw['median'] <= TARGET_WINDOW else 'FAIL'}")
    print(f"  commprof / none, outside : {co['median']:.4f} (rounds {co['min']:.4f}-{co['max']:.4f})  "
          f"target <= {TARGET_OUTSIDE}  {'PASS' if co['median'] <= TARGET_OUTSIDE else 'FAIL'}")
    print(f"  plain / none, outside    : {cp['median']:.4f} (rounds {cp['min']:.4f}-{cp['max']:.4f})  (for reference)")

    OUT_JSON.parent.mkdir(parents=True, exist_ok=True)
    OUT_JSON.write_text(json.dumps({
        "config": {k: v for k, v in vars(args).items() if k != "keep"},
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
        "targets": {"window_commprof_over_plain": TARGET_WINDOW, "outside_commprof_over_none": TARGET_OUTSIDE},
        "pass": {"window": window_pass, "outside": outside_pass},
        "variants": per_variant,
        "ratios": ratios,
        "rounds": rounds,
    }, indent=1))
    print(f"figures: {OUT_JSON.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
