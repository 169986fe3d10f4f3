"""Frontier scale (issue 39), the second half of ``make bench-scale``: synthetic runs of 16,384 and 5,000 ranks
analyzed cold on this machine, warm from the cache, on a 2-worker Dask cluster started here, and on ``--ranks``
subsets; the answers checked against the runs' truth.json.

    python bench/bench_frontier.py [--only 16k-dp2048,5k-dp2500] [--base REV] [--no-dask] [--no-subsets]

Runs (``commprof synth``, generated once into ``$COMMPROF_BENCH_CACHE/frontier`` and reused while complete):

- ``16k-dp2048``: 2,048 hosts x 8 GPUs, tp=8, dp=2,048, 3 steps, 2 layers, a straggler (rank 9001, +5 ms a step)
  and a slow link (host gpu-node-1234's NICs at a quarter of their speed). The targets: analyze <= 10 min and
  <= 8 GB peak (the whole process tree) cold; the warm answer in seconds; the straggler and the slow link named.
- ``16k-pp4-dp512``: the same hosts, tp=8, pp=4, dp=512, the same straggler and slow link.
- ``5k-dp2500``: 625 hosts x 8, tp=2, dp=2,500, 1 step, 1 layer, 1 micro-batch (bench/bench_small.py's run with
  one DP group of 2,500): >= 5x faster and <= 1/4 of the memory of ``--base`` (the revision before issue 39).

Each analysis is a fresh ``commprof analyze RUN --format json`` process with an empty table cache; its memory is
the peak of the sum of VmRSS over the process and its descendants (the pool's workers), sampled every 0.2 s, and
the peak of the process alone (VmHWM). Dask: ``dask scheduler`` and ``dask worker --nworkers 2 --nthreads 1``
processes started here; its JSON report must equal the local one (``generated_at`` aside). ``--ranks``: the
straggler's tensor-parallel group (its host's 8 ranks) must name the straggler, the slow host's ranks with one
other host's the slow link; their findings equal the whole run's for those subjects.

Rows go to .bench/frontier.json. A report, not a test: the exit status is 0 when a target is missed. The machine
is shared and noisy: read ratios, not seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
OUT_JSON = REPO / ".bench" / "frontier.json"
CACHE = Path(os.environ.get("COMMPROF_BENCH_CACHE") or "/tmp/commprof-bench-scale") / "frontier"

RUNS: dict[str, list[str]] = {
    "16k-dp2048": ["--nodes", "2048", "--layout", "tp=8,dp=2048", "--steps", "3", "--layers", "2",
                   "--straggler", "9001:+5000", "--slow-link", "gpu-node-1234"],
    "16k-pp4-dp512": ["--nodes", "2048", "--layout", "tp=8,pp=4,dp=512", "--steps", "3", "--layers", "2",
                      "--straggler", "9001:+5000", "--slow-link", "gpu-node-1234"],
    "5k-dp2500": ["--nodes", "625", "--layout", "tp=2,dp=2500", "--steps", "1", "--layers", "1",
                  "--micro-batches", "1"],
}
LIMIT_S, LIMIT_GB = 600.0, 8.0


def ensure(name: str) -> Path:
    """The run (generated when missing or incomplete) under CACHE/name."""
    run = CACHE / name
    if (run / ".complete").exists():
        return run
    real = run.resolve()  # the folder a link names (a run kept on another disk): synth writes there
    shutil.rmtree(real, ignore_errors=True)
    real.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "commprof", "synth", str(real), "--gpus-per-node", "8", *RUNS[name]],
                   check=True, cwd=REPO, stdout=subprocess.DEVNULL)
    (run / ".complete").write_text(f"{time.perf_counter() - t0:.0f} s\n")
    return run


def _tree_rss_kb(root: int) -> int:
    """VmRSS of ``root`` and its descendants (from /proc: each process's parent)."""
    parent: dict[int, int] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as fh:
                fields = dict(line.split(":", 1) for line in fh if ":" in line)
        except OSError:
            continue
        pid = int(entry)
        parent[pid] = int(fields.get("PPid", "0").strip() or 0)
        rss[pid] = int((fields.get("VmRSS") or "0 kB").split()[0])
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += rss.get(pid, 0)
        todo.extend(p for p, pp in parent.items() if pp == pid)
    return total


# the child: commprof's CLI, its own peak (VmHWM) on the last stderr line
CHILD = """
import sys
sys.argv = ["commprof", *sys.argv[1:]]
try:
    from commprof.cli import main
    main()
finally:
    with open("/proc/self/status") as fh:
        hwm = next(int(line.split()[1]) for line in fh if line.startswith("VmHWM:"))
    sys.stderr.write(f"\\nhwm_kb {hwm}\\n")
"""


def analyze(checkout: Path, run: Path, cache: Path, out: Path, *extra: str, report_cache: bool = False,
            timeout: int = 3600) -> dict[str, Any]:
    """One ``commprof analyze`` process: wall seconds, peak RSS of its tree and of itself, exit status."""
    env = {**os.environ, "PYTHONPATH": str(checkout), "COMMPROF_CACHE_DIR": str(cache),
           "COMMPROF_REPORT_CACHE": "1" if report_cache else "0", "PYTHONDONTWRITEBYTECODE": "1"}
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", CHILD, "analyze", str(run), "--format", "json", "-o", str(out),
                             *extra], cwd=checkout, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    peak = [0]

    def sample() -> None:
        while proc.poll() is None:
            peak[0] = max(peak[0], _tree_rss_kb(proc.pid))
            time.sleep(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    wall = time.perf_counter() - t0
    sampler.join()
    hwm = next((int(line.split()[1]) for line in reversed(err.splitlines()) if line.startswith("hwm_kb ")), 0)
    row = {"seconds": round(wall, 1), "tree_peak_gb": round(peak[0] / 2**20, 2), "main_peak_gb": round(hwm / 2**20, 2),
           "exit": proc.returncode}
    if proc.returncode not in (0, 1):
        row["stderr"] = err[-2000:]
    return row


def named(report: dict[str, Any], truth: dict[str, Any]) -> dict[str, bool]:
    """Each expected finding of truth.json: is there a finding of that id naming its rank or host?"""
    out = {}
    for want in truth["findings"]["expected"]:
        subject = want.get("subject") or {}
        hits = [f for f in report["findings"] if f["id"] == want["id"]]
        if "rank" in subject:
            ok = any(subject["rank"] in (f.get("ranks") or []) for f in hits)
        elif "host" in subject:
            ok = any(subject["host"] in (f.get("title") or "") + " " + (f.get("key") or "") for f in hits)
        else:
            ok = bool(hits)
        out[f"{want['id']}:{next(iter(subject.values()), '')}"] = ok
    return out


def _strip(report: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in report.items() if k != "generated_at"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def dask_cluster(workers: int = 2) -> tuple[str, list[subprocess.Popen[bytes]]]:
    """A scheduler and one ``dask worker`` process with ``workers`` worker processes, on 127.0.0.1."""
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [subprocess.Popen([str(bin_dir / "dask"), "scheduler", "--host", "127.0.0.1", "--port", str(port),
                               "--no-dashboard"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    time.sleep(3)
    procs.append(subprocess.Popen([str(bin_dir / "dask"), "worker", address, "--nworkers", str(workers),
                                   "--nthreads", "1", "--no-dashboard", "--memory-limit", "0"], env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    time.sleep(8)
    return address, procs


def bench_run(name: str, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    run = ensure(name)
    truth = json.loads((run / "truth.json").read_text())
    row: dict[str, Any] = {"run": name, "ranks": len(truth["ranks"]),
                           "trace_gb": round(sum(p.stat().st_size for p in (run / "raw").rglob("*") if p.is_file())
                                             / 1e9, 2)}
    local = tmp / f"{name}.json"
    row["cold"] = analyze(REPO, run, tmp / f"{name}-cache", local)
    print(f"{name}: cold {row['cold']}", flush=True)
    if row["cold"]["exit"] not in (0, 1):
        return row
    report = json.loads(local.read_text())
    row["named"] = named(report, truth)
    row["warm"] = analyze(REPO, run, tmp / f"{name}-cache", tmp / f"{name}-warm1.json", report_cache=True)
    row["warm"] = analyze(REPO, run, tmp / f"{name}-cache", tmp / f"{name}-warm.json", report_cache=True)
    print(f"{name}: warm {row['warm']}; named {row['named']}", flush=True)
    if args.base:
        base_out = tmp / f"{name}-base.json"
        row["base_cold"] = analyze(args.base, run, tmp / f"{name}-base-cache", base_out)
        print(f"{name}: base cold {row['base_cold']}", flush=True)
        row["speedup"] = round(row["base_cold"]["seconds"] / row["cold"]["seconds"], 2)
        row["memory_ratio"] = round(row["cold"]["tree_peak_gb"] / max(row["base_cold"]["tree_peak_gb"], 1e-9), 3)
        if base_out.exists():
            row["same_as_base"] = _strip(json.loads(base_out.read_text())) == _strip(report)
    if not args.no_dask and name.startswith("16k-"):
        address, procs = dask_cluster()
        try:
            dask_out = tmp / f"{name}-dask.json"
            row["dask"] = analyze(REPO, run, tmp / f"{name}-dask-cache", dask_out, "--scheduler", address)
            row["dask"]["same_json"] = dask_out.exists() and _strip(json.loads(dask_out.read_text())) == _strip(report)
        finally:
            for p in reversed(procs):
                p.terminate()
            for p in procs:
                p.wait(timeout=60)
        print(f"{name}: dask {row['dask']}", flush=True)
    if not args.no_subsets and truth.get("straggler") is not None:
        row["subsets"] = subsets(run, truth, report, tmp, name)
        print(f"{name}: subsets {row['subsets']}", flush=True)
    return row


def subsets(run: Path, truth: dict[str, Any], whole: dict[str, Any], tmp: Path, name: str) -> dict[str, Any]:
    """The straggler's host, and the slow host with another of its data-parallel groups (a link's transfer is
    told from the wait only where two members of a group are traced): the same subjects named as in the whole
    run."""
    host_of = {r["rank"]: r["host"] for r in truth["ranks"]}
    straggler = truth["straggler"]
    slow = next(f["subject"]["host"] for f in truth["findings"]["expected"] if "host" in f.get("subject", {}))
    shared = next(g for g in truth["process_groups"] if g["dimension"] == "dp" and slow in g["hosts"])
    other = next(h for h in shared["hosts"] if h != slow)
    cases = {"straggler_host": [r for r, h in host_of.items() if h == host_of[straggler]],
             "slow_host_and_one": [r for r, h in host_of.items() if h in (slow, other)]}
    out = {}
    for case, ranks in cases.items():
        path = tmp / f"{name}-{case}.json"
        res = analyze(REPO, run, tmp / f"{name}-cache", path, "--ranks", ",".join(map(str, ranks)))
        part = json.loads(path.read_text()) if path.exists() else {"findings": []}
        keys = {f["key"] for f in part["findings"]}
        want = ({f"straggler:rank{straggler}"} if case == "straggler_host" else
                {f["key"] for f in whole["findings"] if f["id"] == "link_efficiency"})
        out[case] = {**res, "ranks": len(ranks), "found": sorted(want & keys), "missing": sorted(want - keys)}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(RUNS), help="runs to measure (default: all)")
    parser.add_argument("--base", type=Path, help="a checkout of the revision before (for the 5k run's ratios)")
    parser.add_argument("--no-dask", action="store_true")
    parser.add_argument("--no-subsets", action="store_true")
    parser.add_argument("--keep", type=Path, help="keep the reports and caches here")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-frontier-") as t:
        tmp = args.keep or Path(t)
        tmp.mkdir(parents=True, exist_ok=True)
        rows = [bench_run(name, argparse.Namespace(**{**vars(args), "base": args.base if name.startswith("5k")
                                                          else None}), tmp)
                for name in args.only.split(",")]
    OUT_JSON.parent.mkdir(exist_ok=True)
    OUT_JSON.write_text(json.dumps(rows, indent=1) + "\n")
    print(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
