"""Hang reports at 16,384 ranks (issue 39, item 3): `commprof analyze DUMPS` on Flight Recorder dumps of a job
with one stuck data-parallel group, cold (an empty table cache). `make bench-scale` runs it (``--no-fr`` skips).

    python bench/fr_scale.py [--tp 8] [--dp 2048] [--entries 256] [--out /scratch/fr16k]

1. The dumps are written once by ``commprof.synth.fr_hang`` (one pickle per rank as torch writes them, the
   default group's 16,384 members listed in each: ~2.3 GB, ~15 s on 2 cores) into OUT/dumps, their answer
   into OUT/truth.json, and kept for the next run (OUT/.complete names the configuration they were made with).
2. `commprof analyze OUT/dumps` (the text report a user reads first) in a fresh interpreter with
   COMMPROF_CACHE_DIR empty: wall time around the process, its CPU time and peak RSS (VmHWM), and whether the
   report names the stuck group (its "first to stall" line) and the ranks behind it ("look first at rank(s)").

Target: the stuck group named in <= TARGET_S. The machine is shared: read the CPU time beside the wall time.
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
from dataclasses import asdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TARGET_S = 60.0
DEFAULT_OUT = Path("/scratch/fr16k") if Path("/scratch").is_dir() else Path(tempfile.gettempdir()) / "fr16k"

# the CLI run in this interpreter, its CPU time and high-water RSS (VmHWM: this process image's own; see
# bench_scale.py on why not ru_maxrss) written to argv[1] by an exit handler (the CLI ends with os._exit after
# running them: commprof.cli.run)
CHILD = """
import atexit, json, resource, runpy, sys
out = sys.argv[1]
sys.argv = ["commprof", *sys.argv[2:]]

def figures():
    me = resource.getrusage(resource.RUSAGE_SELF)
    with open("/proc/self/status") as fh:
        hwm = next(int(line.split()[1]) / 1024 for line in fh if line.startswith("VmHWM:"))
    with open(out, "w") as fh:
        json.dump({"cpu_s": me.ru_utime + me.ru_stime, "user_s": me.ru_utime, "sys_s": me.ru_stime,
                   "peak_rss_mb": hwm}, fh)

atexit.register(figures)
runpy.run_module("commprof", run_name="__main__", alter_sys=True)
"""


def ensure_dumps(out: Path, tp: int, dp: int, entries: int) -> tuple[Path, dict[str, Any]]:
    """OUT/dumps for this configuration (written when missing or made with another) and its truth."""
    from commprof.synth.fr_hang import HangDumps, write_dumps

    cfg = HangDumps(tp=tp, dp=dp, entries=entries)
    done = out / ".complete"
    if done.is_file() and json.loads(done.read_text()).get("config") == asdict(cfg):
        return out / "dumps", json.loads((out / "truth.json").read_text())
    shutil.rmtree(out / "dumps", ignore_errors=True)
    done.unlink(missing_ok=True)
    t0 = time.perf_counter()
    truth = write_dumps(cfg, out / "dumps")
    truth["generate_s"] = time.perf_counter() - t0
    (out / "truth.json").write_text(json.dumps(truth, indent=1))
    done.write_text(json.dumps({"config": asdict(cfg)}))
    return out / "dumps", truth


def measure(dumps: Path, truth: dict[str, Any]) -> dict[str, Any]:
    """One cold `commprof analyze DUMPS`: times, peak RSS, and what its report names."""
    with tempfile.TemporaryDirectory(prefix="fr-scale-") as tmp:
        figures = Path(tmp) / "figures.json"
        env = {**os.environ, "COMMPROF_CACHE_DIR": str(Path(tmp) / "cache"), "COLUMNS": "160"}
        t0 = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", CHILD, str(figures), "analyze", str(dumps)], cwd=REPO,
                              env=env, capture_output=True, text=True, timeout=1800)
        wall = time.perf_counter() - t0
        result: dict[str, Any] = json.loads(figures.read_text()) if figures.is_file() else {}
    result["exit"] = done.returncode
    text = done.stdout
    stuck = f"first to stall: group {truth['stuck_pg']} ({truth['stuck_desc']}, {truth['config']['dp']} ranks)"
    lagging = f"look first at rank(s) {','.join(map(str, truth['lagging']))}:"
    result.update(ranks=truth["world"], wall_s=wall, command=f"commprof analyze {dumps}",
                  names_stuck_group=stuck in text, names_lagging_ranks=lagging in text,
                  report_lines=len(text.splitlines()), longest_line=max(map(len, text.splitlines()), default=0),
                  error=done.stderr.strip().splitlines()[-1:] if done.returncode else None)
    result["ok"] = bool(result["names_stuck_group"] and result["names_lagging_ranks"] and wall <= TARGET_S)
    return result


def report(r: dict[str, Any]) -> str:
    named = "names the stuck group and the ranks behind it" if r["names_stuck_group"] and r["names_lagging_ranks"] \
        else f"does NOT name them (group {r['names_stuck_group']}, ranks {r['names_lagging_ranks']}; {r['error']})"
    return (f"hang report of {r['ranks']:,} Flight Recorder dumps: {r['wall_s']:.1f} s wall "
            f"(target <= {TARGET_S:g} s), "
            f"CPU {r.get('cpu_s', 0):.1f} s (user {r.get('user_s', 0):.1f}, sys {r.get('sys_s', 0):.1f}), peak RSS "
            f"{r.get('peak_rss_mb', 0):.0f} MB; the report ({r['report_lines']} lines) {named}")


def run(out: Path, tp: int = 8, dp: int = 2048, entries: int = 256) -> dict[str, Any]:
    dumps, truth = ensure_dumps(out, tp, dp, entries)
    r = measure(dumps, truth)
    r["generate_s"] = truth.get("generate_s")
    r["load"] = os.getloadavg()
    print(report(r), flush=True)
    return r


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tp", type=int, default=8)
    parser.add_argument("--dp", type=int, default=2048)
    parser.add_argument("--entries", type=int, default=256, help="entries per dump (the ring buffer)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where the dumps are kept")
    args = parser.parse_args()
    r = run(args.out, args.tp, args.dp, args.entries)
    print(json.dumps(r, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
