"""`make bench-scale`: a synthetic 256-rank run with >= 20 MB of Kineto JSON per rank, end to end.

    python bench/bench_scale.py [--ranks 256] [--mb-per-rank 20] [--workers 1,2] [--hta-ranks 16]

1. The run is generated once by ``commprof synth`` and cached (bench/scale_run.py; ~5 GB of JSON, a
   quarter of an hour on 2 cores).
2. For each worker count, a fresh interpreter opens the run into an empty table cache and analyzes it
   (``--workers N``: N=1 in process, else a local process pool): wall time without imports, peak RSS of
   the main process and of the largest worker. Scaling = time with 1 worker / time with N.
3. Peak RSS per worker against the largest single trace (uncompressed JSON), the target being <= 1.5x
   of what grows with the trace: the RSS above an idle worker (the interpreter with polars, numpy and
   msgspec imported) and above a warm one (that has also run one task on a small trace: the lazy imports
   and the libraries' code a task pages in, which no trace's size changes). The total is printed too; at
   20 MB a trace is a fifth of the interpreter's own ~85 MB.
4. Memory against trace size: one rank's trace of ~20, 50, 100 and 200 MB (2-rank synthetic runs, cached),
   each opened and analyzed alone in a fresh interpreter set up as a pool worker: its peak RSS in all,
   and above the warm worker of 3. Memory that follows the JSON would grow by about the trace's size;
   what is kept grows by a fraction of it.
5. HTA 0.5.0 (.bench-venv, as bench_ingest.py sets it up) and commprof on the same 16-rank subset,
   each in a fresh interpreter through bench/child.py: time and peak-RSS ratios.
6. Hang reports at 16,384 ranks (bench/fr_scale.py; ``--no-fr`` skips it): Flight Recorder dumps of a job with
   one stuck DP group, `commprof analyze DUMPS` cold: wall, CPU, peak RSS, and whether the stuck group and
   the ranks behind it are named (target: within 60 s).

The figures go to .bench/scale.json. This is a report, not a test: the exit status is 0 when a
target is missed. The machine is shared and noisy: run it with ``nice`` and read ratios, not seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_ingest  # noqa: E402
import fr_scale  # noqa: E402
import hta_venv  # noqa: E402
import scale_run  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
OUT_JSON = REPO / ".bench" / "scale.json"
RSS_TARGET = 1.5
HTA_FALLBACK_MB = 5.0

# Peak RSS is read from /proc/PID/status (VmHWM: this process image's own high-water mark), never from
# getrusage: Linux carries the parent's RSS at fork into the child's ru_maxrss across exec, so a worker
# spawned by a 300 MB process would report at least 300 MB whatever it did itself.
HWM = """
def hwm_mb(pid="self"):
    try:
        with open(f"/proc/{pid}/status") as fh:
            return next(int(line.split()[1]) / 1024 for line in fh if line.startswith("VmHWM:"))
    except (OSError, StopIteration, ValueError):
        return 0.0
"""

END_TO_END = HWM + """
import json, resource, sys, time
t0 = time.perf_counter()
import commprof, commprof.run
from commprof.ingest.runner import make_runner
from commprof.report import analysis_json
t1 = time.perf_counter()
path, cache, workers = sys.argv[1], sys.argv[2], int(sys.argv[3])
with make_runner(workers) as runner:
    run = commprof.open_run(path, cache_dir=cache, runner=runner)
    t2 = time.perf_counter()
    analysis = commprof.analyze(run, runner=runner)
    report = analysis_json.build(analysis)
    t3 = time.perf_counter()
    where = runner.describe()
    pool = getattr(getattr(runner, "_pool", None), "_processes", None) or {}  # the live pool's workers
    workers_mb = max((hwm_mb(pid) for pid in pool), default=0.0)
me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
cpu_s = me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime
print(json.dumps({"cpu_s": cpu_s, "import_s": t1 - t0, "ingest_s": t2 - t1, "analyze_s": t3 - t2, "total_s": t3 - t1,
                  "ranks": len(report["ranks"]), "parsed": run.ingested.parsed, "runner": where,
                  "exposed_comm_ns": report["totals"].get("exposed_comm_ns"),
                  "maxrss_main_mb": hwm_mb(), "maxrss_worker_mb": workers_mb}))
"""

IDLE_WORKER = HWM + """
import gc, json, resource, sys, tempfile
from pathlib import Path
import commprof.ingest.kineto, commprof.ingest.store, commprof.analyzers.overlap, commprof.ingest.tables
import polars as pl
from commprof.ingest.runner import pooled
from commprof.ingest.store import FileEntry, parse_one
pl.DataFrame({"a": [1]}).write_parquet("/dev/null")
idle = hwm_mb()
small = Path(sys.argv[1])
entry = FileEntry(path=small, rel=small.name, stem="rank-0", size=small.stat().st_size,
                  mtime_ns=small.stat().st_mtime_ns)
with tempfile.TemporaryDirectory() as cache:
    assert pooled(parse_one, entry, Path(cache), None).error is None
gc.collect()
print(json.dumps({"idle": idle, "warm": hwm_mb()}))
"""
ONE_TRACE = HWM + """
import gc, json, resource, sys, tempfile, time
from pathlib import Path
import commprof, commprof.run
from commprof.ingest.runner import InProcess
from commprof.report import analysis_json
small, path = sys.argv[1], sys.argv[2]
with tempfile.TemporaryDirectory() as cache:  # warm: the first task of a worker, on a small trace
    analysis_json.build(commprof.analyze(commprof.open_run(small, cache_dir=cache, runner=InProcess()),
                                         runner=InProcess()))
gc.collect()
warm = hwm_mb()
t0 = time.perf_counter()
with tempfile.TemporaryDirectory() as cache:
    run = commprof.open_run(path, cache_dir=cache, runner=InProcess(), ranks=[0])
    report = analysis_json.build(commprof.analyze(run, runner=InProcess()))
print(json.dumps({"warm_mb": warm, "peak_mb": hwm_mb(),
                  "seconds": time.perf_counter() - t0, "ranks": len(report["ranks"])}))
"""
CURVE_MB = (50.0, 100.0, 200.0)  # besides the big run's largest trace

# the small trace a "warm" worker has run (its first task: lazy imports done, polars' code for a task paged in)
SMALL_TRACE = REPO / "sample_traces" / "synth_2x8_tp8_dp2" / "raw" / "traces" / "rank-0.json.gz"


def _python(code: str, *args: str, timeout: int = 3600) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=REPO,
                          timeout=timeout)
    if done.returncode:
        raise SystemExit(f"bench child failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _largest_trace_mb(run: Path) -> tuple[str, float]:
    """The largest rank's uncompressed JSON (cached beside the run: decompressing 5 GB takes a while)."""
    memo = run.parent / "trace-sizes.json"
    if memo.is_file():
        sizes = json.loads(memo.read_text())
    else:
        sizes = {p.name: scale_run.trace_mb(p) for p in sorted((run / "raw" / "traces").glob("rank-*.json.gz"))}
        memo.write_text(json.dumps(sizes))
    name = max(sizes, key=lambda k: sizes[k])
    return name, sizes[name]


def _worker_env(workers: int) -> dict[str, str]:
    """The environment runner._init_worker gives a pool worker of ``workers`` on this machine."""
    return {**os.environ, "_RJEM_MALLOC_CONF": "dirty_decay_ms:0,muzzy_decay_ms:0",
            "POLARS_MAX_THREADS": str(max(1, (os.cpu_count() or 1) // max(1, workers)))}


def memory_curve(big_run: Path, cache: Path) -> list[dict[str, Any]]:
    """Peak RSS of one process opening and analyzing one rank's trace, for traces of several sizes."""
    from commprof.synth import SynthConfig, generate

    base = SynthConfig(nodes=1, gpus_per_node=2, sizes={"tp": 2}, steps=3, kernels_per_phase=1, seed=1)
    runs = [(big_run, 0)]
    for mb in CURVE_MB:
        folder = cache / f"one-trace-{mb:g}mb"
        if not (folder / ".complete").is_file():
            shutil.rmtree(folder, ignore_errors=True)
            # ~0.12 MB of JSON per kernel per phase in this 2-rank layout (measured: 1520 -> 183 MB)
            generate(replace(base, kernels_per_phase=max(1, int(mb / 0.1205))), folder / "run", compresslevel=1,
                     jobs=2)
            (folder / ".complete").write_text("{}")
        runs.append((folder / "run", 0))
    out = []
    for run, rank in runs:
        trace = run / "raw" / "traces" / f"rank-{rank}.json.gz"
        mb = scale_run.trace_mb(trace)
        done = subprocess.run([sys.executable, "-c", ONE_TRACE, str(SMALL_TRACE), str(run)],
                              capture_output=True, text=True, cwd=REPO, env=_worker_env(2), timeout=1800)
        if done.returncode:
            out.append({"trace_mb": mb, "error": done.stderr.strip().splitlines()[-1:]})
            continue
        r = json.loads(done.stdout.strip().splitlines()[-1])
        r.update(trace_mb=mb, peak_over_trace=r["peak_mb"] / mb,
                 above_warm_over_trace=(r["peak_mb"] - r["warm_mb"]) / mb)
        out.append(r)
        print(f"one trace of {mb:.0f} MB: peak RSS {r['peak_mb']:.0f} MB = {r['peak_over_trace']:.2f}x the trace "
              f"(above the warm process' {r['warm_mb']:.0f} MB: {r['above_warm_over_trace']:.2f}x), "
              f"{r['seconds']:.1f} s", flush=True)
    if len(out) > 1 and all("error" not in r for r in out):
        slope = (out[-1]["peak_mb"] - out[0]["peak_mb"]) / (out[-1]["trace_mb"] - out[0]["trace_mb"])
        print(f"peak RSS grows by {slope:.2f} MB per MB of trace JSON", flush=True)
    return out


def end_to_end(run: Path, workers: int, scratch: Path) -> dict[str, Any]:
    cache = scratch / f"tables-{workers}"
    try:
        return _python(END_TO_END, str(run), str(cache), str(workers))
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def versus_hta(run: Path, n: int, scratch: Path) -> dict[str, Any]:
    python = hta_venv.ensure(REPO / ".bench-venv")
    if python is None:
        return {"error": ".bench-venv could not be set up"}
    files = [run / "raw" / "traces" / f"rank-{r}.json.gz" for r in range(n)]
    hta = bench_ingest.run_child(python, "hta", files, scratch)
    ours = bench_ingest.run_child(Path(sys.executable), "commprof", files, scratch)
    out: dict[str, Any] = {"ranks": n, "hta": hta, "commprof": ours}
    if "error" in hta or "error" in ours:
        return out
    if len(hta.get("overlap_pct") or {}) != n:
        out["error"] = f"HTA analyzed {len(hta.get('overlap_pct') or {})} of the {n} ranks"
        return out
    ours_rss = max(ours["maxrss_self_kb"], ours["maxrss_children_kb"]) / 1024
    hta_rss = max(hta["maxrss_self_kb"], hta["maxrss_children_kb"]) / 1024
    out.update(hta_s=hta["total_s"], commprof_s=ours["total_s"], time_ratio=hta["total_s"] / ours["total_s"],
               hta_rss_mb=hta_rss, commprof_rss_mb=ours_rss,
               commprof_main_rss_mb=ours["maxrss_self_kb"] / 1024,
               commprof_worker_rss_mb=ours["maxrss_children_kb"] / 1024,
               rss_ratio=ours_rss / hta_rss)
    return out


def _print_hta(h: dict[str, Any], what: str) -> None:
    if "time_ratio" in h:
        print(f"HTA on {h['ranks']} ranks of {what}: {h['hta_s']:.1f} s / {h['hta_rss_mb']:.0f} MB; commprof "
              f"{h['commprof_s']:.1f} s / {h['commprof_rss_mb']:.0f} MB (main {h['commprof_main_rss_mb']:.0f}, "
              f"largest worker {h['commprof_worker_rss_mb']:.0f}); HTA / commprof time {h['time_ratio']:.1f}x, "
              f"commprof / HTA RSS {h['rss_ratio']:.2f}", flush=True)
        return
    why = str(h.get("error") or h.get("hta", {}).get("error", "ok")).strip().splitlines()
    print(f"HTA on {h.get('ranks')} ranks of {what}: HTA failed ({why[-1] if why else '?'}); commprof "
          f"{h.get('commprof', {}).get('error', 'ok')}", flush=True)


def _hta_report(run: Path, args: argparse.Namespace, scratch: Path) -> dict[str, Any]:
    """HTA on a subset of the big run; where HTA cannot parse those traces (0.5.0 fails on traces with
    more than 32,767 correlation ids: a pandas int16 overflow), also on the same subset of a run with
    HTA_FALLBACK_MB per rank, so that a ratio is still measured — and the report says which it is."""
    h = versus_hta(run, args.hta_ranks, scratch)
    _print_hta(h, f"the {args.mb_per_rank:g} MB/rank run")
    out = {"main": h}
    if "time_ratio" not in h and "error" in h.get("hta", {}):
        small, _ = scale_run.ensure(args.hta_ranks, HTA_FALLBACK_MB, args.steps, args.cache, os.cpu_count() or 1)
        out["fallback_mb_per_rank"] = HTA_FALLBACK_MB
        out["fallback"] = versus_hta(small, args.hta_ranks, scratch)
        _print_hta(out["fallback"], f"a {HTA_FALLBACK_MB:g} MB/rank run (same generator)")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=256)
    parser.add_argument("--mb-per-rank", type=float, default=20.0, help="uncompressed trace MB per rank (>=)")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--workers", default="1,2", help="worker counts to time, comma-separated")
    parser.add_argument("--hta-ranks", type=int, default=16, help="ranks of the HTA comparison (0: skip)")
    parser.add_argument("--no-curve", dest="curve", action="store_false", help="skip the memory-vs-size curve")
    parser.add_argument("--cache", type=Path, default=scale_run.DEFAULT_CACHE, help="where the run is kept")
    parser.add_argument("--no-fr", dest="fr", action="store_false", help="skip the 16,384-rank hang report")
    parser.add_argument("--fr-out", type=Path, default=fr_scale.DEFAULT_OUT, help="where its dumps are kept")
    args = parser.parse_args()

    run, made = scale_run.ensure(args.ranks, args.mb_per_rank, args.steps, args.cache, os.cpu_count() or 1)
    largest_name, largest_mb = _largest_trace_mb(run)
    print(f"run: {run} — {made['ranks']} ranks, largest trace {largest_name} {largest_mb:.1f} MB of JSON "
          f"(generated in {made['generate_s']:.0f} s, {made['generate_jobs']} processes)", flush=True)
    counts = [int(w) for w in args.workers.split(",") if w.strip()]
    result: dict[str, Any] = {"run": str(run), "made": made, "largest_trace_mb": largest_mb,
                              "load": os.getloadavg(), "nice": os.nice(0)}
    # with the environment a pool worker gets (runner._init_worker: jemalloc decay, polars threads per worker)
    env = _worker_env(max(counts, default=2))
    idle = json.loads(subprocess.run([sys.executable, "-c", IDLE_WORKER, str(SMALL_TRACE)], capture_output=True,
                                     text=True, check=True, cwd=REPO, env=env).stdout.strip())
    result["idle_worker_mb"], result["warm_worker_mb"] = idle["idle"], idle["warm"]
    scratch = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    try:
        for n in counts:
            t0 = time.perf_counter()
            r = end_to_end(run, n, scratch)
            r["process_s"] = time.perf_counter() - t0
            worker_mb = r["maxrss_main_mb"] if n == 1 else r["maxrss_worker_mb"]
            r["worker_rss_over_trace"] = worker_mb / largest_mb
            r["worker_rss_above_idle_over_trace"] = (worker_mb - result["idle_worker_mb"]) / largest_mb
            r["worker_rss_above_warm_over_trace"] = (worker_mb - result["warm_worker_mb"]) / largest_mb
            result[f"workers_{n}"] = r
            print(f"--workers {n} ({r['runner']}): {r['total_s']:.1f} s (ingest {r['ingest_s']:.1f}, analysis "
                  f"{r['analyze_s']:.1f}; CPU {r['cpu_s']:.0f} s), {r['ranks']} ranks; "
                  f"peak RSS main {r['maxrss_main_mb']:.0f} MB, "
                  f"largest worker {r['maxrss_worker_mb']:.0f} MB; per worker / largest trace "
                  f"{r['worker_rss_over_trace']:.2f}x (above an idle worker's {result['idle_worker_mb']:.0f} MB: "
                  f"{r['worker_rss_above_idle_over_trace']:.2f}x, above one that ran a small trace "
                  f"({result['warm_worker_mb']:.0f} MB): {r['worker_rss_above_warm_over_trace']:.2f}x; "
                  f"target <= {RSS_TARGET}x)", flush=True)
        if 1 in counts:
            for n in counts:
                if n != 1:
                    ratio = result["workers_1"]["total_s"] / result[f"workers_{n}"]["total_s"]
                    result[f"scaling_1_to_{n}"] = ratio
                    print(f"scaling 1 -> {n} workers: {ratio:.2f}x faster (ideal {n}x on {n} free cores)")
        if args.curve:
            result["memory_curve"] = memory_curve(run, args.cache)
        if args.hta_ranks:
            result["hta"] = _hta_report(run, args, scratch)
        if args.fr:
            result["flight_recorder"] = fr_scale.run(args.fr_out)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    OUT_JSON.parent.mkdir(exist_ok=True)
    OUT_JSON.write_text(json.dumps(result, indent=1, default=str))
    print(f"figures in {OUT_JSON.relative_to(REPO)} (load average at start {result['load'][0]:.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
