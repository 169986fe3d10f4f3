"""`make bench` (nsys part): ingest speed of Nsight Systems SQLite exports, MB/s of SQLite, against the floor
of a bare SQL scan of the same tables and columns in the same script (the machine's noise is shared).

A synthetic run (``commprof synth``, Kineto traces) is written as per-rank nsys exports (commprof/synth/nsys.py);
each export is then read ``--repeat`` times, interleaved: the bare scan (every row of the kernel, memcpy,
memset, runtime and NVTX tables fetched with sqlite3, nothing built) and commprof's reader (the tables a rank
hands on). Medians are reported. A report, not a test: exit status 0.

    python bench/bench_nsys.py [--ranks 4] [--steps 8] [--layers 8] [--repeat 3] [--keep DIR]
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCAN = {
    "CUPTI_ACTIVITY_KIND_KERNEL": "start, end, deviceId, streamId, correlationId, globalPid, demangledName",
    "CUPTI_ACTIVITY_KIND_MEMCPY": "start, end, deviceId, streamId, correlationId, globalPid, copyKind, bytes",
    "CUPTI_ACTIVITY_KIND_MEMSET": "start, end, deviceId, streamId, correlationId, globalPid, bytes",
    "CUPTI_ACTIVITY_KIND_RUNTIME": "start, correlationId, globalTid",
    "NVTX_EVENTS": "start, end, eventType, globalTid, text, textId, domainId",
}


def bare_scan(path: Path) -> int:
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    rows = 0
    for table, cols in SCAN.items():
        cur = con.execute(f"SELECT {cols} FROM {table}")
        while batch := cur.fetchmany(50_000):
            rows += len(batch)
    con.close()
    return rows


def make_exports(folder: Path, ranks: int, steps: int, layers: int) -> list[Path]:
    run = folder / "kineto"
    subprocess.run([sys.executable, "-m", "commprof", "synth", str(run), "--nodes", "1", "--gpus-per-node",
                    str(ranks), "--layout", f"tp={ranks}", "--steps", str(steps), "--layers", str(layers)],
                   check=True, capture_output=True)
    from commprof.run import open_run
    from commprof.synth.nsys import write_exports

    return write_exports(open_run(run).tables(), folder / "nsys")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keep", type=Path, default=None)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO))
    from commprof.ingest.nsys import extract

    folder = args.keep or Path(tempfile.mkdtemp(prefix="commprof-bench-nsys-"))
    try:
        exports = make_exports(folder, args.ranks, args.steps, args.layers)
        total_mb = sum(p.stat().st_size for p in exports) / 1e6
        extract(exports[0])  # imports and first-call setup are not what is measured
        scan_s: list[tuple[float, float]] = []
        read_s: list[tuple[float, float]] = []
        rows = 0
        for _ in range(args.repeat):
            t0, c0 = time.perf_counter(), time.process_time()
            rows = sum(bare_scan(p) for p in exports)
            scan_s.append((time.perf_counter() - t0, time.process_time() - c0))
            t0, c0 = time.perf_counter(), time.process_time()
            for p in exports:
                extract(p)
            read_s.append((time.perf_counter() - t0, time.process_time() - c0))
        print(f"nsys exports: {len(exports)} ranks, {total_mb:.1f} MB of SQLite, {rows:,} rows in the scanned tables")
        for what, times in (("bare SQL scan (floor)", scan_s), ("commprof nsys reader", read_s)):
            wall, cpu = statistics.median(t for t, _ in times), statistics.median(c for _, c in times)
            print(f"  {what:22s} wall {wall:.3f} s = {total_mb / wall:,.1f} MB/s, CPU {cpu:.3f} s = "
                  f"{total_mb / cpu:,.1f} MB/s")
        ratio = statistics.median(c for _, c in read_s) / statistics.median(c for _, c in scan_s)
        print(f"  reader / floor: {ratio:.1f}x in CPU time (median of {args.repeat})")
    finally:
        if args.keep is None:
            shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
