"""Generate, ingest and analyze a big synthetic run; compare with HTA's parse of the same files.

    python bench/bench_synth.py                         # 64 ranks (8 nodes x 8), ~50 MB of trace per rank
    python bench/bench_synth.py --mb-per-rank 5 --hta-ranks 2

Steps: (1) ``commprof synth`` writes the run (the trace size is reached with more kernels per compute
phase); (2) commprof ingests and analyzes the whole run directory in a fresh interpreter (wall time and
peak RSS); (3) on a subset of ranks, HTA 0.5.0 (in .bench-venv, as bench_ingest.py sets it up) and
commprof each parse the same trace files through bench/child.py, and the ratio is printed.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_ingest  # noqa: E402
import hta_venv  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
ANALYZE = """
import json, resource, sys, time
t0 = time.perf_counter()
import commprof
t1 = time.perf_counter()
report = commprof.analyze_run(sys.argv[1])
t2 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "analyze_s": t2 - t1, "ranks": len(report["ranks"]),
                  "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "children_maxrss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))
"""


def _rank0_mb(path: Path) -> float:
    return len(gzip.decompress((path / "raw" / "traces" / "rank-0.json.gz").read_bytes())) / 1e6


def generate(out: Path, nodes: int, mb: float, steps: int) -> dict[str, float]:
    from commprof.synth import SynthConfig, generate

    def cfg(kpp: int, n_steps: int) -> SynthConfig:
        return SynthConfig(nodes=nodes, gpus_per_node=8, sizes={"tp": 8, "dp": nodes // 2, "pp": 2}, steps=n_steps,
                           kernels_per_phase=kpp, straggler=3, seed=1)

    probe = Path(tempfile.mkdtemp(prefix="bench-synth-probe-"))
    try:  # size per rank grows linearly with kernels per phase: two probes give the line
        generate(cfg(1, 1), probe / "a", compresslevel=1)
        generate(cfg(3, 1), probe / "b", compresslevel=1)
        a, b = _rank0_mb(probe / "a"), _rank0_mb(probe / "b")
    finally:
        shutil.rmtree(probe)
    per_step_per_kpp = (b - a) / 2
    kpp = max(1, round((mb / steps - (a - per_step_per_kpp)) / per_step_per_kpp))
    t0 = time.perf_counter()
    generate(cfg(kpp, steps), out, compresslevel=1)
    return {"generate_s": time.perf_counter() - t0, "kernels_per_phase": kpp, "rank0_mb": _rank0_mb(out)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=8, help="hosts of 8 GPUs (64 ranks with 8)")
    parser.add_argument("--mb-per-rank", type=float, default=50.0, help="uncompressed trace MB per rank")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--hta-ranks", type=int, default=2, help="ranks HTA parses (0: skip HTA)")
    parser.add_argument("--keep", type=Path, help="write the run here and keep it")
    parser.add_argument("--reuse", action="store_true",
                        help="with --keep: measure the run already there instead of generating it again")
    args = parser.parse_args()
    out = args.keep or Path(tempfile.mkdtemp(prefix="bench-synth-")) / "run"
    try:
        if args.reuse and (out / "manifest.json").is_file():
            shutil.rmtree(out / "tables", ignore_errors=True)  # a cold ingest, as after generating
            print(f"reusing {out}: {_rank0_mb(out):.1f} MB per rank (rank 0)")
        else:
            made = generate(out, args.nodes, args.mb_per_rank, args.steps)
            print(f"generated {args.nodes * 8} ranks, {made['rank0_mb']:.1f} MB per rank "
                  f"(kernels per phase {made['kernels_per_phase']}) in {made['generate_s']:.1f} s")
        t0 = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", ANALYZE, str(out)], capture_output=True, text=True,
                              check=True, cwd=REPO)
        wall = time.perf_counter() - t0
        full = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"commprof ingest + analyze, whole run: {full['analyze_s']:.1f} s (process {wall:.1f} s), "
              f"peak RSS {full['maxrss_mb']:.0f} MB (workers {full['children_maxrss_mb']:.0f} MB)")
        if args.hta_ranks:
            _versus_hta(out, args.hta_ranks)
    finally:
        if args.keep is None:
            shutil.rmtree(out.parent, ignore_errors=True)
    return 0


def _versus_hta(out: Path, n: int) -> None:
    python = hta_venv.ensure(REPO / ".bench-venv")
    if python is None:
        print("HTA: .bench-venv could not be set up; ratio skipped")
        return
    files = [out / "raw" / "traces" / f"rank-{r}.json.gz" for r in range(n)]
    with tempfile.TemporaryDirectory() as scratch:
        hta = bench_ingest.run_child(python, "hta", files, Path(scratch))
        ours = bench_ingest.run_child(Path(sys.executable), "commprof", files, Path(scratch))
    if "error" in hta or "error" in ours:
        print(f"subset of {n} ranks: HTA {hta.get('error', 'ok')}; commprof {ours.get('error', 'ok')}")
        return
    rss = {k: r["maxrss_self_kb"] / 1024 for k, r in (("hta", hta), ("commprof", ours))}
    print(f"subset of {n} ranks: HTA parse {hta['parse_s']:.2f} s / {rss['hta']:.0f} MB; commprof ingest + "
          f"analyze {ours['total_s']:.2f} s / {rss['commprof']:.0f} MB; HTA / commprof time "
          f"{hta['parse_s'] / ours['total_s']:.1f}x, RSS {rss['hta'] / rss['commprof']:.1f}x")


if __name__ == "__main__":
    sys.exit(main())
