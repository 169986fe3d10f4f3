"""The rare-NCCL half of ``bench/bench_nccl.py`` (issue 24): an application log with NCCL lines only at its
two ends, parsed alone and read by ``commprof topology`` and ``commprof analyze`` as whole processes, against
a bare line pass and a bare marker scan of the same bytes. Also the row helpers both halves share."""

from __future__ import annotations

import json
import mmap
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "sample_traces" / "synth_2x8_tp8_dp2"


def app_log(out: Path, nccl: Path, size_mb: float) -> int:
    """Training output of about ``size_mb`` MB between the two halves of the NCCL log ``nccl``."""
    rnd = random.Random(24)
    lines = []
    for i in range(20_000):
        r = rnd.random()
        if r < 0.6:
            lines.append(f"[rank{i % 8}]:2026-12-04 02:{i % 60:02d}:11,{i % 1000:03d} INFO train.py:{i % 500} step {i} "
                         f"loss {rnd.random():.4f} lr 3.0e-4 tokens/s {rnd.randint(1000, 99999)}\n")
        elif r < 0.75:
            lines.append(f'  File "/opt/conda/lib/python3.11/site-packages/torch/nn/modules/module.py", '
                         f"line {i % 2000}, in _call_impl\n")
        elif r < 0.8:
            lines.append("\n")
        elif r < 0.82:
            lines.append("   \r\n")
        else:
            lines.append(f"pod-{i % 16}.worker | Epoch {i // 1000}: {rnd.random() * 100:.1f}%|████▌     | "
                         f"{i}/20000 [00:{i % 60:02d}<01:00, 3.2it/s]\n")
    body = "".join(lines).encode()
    head = nccl.read_bytes().splitlines(keepends=True)
    written = 0
    with out.open("wb") as f:
        f.writelines(head[: len(head) // 2])
        while written < size_mb * 1e6:
            f.write(body)
            written += len(body)
        f.writelines(head[len(head) // 2 :])
    return out.stat().st_size


def line_pass_s(paths: list[Path]) -> float:
    """Floor: every line through Python's text decoder, nothing done with it."""
    t0 = time.perf_counter()
    for path in paths:
        with open(path, encoding="utf-8", errors="replace") as f:
            for _ in f:
                pass
    return time.perf_counter() - t0


def marker_scan_s(path: Path) -> float:
    """Floor: one search of the mapped bytes for the marker."""
    t0 = time.perf_counter()
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as view:
        view.find(b"\0NCCL \0")  # touches every byte, finds nothing
    return time.perf_counter() - t0


def whole_process_s(checkout: Path, args: list[str]) -> tuple[float, float]:
    """Wall and CPU (user + sys, all its threads) seconds of one ``commprof`` process."""
    with tempfile.TemporaryDirectory(prefix="bench-nccl-cache-") as cache:
        env = {**os.environ, "PYTHONPATH": str(checkout), "PYTHONDONTWRITEBYTECODE": "1", "COMMPROF_CACHE_DIR": cache}
        t0, r0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([sys.executable, "-m", "commprof", *args, "--format", "json", "-o", str(Path(cache) / "o.json")],
                       check=True, capture_output=True, env=env, cwd=checkout)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        return time.perf_counter() - t0, r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime


def row(work: str, now: float, floor: float | None, floor_what: str, target: str, base: float | None = None,
        limit: float | None = None) -> dict[str, Any]:
    """A ``.bench`` row in MB/s; ``limit`` is the target's number (``>= limit``), when it has one."""
    at_least = limit if limit is not None else float(target.split()[1]) if target.startswith(">=") else None
    out = {"work": work, "now": round(now, 1), "unit": "MB/s", "floor": None if floor is None else round(floor, 1),
           "floor_what": floor_what, "hta": None, "target": target,
           "passed": None if at_least is None else now >= at_least}
    if base is not None:
        out["base"] = round(base, 1)
    return out


def write_rows(out: Path, rows: list[dict[str, Any]]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"rows": rows}, indent=2) + "\n")
    for r in rows:
        base = f" (base {r['base']})" if "base" in r else ""
        print(f"{r['work']}: {r['now']} {r['unit']}{base}; floor {r['floor']} ({r['floor_what']}); "
              f"target {r['target']}: {'pass' if r['passed'] else 'FAIL' if r['passed'] is False else '-'}")
    print(f"rows: {out}")


def bench_rare(tmp: Path, size_mb: float, checkouts: dict[str, Path], repeat: int,
               run_child: Callable[[Path, Path], dict[str, Any]]) -> list[dict[str, Any]]:
    run = tmp / "run"
    shutil.copytree(SAMPLE, run)
    nccl_log = sorted((run / "raw" / "nccl").iterdir())[0]
    size = app_log(run / "raw" / "nccl" / "job.out", nccl_log, size_mb)
    alone = tmp / "alone"
    alone.mkdir()
    os.link(run / "raw" / "nccl" / "job.out", alone / "job.out")
    print(f"application log: {size / 1e6:.0f} MB, NCCL lines at both ends")
    times: dict[str, dict[str, list[float]]] = {n: {"parse": [], "topology": [], "analyze": []} for n in checkouts}
    cpu: dict[str, dict[str, list[float]]] = {n: {"parse": [], "topology": [], "analyze": []} for n in checkouts}
    floors: dict[str, list[float]] = {"lines": [], "scan": []}
    for _ in range(repeat):
        floors["lines"].append(line_pass_s([alone / "job.out"]))
        floors["scan"].append(marker_scan_s(alone / "job.out"))
        for name in sorted(checkouts):
            child = run_child(checkouts[name], alone)
            times[name]["parse"].append(child["parse_s"])
            cpu[name]["parse"].append(child["parse_cpu_s"])
            for tool in ("topology", "analyze"):
                wall, used = whole_process_s(checkouts[name], [tool, str(run)])
                times[name][tool].append(wall)
                cpu[name][tool].append(used)
    mb = size / 1e6
    rate = {n: {k: mb / statistics.median(v) for k, v in t.items()} for n, t in times.items()}
    line_floor, scan_floor = (mb / statistics.median(v) for v in floors.values())
    cpu_rate = {n: {k: mb / statistics.median(v) for k, v in t.items()} for n, t in cpu.items()}
    for name, r in rate.items():
        c = cpu_rate[name]
        print(f"{name:>4}: parse {mb / r['parse']:.2f} s, topology {mb / r['topology']:.2f} s, "
              f"analyze {mb / r['analyze']:.2f} s (whole processes, cold cache); CPU: parse {mb / c['parse']:.2f} s, "
              f"topology {mb / c['topology']:.2f} s, analyze {mb / c['analyze']:.2f} s "
              f"= {c['parse']:.0f} / {c['topology']:.0f} / {c['analyze']:.0f} MB per CPU-second")
    if "base" in cpu_rate:
        print("new / base speed, CPU (steadier on a shared machine): " + ", ".join(
            f"{k} {cpu_rate['new'][k] / cpu_rate['base'][k]:.2f}" for k in ("parse", "topology", "analyze")))
    print(f"floors: line pass {line_floor:.0f} MB/s, marker scan {scan_floor:.0f} MB/s")
    base = rate.get("base", {})
    label = f"{mb:.0f} MB application log, NCCL lines at both ends"
    return [
        row(f"{label}: parse", rate["new"]["parse"], line_floor, "bare Python line pass", ">= 300 MB/s",
            base.get("parse")),
        row(f"{label}: commprof analyze, whole process", rate["new"]["analyze"], line_floor, "bare Python line pass",
            ">= 300 MB/s", base.get("analyze")),
        row(f"{label}: commprof topology, whole process", rate["new"]["topology"], line_floor,
            "bare Python line pass", ">= 300 MB/s", base.get("topology")),
        row(f"{label}: bare scan for 'NCCL '", scan_floor, None, "(a floor)", "-"),
    ]
