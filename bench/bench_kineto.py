"""Issue 24's Kineto rows of `make bench`, each against a floor measured in the same script.

    python bench/bench_kineto.py [--repeat 5] [--skip-hta] [--big-mb 20] [--rss-mb 500] [--kernel-heavy-mb 300]
                                 [--profile]

1. ``commprof analyze`` of the 53.7 MB real trace as a whole process, cold (an empty table cache) and
   warm (the cache and the report of the cold run), interleaved with HTA 0.5.0's whole process on the same file
   (bench/child.py in .bench-venv) and with the floor: a process that imports what the command needs
   (polars, numpy, msgspec, the CLI), gunzips the trace with the inflater the ingest uses (zlib-ng where
   installed, else zlib) and decodes it with msgspec into the minimal event struct.
2. Kineto ingest speed, per core: one rank's trace of ``--big-mb`` MB (``commprof synth``, generated once
   under /tmp/commprof-bench-kineto) and the real trace, read by ``extract`` in this process; CPU
   seconds (all threads: the inflate thread too) against the bare gunzip + decode's CPU seconds on the same
   file (the same inflater as the ingest's, so the floor is the machine's, not zlib's).
3. Peak RSS of a whole ``commprof ingest`` process on one generated trace of ``--rss-mb`` MB (0 skips it),
   against its JSON size.
4. The same for one kernel-heavy trace of ``--kernel-heavy-mb`` MB (bench/kernel_heavy.py: the 2x8 sample's rank 0
   repeated, nearly every event a kernel, a launch or a collective the tables keep; generated once under the
   cache, plain and gzipped), each read alone: target 0.5x.

A cold ``analyze`` reads the trace in a forked child while the parent imports (commprof/ingest/kineto/prefetch.py)
only when a core looks idle (runnable threads <= CPUs - 1, /proc/loadavg): on a shared machine set
``COMMPROF_PREFETCH=1`` (always) or ``0`` (never) to measure one or the other.

Rows go to .bench/kineto.json (schema: bench/summary.py). Timings on a shared machine are noisy: read
the ratios against the floor, measured interleaved, medians of ``--repeat``. A report, not a test.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import hta_venv  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
REAL = REPO.parent / "shared" / "real_traces" / "hta" / "df_index_resolver" / "df_index_resolver.json.gz"
CACHE = Path(os.environ.get("COMMPROF_BENCH_CACHE") or "/tmp/commprof-bench-kineto")
OUT_JSON = REPO / ".bench" / "kineto.json"
KPP_PER_MB = 8.2  # synth kernels per phase per MB of one rank's JSON (2 ranks, tp=2, 3 steps)

# The floor process: the imports `analyze` cannot do without, then gunzip + a typed msgspec decode.
FLOOR = """
import gzip, sys, time
import msgspec, numpy, polars
import commprof.cli
from commprof.ingest.kineto.decode import Event
class Doc(msgspec.Struct):
    traceEvents: list[Event] = []
try:
    from zlib_ng.zlib_ng import decompress as gunzip  # the inflater the ingest uses where installed
except ImportError:
    from zlib import decompress as gunzip
raw = open(sys.argv[1], "rb").read()
doc = msgspec.json.Decoder(Doc, float_hook=str).decode(gunzip(raw, 31) if raw[:2] == b"\\x1f\\x8b" else raw)
"""

# A warm run of an unchanged trace is answered from the kept report before the run is opened (report_cache's quick
# key): what it cannot do without is the interpreter, the command and the report's renderer.
IMPORTS = "import commprof.cli.analyze, commprof.report.analysis_text\n"
INGEST_IMPORTS = "import msgspec, numpy, polars\nimport commprof.cli\n"  # what `ingest` cannot do without


def wall(cmd: list[str], env: dict[str, str] | None = None) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    return time.perf_counter() - t0


def peak_rss_mb(cmd: list[str], env: dict[str, str]) -> float:
    """Peak RSS of the command's own process in MB of 10^6 bytes, as the JSON's (GNU time's %M, KiB: its wait4
    rusage, the parent being small)."""
    done = subprocess.run(["/usr/bin/time", "-f", "%M", *cmd], check=True, capture_output=True, text=True, env=env)
    return int(done.stderr.strip().splitlines()[-1]) * 1024 / 1e6


def row(work: str, now: float, unit: str, floor: float | None, floor_what: str, hta: float | None, target: str,
        passed: bool | None) -> dict[str, Any]:
    return {"work": work, "now": round(now, 4), "unit": unit, "floor": None if floor is None else round(floor, 4),
            "floor_what": floor_what, "hta": None if hta is None else round(hta, 4), "target": target,
            "passed": passed}


def analyze_rows(trace: Path, repeat: int, hta_python: Path | None) -> list[dict[str, Any]]:
    """Cold and warm whole-process ``analyze`` against HTA and the floor, interleaved."""
    py = sys.executable
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # a user's install has its .pyc files: compiling is not the work
    with tempfile.TemporaryDirectory(prefix="bench-kineto-") as scratch:  # writes them, pages the libraries in
        wall([py, "-m", "commprof", "analyze", str(trace)], {**env, "COMMPROF_CACHE_DIR": scratch})
    times: dict[str, list[float]] = {"cold": [], "warm": [], "floor": [], "imports": [], "hta": []}
    for i in range(repeat):
        with tempfile.TemporaryDirectory(prefix="bench-kineto-") as scratch:
            run_env = {**env, "COMMPROF_CACHE_DIR": scratch}
            cmd = [py, "-m", "commprof", "analyze", str(trace)]
            times["cold"].append(wall(cmd, run_env))
            times["warm"].append(wall(cmd, run_env))
        times["floor"].append(wall([py, "-c", FLOOR, str(trace)], env))
        times["imports"].append(wall([py, "-c", IMPORTS], env))
        if hta_python is not None:
            out = Path(tempfile.mkdtemp(prefix="bench-kineto-hta-"))
            times["hta"].append(wall([str(hta_python), str(REPO / "bench" / "child.py"), "hta",
                                      str(out / "hta.json"), str(trace)]))
            shutil.rmtree(out)
        print(f"  analyze run {i + 1}/{repeat}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in times.items() if v),
              flush=True)
    med = {k: statistics.median(v) if v else None for k, v in times.items()}
    hta = med["hta"]
    mb = f"{trace.stat().st_size / 1e6:.1f} MB gz"
    return [
        row(f"analyze 53.7 MB Kineto cold whole process ({mb})", med["cold"] or 0, "s", med["floor"],
            "imports + gunzip + msgspec decode", hta, ">= 8x HTA 0.5.0",
            None if hta is None else hta / (med["cold"] or 1) >= 8),
        row("same, warm (the kept report)", med["warm"] or 0, "s", med["imports"], "imports (the CLI, the renderer)",
            None, "<= 0.5 s", (med["warm"] or 0) <= 0.5),
    ]


def big_trace(mb: float) -> Path:
    """One rank's synthetic trace of about ``mb`` MB of JSON, generated once and kept."""
    folder = CACHE / f"synth-{mb:g}mb"
    trace = folder / "run" / "raw" / "traces" / "rank-0.json.gz"
    if (folder / ".complete").is_file():
        return trace
    from commprof.synth import SynthConfig, generate

    shutil.rmtree(folder, ignore_errors=True)
    print(f"generating a {mb:g} MB rank trace under {folder} (once) ...", flush=True)
    config = SynthConfig(nodes=1, gpus_per_node=2, sizes={"tp": 2}, steps=3,
                         kernels_per_phase=max(1, round(mb * KPP_PER_MB)), seed=1)
    generate(config, folder / "run", compresslevel=1)
    (folder / ".complete").touch()
    return trace


def json_mb(path: Path) -> float:
    with gzip.open(path, "rb") as fh:
        n = 0
        while block := fh.read(1 << 24):
            n += len(block)
    return n / 1e6


def cpu_s(work: Any) -> float:
    t0 = time.process_time()
    work()
    return time.process_time() - t0


def ingest_rows(traces: list[Path], repeat: int, profile: bool) -> list[dict[str, Any]]:
    """MB of JSON per CPU second: ``extract`` against gunzip + the bare typed decode, interleaved."""
    import msgspec

    from commprof.ingest.kineto.decode import Event
    from commprof.ingest.kineto.reader import extract

    try:
        from zlib_ng.zlib_ng import decompress as gunzip  # the inflater the ingest uses where installed
    except ImportError:
        from zlib import decompress as gunzip
    doc = msgspec.defstruct("Doc", [("traceEvents", list[Event], [])])
    decoder = msgspec.json.Decoder(doc, float_hook=str)
    out = []
    extract(traces[-1])  # the lazy imports and first-use costs, outside the measure
    for trace in traces:
        size = json_mb(trace)
        now, floor = [], []
        for _ in range(repeat):
            now.append(size / cpu_s(lambda t=trace: extract(t)))
            floor.append(size / cpu_s(lambda t=trace: decoder.decode(gunzip(t.read_bytes(), 31))))
        rate, floor_rate = statistics.median(now), statistics.median(floor)
        print(f"  ingest {trace.name} ({size:.1f} MB): {rate:.0f} MB/s, bare decode {floor_rate:.0f} MB/s", flush=True)
        out.append(row(f"Kineto ingest MB/s per core ({trace.name}, {size:.0f} MB)", rate, "MB/s", floor_rate,
                       "gunzip + msgspec decode to the minimal Event", None, ">= 150 MB/s per core", rate >= 150))
        if profile:
            import cProfile
            import pstats

            profiler = cProfile.Profile()
            profiler.runcall(extract, trace)
            pstats.Stats(profiler).sort_stats("tottime").print_stats(15)
    return out


def rss_row(mb: float) -> dict[str, Any]:
    trace = big_trace(mb)
    size = json_mb(trace)
    with tempfile.TemporaryDirectory(prefix="bench-kineto-rss-") as scratch:
        folder = Path(scratch) / "one"
        folder.mkdir()
        os.symlink(trace, folder / trace.name)
        env = {**os.environ, "PYTHONPATH": str(REPO), "COMMPROF_CACHE_DIR": str(Path(scratch) / "cache")}
        peak = peak_rss_mb([sys.executable, "-m", "commprof", "ingest", "--workers", "1", str(folder / trace.name)],
                           env)
        base = peak_rss_mb([sys.executable, "-c", INGEST_IMPORTS], env)
    print(f"  ingest of one {size:.0f} MB trace: peak RSS {peak:.0f} MB ({peak / size:.2f}x), imports alone "
          f"{base:.0f} MB", flush=True)
    return row(f"one {size:.0f} MB trace: peak RSS / JSON (ingest, whole process)", peak / size, "x",
               base / size, "the imports' RSS / JSON", None, "<= 0.5x", peak / size <= 0.5)


def kernel_heavy_rows(mb: float) -> list[dict[str, Any]]:
    """Peak RSS of ``commprof ingest --workers 1`` on the kernel-heavy trace, plain and gzipped, against its JSON."""
    import kernel_heavy

    folder = CACHE / f"kernel-heavy-{mb:g}mb"
    if not (folder / ".complete").is_file():
        print(f"generating a {mb:g} MB kernel-heavy trace under {folder} (once) ...", flush=True)
        kernel_heavy.write(mb, folder)
        (folder / ".complete").touch()
    size = (folder / "plain" / "rank-0.json").stat().st_size / 1e6
    rows = []
    for variant in ("plain", "gz"):
        with tempfile.TemporaryDirectory(prefix="bench-kineto-rss-") as scratch:
            env = {**os.environ, "PYTHONPATH": str(REPO), "COMMPROF_CACHE_DIR": scratch}
            peak = peak_rss_mb([sys.executable, "-m", "commprof", "ingest", "--workers", "1", str(folder / variant)],
                               env)
            base = peak_rss_mb([sys.executable, "-c", INGEST_IMPORTS], env)
        print(f"  ingest of the {size:.0f} MB kernel-heavy trace ({variant}): peak RSS {peak:.0f} MB "
              f"({peak / size:.2f}x), imports alone {base:.0f} MB", flush=True)
        rows.append(row(f"kernel-heavy {size:.0f} MB trace ({variant}): peak RSS / JSON (ingest, whole process)",
                        peak / size, "x", base / size, "the imports' RSS / JSON", None, "<= 0.5x", peak / size <= 0.5))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--skip-hta", action="store_true")
    parser.add_argument("--big-mb", type=float, default=20.0, help="size of the generated rank trace for MB/s")
    parser.add_argument("--rss-mb", type=float, default=500.0, help="size of the trace for peak RSS (0: skip)")
    parser.add_argument("--kernel-heavy-mb", type=float, default=300.0,
                        help="size of the kernel-heavy trace for peak RSS (0: skip)")
    parser.add_argument("--profile", action="store_true", help="cProfile of one extract per trace")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO))
    rows: list[dict[str, Any]] = []
    if REAL.is_file():
        hta_python = None if args.skip_hta else hta_venv.ensure(REPO / ".bench-venv")
        rows += analyze_rows(REAL, args.repeat, hta_python)
    traces = [big_trace(args.big_mb)] + ([REAL] if REAL.is_file() else [])
    rows += ingest_rows(traces, args.repeat, args.profile)
    if args.rss_mb:
        rows.append(rss_row(args.rss_mb))
    if args.kernel_heavy_mb:
        rows += kernel_heavy_rows(args.kernel_heavy_mb)
    OUT_JSON.parent.mkdir(exist_ok=True)
    OUT_JSON.write_text(json.dumps({"rows": rows}, indent=1))
    print(f"rows written to {OUT_JSON.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
