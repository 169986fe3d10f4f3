"""NCCL logs of 2,048 nodes (issue 39): 16,384 per-process logs of init and connection lines (what
``NCCL_DEBUG=INFO NCCL_DEBUG_FILE=nccl.%h.%p`` writes at start-up), read against the same lines in one file.

    python bench/bench_nccl_many.py [--run RUN] [--base CHECKOUT] [--repeat 3]

``--run``: a folder whose ``raw/nccl/`` holds the logs (default: bench_frontier.py's ``16k-dp2048`` run,
generated when missing). Each measurement is a fresh interpreter that finds, parses and tabulates them
(``load_nccl`` + ``build_tables``, what ``analyze`` does with a run's NCCL logs), in wall and CPU seconds, for
this checkout and ``--base``; medians of ``--repeat`` interleaved rounds. The one-file case is the reader's own
rate for these lines (no per-file cost): the per-process logs should read within it. Lines of this kind go
through the per-line loop (~7 us each: every family has its own fields), not the bulk path that reads COLL lines
at 130-200 MB/s (``make bench-nccl``). Rows go to .bench/nccl_many.json. A report, not a test: exit status 0.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
OUT_JSON = REPO / ".bench" / "nccl_many.json"

CHILD = """
import json, os, resource, sys, time
t0, c0 = time.perf_counter(), os.times()
from commprof.ingest.nccl_logs import build_tables, load_nccl
run = load_nccl(sys.argv[1])
tables = build_tables(run.logs, run.topologies, run.graphs)
c1 = os.times()
print(json.dumps({"seconds": time.perf_counter() - t0, "cpu": c1.user + c1.system - c0.user - c0.system,
                  "files": len(run.inputs.logs), "lines": run.logs.stats.lines_total,
                  "processes": len(run.logs.processes), "comms": tables.nccl_comms.height,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def child(checkout: Path, path: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(checkout), "PYTHONDONTWRITEBYTECODE": "1"}
    out = subprocess.run([sys.executable, "-c", CHILD, str(path)], cwd=checkout, env=env, check=True,
                         capture_output=True, text=True)
    result: dict[str, Any] = json.loads(out.stdout.splitlines()[-1])
    return result


def one_file(logs: Path, into: Path) -> Path:
    """Every log's lines, file after file, in one file (each line keeps its host:pid:tid prefix)."""
    into.mkdir(parents=True, exist_ok=True)
    path = into / "all.log"
    with open(path, "wb") as out:
        for log in sorted(logs.iterdir()):
            out.write(log.read_bytes())
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, help="a folder with raw/nccl/ (default: the 16,384-rank run)")
    parser.add_argument("--base", type=Path, help="a checkout of the revision before")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    if args.run is None:
        sys.path.insert(0, str(REPO / "bench"))
        from bench_frontier import ensure

        args.run = ensure("16k-dp2048")
    logs = args.run / "raw" / "nccl"
    size = sum(p.stat().st_size for p in logs.iterdir())
    checkouts = {"new": REPO, **({"base": args.base} if args.base else {})}
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-nccl-many-") as tmp:
        single = one_file(logs, Path(tmp))
        cases = {"per-process logs": args.run, "one file": single}
        runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for _ in range(args.repeat):
            for case, path in cases.items():
                for name, checkout in checkouts.items():
                    runs.setdefault((case, name), []).append(child(checkout, path))
        for (case, name), results in runs.items():
            wall = statistics.median(r["seconds"] for r in results)
            cpu = statistics.median(r["cpu"] for r in results)
            first = results[0]
            rows.append({"case": case, "checkout": name, "files": first["files"], "mb": round(size / 1e6, 1),
                         "lines": first["lines"], "processes": first["processes"], "comms": first["comms"],
                         "seconds": round(wall, 2), "cpu_s": round(cpu, 2), "mb_per_s": round(size / 1e6 / wall, 1),
                         "klines_per_s": round(first["lines"] / wall / 1e3), "rss_mb": round(first["rss_mb"])})
    by = {(r["case"], r["checkout"]): r for r in rows}
    for name in checkouts:
        many, one = by["per-process logs", name], by["one file", name]
        print(f"{name}: {many['files']:,} logs, {many['mb']} MB, {many['lines']:,} lines: {many['seconds']} s "
              f"({many['mb_per_s']} MB/s); the same lines in one file {one['seconds']} s ({one['mb_per_s']} MB/s); "
              f"per-process / one file {many['seconds'] / one['seconds']:.2f}x wall, "
              f"{many['cpu_s'] / one['cpu_s']:.2f}x CPU")
    if args.base:
        new, base = by["per-process logs", "new"], by["per-process logs", "base"]
        print(f"per-process logs: base {base['seconds']} s / new {new['seconds']} s = "
              f"{base['seconds'] / new['seconds']:.2f}x")
    OUT_JSON.parent.mkdir(exist_ok=True)
    OUT_JSON.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
