"""Many small traces (issue 24): ``commprof analyze`` of a folder of ``--ranks`` small Kineto traces (default
5,000, about 4 kB of gzip each, from ``commprof synth``: 1 step, 1 layer, 1 micro-batch, tp=8, pp=25), cold
cache, as a whole process: wall seconds and peak RSS, this checkout (and ``--base``), interleaved. The floor,
measured in the same script: reading the same files' bytes, gunzip and a bare JSON decode (msgspec) of each,
in one process. Rows go to ``.bench/small.json``. What a small trace costs, and where, is in docs/scale.md
("Where the time goes"); small traces are parsed up to 64 to a task into one Parquet file per table
(commprof.ingest.store), their GPU tables built as one frame for the batch (commprof.ingest.kineto.reader.stack).

    python bench/bench_small.py [--ranks 5000] [--repeat 1] [--base /tmp/base] [--keep DIR]
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import bench_nccl_rare as rows_io

REPO = Path(__file__).resolve().parents[1]
GPUS = 8


def generate(folder: Path, ranks: int) -> Path:
    """A folder holding only the traces of a ``ranks``-rank synthetic run (reused when there)."""
    traces = folder / "traces"
    if traces.is_dir() and len(list(traces.iterdir())) >= ranks:
        return traces
    run = folder / "run"
    nodes = max(1, ranks // GPUS)
    world = nodes * GPUS
    # small groups keep each trace small (~4 kB of gzip, as in the issue): a trace lists its groups' members,
    # and one DP group of 2,500 ranks makes every trace 26 kB
    layout = f"tp=8,pp=25,dp={world // 200}" if world % 200 == 0 else f"tp=2,dp={world // 2}"
    subprocess.run([sys.executable, "-m", "commprof", "synth", str(run), "--nodes", str(nodes), "--gpus-per-node",
                    str(GPUS), "--steps", "1", "--layers", "1", "--micro-batches", "1", "--layout", layout],
                   check=True, capture_output=True, cwd=REPO)
    shutil.move(run / "raw" / "traces", traces)
    shutil.rmtree(run)
    return traces


def floor_s(traces: Path) -> float:
    """Bytes read, gunzipped and decoded, nothing built: what a file costs at the least."""
    import msgspec

    t0 = time.perf_counter()
    for path in sorted(traces.iterdir()):
        if not path.is_file():  # a table cache an earlier `commprof analyze` left beside the traces
            continue
        raw = path.read_bytes()
        msgspec.json.decode(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    return time.perf_counter() - t0


# the child reports its own peak RSS (and its workers', when it started any) on its last stderr line
CHILD = """
import resource, sys
sys.argv = ["commprof", *sys.argv[1:]]
try:
    from commprof.cli import main
    main()
finally:
    peak = max(resource.getrusage(who).ru_maxrss for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    sys.stderr.write(f"\\npeak_rss_kb {peak}\\n")
"""


def analyze_cold(checkout: Path, traces: Path) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of ``commprof analyze`` on the traces, with an empty cache."""
    with tempfile.TemporaryDirectory(prefix="bench-small-cache-") as cache:
        env = {**os.environ, "PYTHONPATH": str(checkout), "PYTHONDONTWRITEBYTECODE": "1", "COMMPROF_CACHE_DIR": cache}
        t0 = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", CHILD, "analyze", str(traces), "--format", "json", "-o",
                               str(Path(cache) / "out.json")], check=True, capture_output=True, text=True, env=env,
                              cwd=checkout)
        wall = time.perf_counter() - t0
    peak_kb = int(done.stderr.strip().splitlines()[-1].split()[-1])
    return wall, peak_kb / 1024


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=5000, help="small traces (default 5000)")
    parser.add_argument("--repeat", type=int, default=1, help="runs per checkout; medians reported")
    parser.add_argument("--base", type=Path, help="baseline checkout (e.g. `git archive HEAD | tar -x -C /tmp/base`)")
    parser.add_argument("--keep", type=Path, help="generate into (or reuse) this folder")
    parser.add_argument("--out", type=Path, default=REPO / ".bench" / "small.json", help="rows written here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-small-") as tmp:
        traces = generate(args.keep or Path(tmp), args.ranks)
        files = sorted(traces.iterdir())
        mb = sum(p.stat().st_size for p in files) / 1e6
        print(f"{len(files)} traces, {mb:.1f} MB in all")
        checkouts = {"new": REPO} | ({"base": args.base.resolve()} if args.base else {})
        walls: dict[str, list[float]] = {n: [] for n in checkouts}
        rss: dict[str, list[float]] = {n: [] for n in checkouts}
        floors = []
        for _ in range(args.repeat):
            floors.append(floor_s(traces))
            for name in sorted(checkouts):
                wall, peak = analyze_cold(checkouts[name], traces)
                walls[name].append(wall)
                rss[name].append(peak)
                print(f"{name:>4}: {wall:.1f} s ({wall / len(files) * 1e3:.1f} ms per file), peak RSS {peak:.0f} MB")
    floor = statistics.median(floors)
    print(f"floor (read + gunzip + decode): {floor:.2f} s ({floor / len(files) * 1e3:.2f} ms per file)")
    now = {n: statistics.median(w) for n, w in walls.items()}
    label = f"{len(files)} small traces ({mb:.0f} MB) cold, analyze whole process"
    at_scale = len(files) >= 5000  # a smaller run (while developing) is reported, not judged: fixed costs dominate
    out: list[dict[str, Any]] = [
        {"work": label, "now": round(now["new"], 2), "unit": "s", "floor": round(floor, 2),
         "floor_what": "read + gunzip + msgspec decode of each file", "hta": None,
         "target": "<= 20 s for 5,000 traces", "passed": now["new"] <= 20.0 if at_scale else None}
        | ({"base": round(now["base"], 2)} if "base" in now else {}),
        {"work": f"{label}: peak RSS", "now": round(statistics.median(rss["new"]), 1), "unit": "MB", "floor": None,
         "floor_what": "-", "hta": None, "target": "-", "passed": None}
        | ({"base": round(statistics.median(rss["base"]), 1)} if "base" in rss else {}),
    ]
    rows_io.write_rows(args.out, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
