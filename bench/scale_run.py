"""The big synthetic run of ``make bench-scale``, generated once and cached.

256 ranks (32 hosts x 8 GPUs, tp=8, pp=2, dp=16) with >= 20 MB of Kineto JSON per rank is ~5 GB of
text: ``commprof synth`` writes it at a few MB/s per core, so the run is kept under a cache folder
(``--cache``, default ``$COMMPROF_BENCH_CACHE`` or /tmp/commprof-bench-scale) keyed by its settings and
reused while its ``.complete`` marker is there. Every rank is a real file of its own: its own rank,
groups, jitter and clock, exactly what ``commprof synth`` writes.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

DEFAULT_CACHE = Path(os.environ.get("COMMPROF_BENCH_CACHE") or "/tmp/commprof-bench-scale")
GPUS_PER_NODE = 8


def _config(nodes: int, kernels_per_phase: int, steps: int) -> Any:
    from commprof.synth import SynthConfig

    return SynthConfig(nodes=nodes, gpus_per_node=GPUS_PER_NODE, sizes={"tp": 8, "dp": nodes // 2, "pp": 2},
                       steps=steps, kernels_per_phase=kernels_per_phase, straggler=3, seed=1)


def trace_mb(path: Path) -> float:
    """Uncompressed size of one trace, in MB (1e6 bytes)."""
    with gzip.open(path, "rb") as fh:
        n = 0
        while block := fh.read(1 << 24):
            n += len(block)
    return n / 1e6


def _kernels_per_phase(mb: float, steps: int) -> int:
    """Size per rank grows linearly with kernels per phase: two small probes give the line."""
    from commprof.synth import generate

    probe = Path(tempfile.mkdtemp(prefix="bench-scale-probe-"))
    try:
        sizes = []
        for kpp in (1, 5):
            generate(_config(2, kpp, steps), probe / str(kpp), compresslevel=1)
            sizes.append(trace_mb(probe / str(kpp) / "raw" / "traces" / "rank-0.json.gz"))
    finally:
        shutil.rmtree(probe)
    per_kpp = (sizes[1] - sizes[0]) / 4
    return max(1, int((mb - sizes[0]) / per_kpp) + 2)


def ensure(ranks: int, mb_per_rank: float, steps: int, cache: Path, jobs: int) -> tuple[Path, dict[str, Any]]:
    """The run directory (made when missing) and what it is: ranks, MB per rank, generation time."""
    nodes = ranks // GPUS_PER_NODE
    folder = cache / f"synth-{ranks}r-{mb_per_rank:g}mb-{steps}s"
    marker = folder / ".complete"
    if marker.is_file():
        return folder / "run", json.loads(marker.read_text())
    from commprof.synth import generate

    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    kpp = _kernels_per_phase(mb_per_rank, steps)
    print(f"generating {ranks} ranks x ~{mb_per_rank:g} MB under {folder} (kernels per phase {kpp}, "
          f"{jobs} processes; cached for later runs) ...", flush=True)
    t0 = time.perf_counter()
    generate(_config(nodes, kpp, steps), folder / "run", compresslevel=1, jobs=jobs)
    info = {"ranks": ranks, "kernels_per_phase": kpp, "generate_s": round(time.perf_counter() - t0, 1),
            "generate_jobs": jobs}
    marker.write_text(json.dumps(info))
    return folder / "run", info


if __name__ == "__main__":  # generate (or find) the default run: python bench/scale_run.py
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    run, made = ensure(256, 20.0, 3, DEFAULT_CACHE, os.cpu_count() or 1)
    print(run, made)
