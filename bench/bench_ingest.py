"""`make bench`: commprof's ingest and overlap analysis against HTA 0.5.0 on the same trace files.

Each tool runs in its own fresh interpreter (bench/child.py), N times, interleaved (HTA, commprof,
floor, HTA, ...) so that all three share the machine's noise; the report gives medians and the ratios
against the targets. Imports are timed apart and left out of the ratios. The figures go to
.bench/ingest.json. The exit status is 0 even when a target fails: this is a report, not a test.

    python bench/bench_ingest.py [--repeat N] [--trace PATH | --all] [--profile]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import hta_venv
from report import check_targets, print_report

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
HTA_SETS = SHARED / "real_traces" / "hta"
DEFAULT_TRACE = HTA_SETS / "df_index_resolver" / "df_index_resolver.json.gz"
CHILD = Path(__file__).resolve().parent / "child.py"
OUT_JSON = REPO / ".bench" / "ingest.json"
TOOLS = ("hta", "commprof", "floor")
CHILD_TIMEOUT_S = 900


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per tool (default 3); medians reported")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--trace", type=Path, help="one trace file, or a folder of one run's rank files")
    which.add_argument("--all", action="store_true", help="every set in ../shared/real_traces/hta")
    parser.add_argument("--profile", action="store_true",
                        help="also print a cProfile (top 15, cumulative) of commprof's first ingest")
    parser.add_argument("--skip-hta", action="store_true", help="measure commprof and the floor only")
    return parser.parse_args(argv)


def _is_trace(path: Path) -> bool:
    return path.is_file() and path.name.endswith((".json", ".json.gz"))


def trace_sets(args: argparse.Namespace) -> list[tuple[str, list[Path]]]:
    """(name, rank files) per set to measure. A set's rank files are read together by both tools."""
    if args.all:
        return [(d.name, sorted(f for f in d.iterdir() if _is_trace(f)))
                for d in sorted(HTA_SETS.iterdir()) if d.is_dir() and any(_is_trace(f) for f in d.iterdir())]
    path = (args.trace or DEFAULT_TRACE).resolve()
    if path.is_dir():
        return [(path.name, sorted(f for f in path.iterdir() if _is_trace(f)))]
    return [(path.name.split(".")[0], [path])]


def run_child(python: Path, tool: str, files: list[Path], scratch: Path) -> dict[str, Any]:
    """One measured run in a fresh interpreter; {"error": ...} if it fails."""
    out = scratch / f"{tool}-{os.urandom(4).hex()}.json"
    cmd = [str(python), str(CHILD), tool, str(out), *map(str, files)]
    env = dict(os.environ)
    if tool != "hta":
        # the checkout's own commprof, even where the editable install predates commprof/__init__.py
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S, cwd=scratch,
                              env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {CHILD_TIMEOUT_S} s"}
    if done.returncode or not out.is_file():
        tail = "\n".join(done.stderr.strip().splitlines()[-8:])
        return {"error": f"exit status {done.returncode}:\n{tail}"}
    result: dict[str, Any] = json.loads(out.read_text())
    out.unlink()
    return result


def median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median of every numeric field over the successful runs; other fields from the first run."""
    ok = [r for r in runs if "error" not in r]
    if not ok:
        return {"error": runs[0]["error"] if runs else "not run"}
    out: dict[str, Any] = {}
    for key, value in ok[0].items():
        numeric = isinstance(value, int | float) and not isinstance(value, bool)
        out[key] = statistics.median(r[key] for r in ok) if numeric else value
    out["runs_ok"] = len(ok)
    return out


def measure(name: str, files: list[Path], pythons: dict[str, Path], repeat: int) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {tool: [] for tool in pythons}
    with tempfile.TemporaryDirectory(prefix="commprof-bench-") as scratch:
        for i in range(repeat):
            for tool, python in pythons.items():
                print(f"  {name}: run {i + 1}/{repeat} {tool} ...", end="", flush=True)
                result = run_child(python, tool, files, Path(scratch))
                runs[tool].append(result)
                print(" failed" if "error" in result else f" {result['total_s']:.3f} s", flush=True)
                if "error" in result:
                    print(result["error"], file=sys.stderr)
    medians = {tool: median_of(r) for tool, r in runs.items()}
    return {
        "files": [str(f) for f in files],
        "compressed_mb": sum(f.stat().st_size for f in files) / 1e6,
        "medians": medians,
        "checks": check_targets(medians),
        "runs": runs,
    }


def profile_commprof(python: Path, files: list[Path]) -> None:
    with tempfile.TemporaryDirectory(prefix="commprof-bench-") as scratch:
        result = run_child(python, "commprof-profile", files, Path(scratch))
    if "error" in result:
        print(f"profile failed: {result['error']}", file=sys.stderr)
        return
    print(f"\ncProfile of commprof's first ingest (open_run + analyze, {result['profile_wall_s']:.3f} s "
          "under the profiler), top 15 by cumulative time:")
    print(result["profile"])


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not HTA_SETS.is_dir() and not args.trace:
        print(f"bench skipped: {HTA_SETS} is absent (the real traces live in ../shared beside the repo; "
              "pass --trace PATH to measure another file)")
        return 0
    sets = trace_sets(args)
    missing = [str(f) for _, files in sets for f in files if not f.is_file()] + [n for n, f in sets if not f]
    if missing:
        print(f"bench skipped: no trace file at {', '.join(missing)}")
        return 0
    pythons = {"hta": None, "commprof": Path(sys.executable), "floor": Path(sys.executable)}
    if not args.skip_hta:
        pythons["hta"] = hta_venv.ensure(REPO / ".bench-venv")
    if pythons["hta"] is None:
        print("HTA is not measured: the HTA ratios read n/a", file=sys.stderr)
        del pythons["hta"]
    report: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "platform": platform.platform()},
        "repeat": args.repeat,
        "sets": {},
    }
    for name, files in sets:
        report["sets"][name] = measure(name, files, {t: p for t, p in pythons.items() if p}, args.repeat)
    for name, result in report["sets"].items():
        print_report(name, result, args.repeat)
    OUT_JSON.parent.mkdir(exist_ok=True)
    OUT_JSON.write_text(json.dumps(report, indent=1))
    print(f"\nfigures written to {OUT_JSON.relative_to(REPO)}")
    if args.profile:
        profile_commprof(Path(sys.executable), sets[0][1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
