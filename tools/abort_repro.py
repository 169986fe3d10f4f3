"""Amplified reproducer for the rare SIGABRT ("malloc(): ... corrupted", "Fatal Python error: Aborted")
at the torch profiler's stop in recorded Gloo jobs. Not run by the test suite (minutes per arm).

    python tools/abort_repro.py --jobs 10 --windows 100 --load 2 REPRO_INFLIGHT=1 TORCH_FR_BUFFER_SIZE=20000

Runs ``--jobs`` 4-rank Gloo torchrun jobs of tools/abort_repro_rank.py (``--parallel`` at once, with
``--load`` busy-loop processes beside them), each opening and closing ``--windows`` profiler windows per
rank from the optimizer post-step hook; NAME=VALUE arguments go into the ranks' environment (see the
rank script for its switches). Prints one line: stops, aborts (ranks that died by a signal or printed a
malloc/abort message during the run), exit_aborts (jobs whose ranks all finished their windows, then
died at exit), jobs. Exit status 0. Logs of failed jobs go to --logs.

Measured 2026-12-04 (torch 2.13.0 CPU, 2 cores, --parallel 2 --load 1 --windows 100, i.e. 8 ranks and
a busy loop on 2 cores). "In flight" = REPRO_DDP=0 REPRO_INFLIGHT=0 REPRO_HOOKOPS=64 REPRO_NUMEL=16:
64 async all_reduces issued in the hook right before the stopping step, waited after it.

    in flight, FR on (TORCH_FR_BUFFER_SIZE=20000)      4 aborts / 222 stops (every job)
    in flight, FR off (TORCH_FR_BUFFER_SIZE=0)         4 / 258
    in flight, record_shapes off                       3 / 755
    in flight, commprof's Annotator on                 4 / 820
    in flight, export on                               4 / 255
    in flight, REPRO_SETTLE=1 (the fix)                3 / 504   (does not cover work in flight)
    same 64 ops, work.wait() before the stop           0 / 1600
    same 64 ops, fut.wait() before the stop            0 / 1600  (with REPRO_NICE=1: 0 / 1600)
    DDP + 1 async all_reduce across the stop           1 / 1200
    DDP + 4 async all_reduces across the stop          0 / 1600  (DDP off: 0 / 1600)
    DDP + 8 hook all_reduces across the stop           1 / 2036
    DDP only (REPRO_INFLIGHT=0) with REPRO_NICE=1      0 / 1600  (+ 1 job aborted at exit:
                                                      "terminate called without an active exception")
    same with REPRO_SETTLE=1                           0 / 1600

With the fix (413602d), the real pipeline as test_record_faults runs it (commprof record, torchrun 4 ranks,
toy_train.py --steps 8), two jobs at once beside a busy loop: 130 jobs, 0 aborts (the failure was ~1 in 125
jobs before: too few jobs to call it fixed). stall_ms.settle there: 0.26-0.54 ms.

Measured 2026-12-06, same machine and settings (--windows 100 --parallel 2 --load 1), with ``commprof record``'s
own stop: REPRO_SESSION=1 (one RankSession per window: the global step hook, trace export and gzip, Flight
Recorder dump; TORCH_FR_BUFFER_SIZE=20000 as record sets it). The fix (3969bd4, commprof/record/rank/inflight.py):
the stop waits, at most 250 ms after the last ProfilerStep marker has closed, until the Gloo works issued while
recording are is_completed() and every Gloo worker thread has been seen asleep; else collection pauses and the
stop waits for a later step ("deferred"). "lost": windows without a trace. "wait": the longest stall_ms.stop_wait.

    python tools/abort_repro.py --jobs 13 --windows 100 --parallel 2 --load 1 \
        REPRO_SESSION=1 REPRO_DDP=0 REPRO_INFLIGHT=0 REPRO_HOOKOPS=64 REPRO_NUMEL=16 TORCH_FR_BUFFER_SIZE=20000

    in flight (HOOKOPS=64), before the fix (56e7b82)   6 aborts / 791 stops (6 jobs, every one: SIGSEGV
                                                      in the stop, _disable_profiler <- stop_trace <- step)
    in flight, the fix turned off (REPRO_UNGATED=1)   4 / 1348 (6 jobs)
    in flight, the fix                                0 / 5200 (13 jobs; 4982 deferred, 0 lost, wait <= 417 ms:
                                                      64 such all_reduces take 300-450 ms on this machine
                                                      even without the profiler)
    HOOKOPS=8, the fix                                0 / 2400 (6 jobs; 19 deferred, 0 lost, wait <= 272 ms)
    DDP + 1 async all_reduce across every step        0 / 2400 (6 jobs; 0 deferred, wait <= 142 ms)
    DDP + 8 hook all_reduces, REPRO_NICE=1            0 / 2400 (6 jobs; 1158 deferred, 0 lost, wait <= 319 ms)
    DDP only (REPRO_INFLIGHT=0), REPRO_NICE=1         0 / 3200 (8 jobs; 0 deferred, wait <= 27 ms)

Rows from "in flight, the fix" down run with the fix (the 5,200 at 3969bd4, the others at f2169ec: the same
stop); the DDP rows leave REPRO_NUMEL at 4096. Each row is the command above with its switches.

tests/test_numbers_torchrun.py with the fix: stall_ms.stop_wait 0.3-5.3 ms (median 0.55) on its 16 ranks, never
deferred; the last recorded step against the job's own clock: median over ranks -0.19 to +0.16 ms (bound 3 ms).
The minimal reproducer in docs/torch-profiler-gloo-race.md (no commprof): 6 of 6 jobs lost a rank (SIGSEGV).

Every abort during a run is in the profiler stop (faulthandler: torch/autograd/profiler.py:434
_disable_profiler <- profiler.py:399 stop_trace <- step) or, with the stop done, in a Gloo worker:
SIGSEGV, "malloc_consolidate(): unaligned fastbin chunk detected", "Fatal Python error: Aborted".
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RANK_SCRIPT = HERE / "abort_repro_rank.py"
SIGNS = ("malloc", "Aborted", "corrupted", "double free", "free():", "SIGABRT", "Signal 6", "Segmentation")


def busy() -> None:
    while True:
        pass


def session_counts(out: str) -> tuple[int, int, float]:
    """REPRO_SESSION ranks' deferred stops, windows without a trace, longest wait before a stop (ms)."""
    deferred = sum(int(m) for m in re.findall(r"deferred=(\d+)", out))
    lost = sum(int(m) for m in re.findall(r"lost=(\d+)", out))
    wait_ms = max((float(m) for m in re.findall(r"wait_ms=([\d.]+)", out)), default=0.0)
    return deferred, lost, wait_ms


def run_job(env: dict[str, str], windows: int, log_dir: Path, index: int) -> tuple[int, int, str, bool, str]:
    port = 29500 + (os.getpid() * 7 + index * 13) % 20000
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", "4",
           "--master-addr", "127.0.0.1", "--master-port", str(port), str(RANK_SCRIPT)]
    job_env = {**env, "REPRO_WINDOWS": str(windows)}
    done = subprocess.run(cmd, env=job_env, capture_output=True, text=True, timeout=1800)
    out = done.stdout + done.stderr
    # Kineto logs one "profiler_stop" line per stop (counts the stops of a job that died too)
    stops = max(sum(int(m) for m in re.findall(r"stops=(\d+)", out)), out.count("profiler_stop"))
    died = re.findall(r"exitcode\s*: (-6|-11|134|139) ", out)
    aborted = len(died)
    bad = done.returncode != 0 or any(s in out for s in SIGNS)
    if bad:
        (log_dir / f"job-{index}.log").write_text(f"rc={done.returncode}\n{out}")
        aborted = max(aborted, 1)
    # every rank printed its count: it died at exit (destroy_process_group, interpreter teardown), not at a stop
    at_exit = bool(aborted) and len(re.findall(r"stops=", out)) == 4
    return stops, aborted, ",".join(died), at_exit, out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--jobs", type=int, default=4)
    p.add_argument("--parallel", type=int, default=2)
    p.add_argument("--windows", type=int, default=100)
    p.add_argument("--load", type=int, default=0, help="busy-loop processes beside the jobs")
    p.add_argument("--logs", default=None)
    p.add_argument("assign", nargs="*")
    args = p.parse_args()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMMPROF_", "TORCH_FR_", "REPRO_"))}
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONPATH"] = str(HERE.parent)
    for item in args.assign:
        name, _, value = item.partition("=")
        env[name] = value
    log_dir = Path(args.logs or tempfile.mkdtemp(prefix="abort-repro-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    loaders = [multiprocessing.Process(target=busy, daemon=True) for _ in range(args.load)]
    for proc in loaders:
        proc.start()
    started = time.monotonic()
    stops = aborts = exit_aborts = jobs = deferred = lost = 0
    wait_ms = 0.0
    kinds: list[str] = []
    try:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(args.parallel) as pool:
            for s, a, k, at_exit, out in pool.map(lambda i: run_job(env, args.windows, log_dir, i), range(args.jobs)):
                stops += s
                d, lo, w = session_counts(out)
                deferred, lost, wait_ms = deferred + d, lost + lo, max(wait_ms, w)
                if at_exit:
                    exit_aborts += a
                else:
                    aborts += a
                if k:
                    kinds.append(k)
                jobs += 1
    finally:
        for proc in loaders:
            proc.terminate()
    arm = " ".join(args.assign) or "(defaults)"
    session = f" deferred={deferred} lost={lost} max_wait_ms={wait_ms:.1f}" if "REPRO_SESSION=1" in args.assign else ""
    print(f"arm: {arm} | stops={stops} aborts={aborts} exit_aborts={exit_aborts}{session} jobs={jobs} load={args.load} "
          f"exitcodes={kinds} wall={time.monotonic() - started:.0f}s logs={log_dir}", flush=True)


if __name__ == "__main__":
    main()
