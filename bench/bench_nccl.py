"""`make bench-nccl`: NCCL log parse speed on a generated 128-rank log (every line NCCL) and on an
application log with NCCL lines only at its two ends (issue 24), this checkout against a baseline checkout,
in the same script so both share the machine's noise; rows go to ``.bench/nccl.json``.

The rare case is one file of ``--rare-mb`` MB (default 1024; a smaller one while developing): training
output (timestamps, ``[rank3]:`` and pod prefixes, tracebacks, blank and \r\n lines, UTF-8 bars) with the
first and second half of a 16-rank synthetic NCCL log before and after it. It is timed three ways: the parse
alone, ``commprof topology`` and ``commprof analyze`` (cold cache) as whole processes on a run directory
with the log in ``raw/nccl/``, in wall time and in CPU time (user + sys of the process and its threads; the
steadier figure on a shared machine, printed with the new/base ratio). Floors, measured in the same script:
a bare Python line pass over the same bytes (text mode, as the line-by-line parser reads) and a bare scan of
them for ``NCCL `` (mmap, bytes.count).

The log (16 nodes x 8 GPUs, NCCL 2.26, COLL lines, one file per process; see
tests/fixtures/nccl/gen_128rank.py) is generated into a temp folder, about ``--size-mb`` MB; a copy of it with a
``[%F %T] `` timestamp before every line (a new second every 500 lines, as a log collector writes it) is timed too. Each
tool runs in its own fresh interpreter, ``--repeat`` times, interleaved (base, new, base, ...);
medians of wall time and of process CPU time are reported (CPU time is the steadier of the two
when other work shares the machine). The baseline is any checkout of the repository (``git worktree add /tmp/base
HEAD``); without ``--base`` only this checkout is timed. A report, not a test: exit status 0.

    python bench/bench_nccl.py [--size-mb 93] [--rare-mb 1024] [--repeat 1] [--base /tmp/base] [--keep DIR]
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

import bench_nccl_rare as rare

REPO = Path(__file__).resolve().parents[1]
GEN = REPO / "tests" / "fixtures" / "nccl" / "gen_128rank.py"
BYTES_PER_STEP = 165_000  # what one generated step adds, over all 128 files
CHILD = """
import json, sys, time
from pathlib import Path
t0 = time.perf_counter()
from commprof.ingest.nccl_logs import build_tables, parse_nccl_logs
t1 = time.perf_counter()
paths = sorted(Path(sys.argv[1]).iterdir())
c1 = time.process_time()
logs = parse_nccl_logs(paths)
t2 = time.perf_counter()
c2 = time.process_time()
tables = build_tables(logs)
t3 = time.perf_counter()
import commprof
print(json.dumps({"where": commprof.__file__, "import_s": t1 - t0, "parse_s": t2 - t1, "parse_cpu_s": c2 - c1,
                  "tables_s": t3 - t2,
                  "lines": logs.stats.lines_total, "comms": tables.nccl_communicators.height,
                  "colls": tables.nccl_colls.height}))
"""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=float, default=93, help="all-NCCL log size to generate (default 93 MB)")
    parser.add_argument("--rare-mb", type=float, default=1024, help="application log size (default 1024 MB; 0: skip)")
    parser.add_argument("--repeat", type=int, default=1, help="runs per checkout (default 1); medians reported")
    parser.add_argument("--base", type=Path, help="baseline checkout (e.g. a `git worktree` of HEAD)")
    parser.add_argument("--keep", type=Path, help="generate into (or reuse) this folder instead of a temp one")
    parser.add_argument("--out", type=Path, default=REPO / ".bench" / "nccl.json", help="rows written here")
    return parser.parse_args(argv)


def generate(folder: Path, size_mb: float) -> int:
    if folder.is_dir() and any(folder.iterdir()):
        return sum(p.stat().st_size for p in folder.iterdir())
    steps = max(1, int(size_mb * 1e6 / BYTES_PER_STEP))
    subprocess.run([sys.executable, str(GEN), str(folder), str(steps)], check=True)
    return sum(p.stat().st_size for p in folder.iterdir())


def stamped(folder: Path, into: Path, every: int = 500) -> Path:
    """A copy of the log files in ``folder`` with ``[%F %T] `` before each line, one second per ``every`` lines."""
    if into.is_dir() and any(into.iterdir()):
        return into
    into.mkdir(parents=True, exist_ok=True)
    for path in sorted(folder.iterdir()):
        out = []
        with path.open("rb") as fh:
            for k, line in enumerate(fh):
                s = k // every
                out.append(b"[2025-07-21 %02d:%02d:%02d] " % (s // 3600 % 24, s // 60 % 60, s % 60) + line)
        (into / path.name).write_bytes(b"".join(out))
    return into


def run_child(checkout: Path, folder: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(checkout), "PYTHONDONTWRITEBYTECODE": "1"}
    out = subprocess.run([sys.executable, "-c", CHILD, str(folder)], check=True, capture_output=True, text=True,
                         env=env, cwd=checkout)
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-nccl-") as tmp:
        folder = args.keep or Path(tmp) / "log"
        size = generate(folder, args.size_mb)
        print(f"log: {folder} ({size / 1e6:.0f} MB, {len(list(folder.iterdir()))} files)")
        checkouts = {"new": REPO} | ({"base": args.base.resolve()} if args.base else {})
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in checkouts}
        floors: list[float] = []
        for _ in range(args.repeat):
            for name in sorted(checkouts):  # base first, then new
                runs[name].append(run_child(checkouts[name], folder))
            floors.append(rare.line_pass_s(sorted(folder.iterdir())))
        rates = report_all_nccl(runs, size)
        floor = size / 1e6 / statistics.median(floors)
        print(f"floor: bare line pass {floor:.0f} MB/s")
        rows.append(rare.row(f"NCCL log, every line NCCL ({size / 1e6:.0f} MB): parse", rates["new"], floor,
                             "bare Python line pass", ">= 150 MB/s", rates.get("base")))
        # the same log as a log collector keeps it: a timestamp before every line, the same for 500 lines at a time
        # (a few hundred collectives a second), so the lines' prefixes change every 500 lines
        timed = stamped(folder, Path(tmp) / "stamped" if args.keep is None else args.keep.with_name(
            args.keep.name + "-stamped"))
        timed_size = sum(p.stat().st_size for p in timed.iterdir())
        timed_runs: dict[str, list[dict[str, Any]]] = {name: [] for name in checkouts}
        timed_floors: list[float] = []
        for _ in range(args.repeat):
            for name in sorted(checkouts):
                timed_runs[name].append(run_child(checkouts[name], timed))
            timed_floors.append(rare.line_pass_s(sorted(timed.iterdir())))
        print(f"log with a timestamp per line: {timed} ({timed_size / 1e6:.0f} MB)")
        timed_rates = report_all_nccl(timed_runs, timed_size)
        rows.append(rare.row(f"NCCL log, every line NCCL, timestamped per line ({timed_size / 1e6:.0f} MB): parse",
                             timed_rates["new"], timed_size / 1e6 / statistics.median(timed_floors),
                             "bare Python line pass", ">= 150 MB/s", timed_rates.get("base")))
        if args.rare_mb > 0:
            rows += rare.bench_rare(Path(tmp) / "rare", args.rare_mb, checkouts, args.repeat, run_child)
    rare.write_rows(args.out, rows)
    return 0


def report_all_nccl(runs: dict[str, list[dict[str, Any]]], size: int) -> dict[str, float]:
    rates, cpu_rates = {}, {}
    for name, results in runs.items():
        parse = statistics.median(r["parse_s"] for r in results)
        tables = statistics.median(r["tables_s"] for r in results)
        cpu = statistics.median(r["parse_cpu_s"] for r in results)
        lines = results[0]["lines"]
        cpu_rates[name] = lines / cpu
        rates[name] = size / 1e6 / parse
        where = Path(results[0]["where"]).parents[1]
        print(f"{name:>4} ({where}): {lines} lines, parse {parse:.2f} s = {lines / parse:,.0f} lines/s "
              f"({size / 1e6 / parse:.0f} MB/s), tables {tables:.2f} s; "
              f"{results[0]['comms']} communicators, {results[0]['colls']} COLL rows; "
              f"parse CPU {cpu:.2f} s = {lines / cpu:,.0f} lines per CPU-second")
    if "base" in rates:
        print(f"new / base parse speed: {rates['new'] / rates['base']:.3f} wall, "
              f"{cpu_rates['new'] / cpu_rates['base']:.3f} CPU (CPU time is steadier on a shared machine)")
    return rates


if __name__ == "__main__":
    sys.exit(main())
