"""Two versions of commprof on the same inputs, in the same script: is the change slower?

    python bench/bench_versions.py --base REV [--head REV] [--repeat N] [--synth-ranks 64] [--trace PATH]

Each revision is checked out with ``git worktree`` into a temporary folder and laid out as an importable
package (analyzers/ and dashboard/ copied under commprof/, as the wheel installs them). Each measured run
is a fresh interpreter that opens the input with an empty cache, analyzes it and builds the JSON report
(what ``commprof analyze --format json`` does end to end); runs alternate base, head, base, ... so both
share the machine's noise. CPU time (the process and its pool workers, imports excluded) is reported
beside wall time: on a shared machine it moves less with the others' load. Every module of
``commprof.analyzers`` is imported before the clock starts (the analysis imports them lazily; the two
versions have different modules), so import time stays out of the figures. Medians and the head/base
ratio are printed and written to .bench/versions.json.
Inputs: the 53.7 MB real trace (../shared/real_traces/hta/df_index_resolver) and a synthetic run made by
the head's ``commprof synth`` (64 ranks by default), generated once.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = REPO.parent / "shared" / "real_traces" / "hta" / "df_index_resolver" / "df_index_resolver.json.gz"
OUT_JSON = REPO / ".bench" / "versions.json"

# One measured run; only the standard library at the top so the import cost is timed apart.
CHILD = r"""
import json, resource, shutil, sys, tempfile, time
t0 = time.perf_counter()
import commprof, commprof.run
from commprof.report import analysis_json
import importlib, pkgutil, commprof.analyzers
for _m in pkgutil.iter_modules(commprof.analyzers.__path__, "commprof.analyzers."):  # imported lazily by
    try:  # the analysis: import time is excluded from every figure, as above
        importlib.import_module(_m.name)
    except ImportError:
        pass
imported = time.perf_counter()
_u = resource.getrusage(resource.RUSAGE_SELF)
cpu_at_import = _u.ru_utime + _u.ru_stime
path = sys.argv[1]
cache = tempfile.mkdtemp(prefix="bench-versions-")
run = commprof.open_run(path, cache_dir=cache)
t1 = time.perf_counter()
if hasattr(commprof, "analyze"):
    analysis = commprof.analyze(run)
    t2 = time.perf_counter()
    report = analysis_json.build(analysis)
else:  # before the single analysis: Run.analyze() and a report built from the run
    analysis = run.analyze()
    t2 = time.perf_counter()
    report = analysis_json.build(run, analysis)
t3 = time.perf_counter()
shutil.rmtree(cache, ignore_errors=True)
me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
cpu = me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime
with open("/proc/self/status") as fh:  # this image's own peak (ru_maxrss keeps the parent's RSS at fork)
    peak_mb = next(int(line.split()[1]) for line in fh if line.startswith("VmHWM:")) / 1024
print(json.dumps({"import_s": imported - t0, "ingest_s": t1 - imported, "analyze_s": t2 - t1,
                  "report_s": t3 - t2, "total_s": t3 - imported, "cpu_s": cpu - cpu_at_import,
                  "maxrss_mb": peak_mb, "ranks": len(report.get("ranks", []))}))
"""


def layout(rev: str, scratch: Path) -> Path:
    """An importable tree of ``rev``: commprof/ with analyzers/ and dashboard/ inside it."""
    src = scratch / f"src-{rev[:12]}"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-f", str(src), rev],
                   check=True, capture_output=True)
    pkg = scratch / f"pkg-{rev[:12]}"
    shutil.copytree(src / "commprof", pkg / "commprof")
    for sub in ("analyzers", "dashboard"):
        shutil.copytree(src / sub, pkg / "commprof" / sub)
    subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(src)], check=True)
    return pkg


def measure(pkg: Path, target: Path) -> dict[str, Any]:
    env = {"PYTHONPATH": str(pkg), "PATH": "/usr/bin:/bin", "HOME": tempfile.gettempdir()}
    done = subprocess.run([sys.executable, "-c", CHILD, str(target)], capture_output=True, text=True,
                          env=env, cwd=tempfile.gettempdir(), timeout=1800)
    if done.returncode:
        return {"error": done.stderr.strip().splitlines()[-1:]}
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def synth_run(pkg: Path, ranks: int, scratch: Path) -> Path:
    out = scratch / f"synth-{ranks}"
    nodes = max(1, ranks // 8)
    cmd = [sys.executable, "-m", "commprof", "synth", str(out), "--nodes", str(nodes), "--gpus-per-node", "8",
           "--layout", f"tp=8,dp={nodes}", "--steps", "4", "--straggler", "5", "--seed", "1"]
    subprocess.run(cmd, check=True, capture_output=True, env={"PYTHONPATH": str(pkg), "PATH": "/usr/bin:/bin"})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the revision before the change")
    parser.add_argument("--head", default="HEAD")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--synth-ranks", type=int, default=64, help="0: skip the synthetic run")
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    args = parser.parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="bench-versions-"))
    try:
        pkgs = {"base": layout(args.base, scratch), "head": layout(args.head, scratch)}
        targets = {}
        if args.trace.exists():
            targets[args.trace.name] = args.trace
        else:
            print(f"skipping the real trace: {args.trace} not found (../shared absent)")
        if args.synth_ranks:
            targets[f"synth-{args.synth_ranks}-ranks"] = synth_run(pkgs["head"], args.synth_ranks, scratch)
        results: dict[str, dict[str, list[dict[str, Any]]]] = {t: {"base": [], "head": []} for t in targets}
        for i in range(args.repeat):
            for name, target in targets.items():
                for which in (("base", "head") if i % 2 == 0 else ("head", "base")):
                    results[name][which].append(measure(pkgs[which], target))
        summary = {}
        for name, by in results.items():
            row: dict[str, Any] = {}
            for which, runs in by.items():
                ok = [r for r in runs if "error" not in r]
                if not ok:
                    row[which] = {"error": runs[0].get("error")}
                    continue
                row[which] = {k: statistics.median(r[k] for r in ok)
                              for k in ("ingest_s", "analyze_s", "report_s", "total_s", "cpu_s", "maxrss_mb")}
            if "total_s" in row.get("base", {}) and "total_s" in row.get("head", {}):
                row["head_over_base_total"] = row["head"]["total_s"] / row["base"]["total_s"]
                row["head_over_base_cpu"] = row["head"]["cpu_s"] / row["base"]["cpu_s"]
                row["head_over_base_rss"] = row["head"]["maxrss_mb"] / row["base"]["maxrss_mb"]
            summary[name] = row
            print(f"\n{name}  (median of {args.repeat}, base {args.base} vs head {args.head})")
            for which in ("base", "head"):
                r = row[which]
                print(f"  {which}: " + ("  ".join(f"{k} {v:.3f}" for k, v in r.items()) if "error" not in r
                                        else f"error {r['error']}"))
            if "head_over_base_total" in row:
                print(f"  head/base: wall {row['head_over_base_total']:.3f}  CPU {row['head_over_base_cpu']:.3f}  "
                      f"peak RSS {row['head_over_base_rss']:.3f}")
        OUT_JSON.parent.mkdir(exist_ok=True)
        OUT_JSON.write_text(json.dumps({"base": args.base, "head": args.head, "results": summary}, indent=1))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
