"""One measured run of one tool, in a fresh interpreter: ``python bench/child.py TOOL OUT_JSON FILE...``.

Run by bench_ingest.py, once per tool and repeat, so that each run's peak RSS is its own. Only the
standard library is imported at the top: the HTA run uses .bench-venv's python, where commprof is not
installed. Each tool's imports are timed apart from its work (``import_s``) and left out of the ratios.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

START = time.perf_counter()


def _own_peak_kb(fallback: int) -> int:
    """This process image's peak RSS (VmHWM). getrusage's ru_maxrss also holds the parent's RSS at the
    fork that started this process (Linux carries it across exec): a big bench script would floor both
    tools' figures."""
    try:
        with open("/proc/self/status") as fh:
            return next(int(line.split()[1]) for line in fh if line.startswith("VmHWM:"))
    except (OSError, StopIteration, ValueError):
        return fallback


def _usage() -> dict[str, Any]:
    """Peak RSS and CPU time of this process and of its waited-for children (pool workers)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "maxrss_self_kb": _own_peak_kb(own.ru_maxrss),
        "maxrss_children_kb": kids.ru_maxrss,
        "cpu_s": own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime,
    }


def _imported() -> dict[str, Any]:
    """Called once the tool's modules are imported: the import cost, excluded from the ratios."""
    return {"import_s": time.perf_counter() - START, "maxrss_after_import_kb": _usage()["maxrss_self_kb"]}


def _rank_dir(files: list[str]) -> str:
    """A folder holding only the rank files (as links): HTA reads every trace in its trace_dir."""
    folder = tempfile.mkdtemp(prefix="bench-traces-")
    for f in files:
        os.symlink(os.path.abspath(f), os.path.join(folder, os.path.basename(f)))
    return folder


def _ranks_by_name(files: list[str], folder: str) -> dict[int, str] | None:
    """{rank: file} from names like rank-3.json.gz. HTA 0.5.0 finds a file's rank with the regex
    ``"rank":\\s+(\\d+)``, which needs a space after the colon: compact JSON (commprof synth's) reads as
    rank 0 for every file and HTA silently analyzes one rank. None (HTA's own lookup) otherwise."""
    import re

    ranks = {}
    for f in files:
        match = re.search(r"rank[-_]?(\d+)", os.path.basename(f))
        if match is None:
            return None
        ranks[int(match.group(1))] = os.path.join(folder, os.path.basename(f))
    return ranks if len(ranks) == len(files) > 1 else None


def run_hta(files: list[str]) -> dict[str, Any]:
    from hta.trace_analysis import TraceAnalysis

    out = _imported()
    trace_dir = _rank_dir(files)
    try:
        t0 = time.perf_counter()
        analysis = TraceAnalysis(trace_files=_ranks_by_name(files, trace_dir), trace_dir=trace_dir)
        t1 = time.perf_counter()
        overlap = analysis.get_comm_comp_overlap(visualize=False)
        t2 = time.perf_counter()
    finally:
        shutil.rmtree(trace_dir)
    out.update(parse_s=t1 - t0, analyze_s=t2 - t1, total_s=t2 - t0)
    out["overlap_pct"] = {
        str(int(rank)): float(pct)
        for rank, pct in zip(overlap["rank"], overlap["comp_comm_overlap_pctg"], strict=True)
    }
    return out


def _overlap_by_rank(analysis: Any) -> dict[str, float | None]:
    summary = analysis.rank_summary
    ranks, pcts = summary["rank"].to_list(), summary["overlap_pct"].to_list()
    return {str(r): p for r, p in zip(ranks, pcts, strict=True)}


def run_commprof(files: list[str], profile_top: int = 0) -> dict[str, Any]:
    import commprof
    import commprof.run  # noqa: F401  (open_run imports it lazily: pay for it here, not in the timing)
    from commprof.analyzers.pipeline import AnalysisSettings

    out = _imported()
    trace_dir = _rank_dir(files) if len(files) > 1 else None
    path = trace_dir or files[0]
    cache = tempfile.mkdtemp(prefix="bench-cache-")
    try:
        if profile_top:
            return _profile(lambda: commprof.analyze(commprof.open_run(path, cache_dir=cache)), profile_top)
        t0 = time.perf_counter()
        run = commprof.open_run(path, cache_dir=cache)
        t1 = time.perf_counter()
        analysis = commprof.analyze(run)
        t2 = time.perf_counter()
        compat = commprof.analyze(run, AnalysisSettings(hta_compat=True))
        t3 = time.perf_counter()
        out.update(parse_s=t1 - t0, analyze_s=t2 - t1, total_s=t2 - t0, analyze_hta_compat_s=t3 - t2)
        out["maxrss_after_first_ingest_kb"] = _usage()["maxrss_self_kb"]
        out["overlap_pct"] = _overlap_by_rank(analysis)
        out["overlap_pct_hta_compat"] = _overlap_by_rank(compat)

        t4 = time.perf_counter()
        again = commprof.open_run(path, cache_dir=cache)
        rows = again.intervals.height + again.collectives.height
        t5 = time.perf_counter()
        commprof.analyze(commprof.open_run(path, cache_dir=cache))
        t6 = time.perf_counter()
        out.update(reopen_read_s=t5 - t4, reopen_analyze_s=t6 - t5, reopen_rows=rows,
                   reparsed_on_reopen=again.ingested.parsed)
    finally:
        shutil.rmtree(cache)
        if trace_dir:
            shutil.rmtree(trace_dir)
    return out


def run_floor(files: list[str]) -> dict[str, Any]:
    import gzip

    import orjson

    out = _imported()
    gunzip = loads = 0.0
    json_bytes = 0
    for f in files:
        t0 = time.perf_counter()
        raw = Path(f).read_bytes()
        if f.endswith(".gz"):
            raw = gzip.decompress(raw)
        t1 = time.perf_counter()
        doc = orjson.loads(raw)
        t2 = time.perf_counter()
        gunzip, loads = gunzip + t1 - t0, loads + t2 - t1
        json_bytes += len(raw)
        del doc, raw
    out.update(parse_s=gunzip, analyze_s=loads, total_s=gunzip + loads, json_mb=json_bytes / 1e6)
    return out


def _profile(work: Callable[[], Any], top: int) -> dict[str, Any]:
    import cProfile
    import io
    import pstats

    profiler = cProfile.Profile()
    t0 = time.perf_counter()
    profiler.runcall(work)
    wall = time.perf_counter() - t0
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(top)
    return {"profile_wall_s": wall, "profile": text.getvalue()}


TOOLS: dict[str, Callable[..., dict[str, Any]]] = {
    "hta": run_hta, "commprof": run_commprof, "floor": run_floor,
}


def main(argv: list[str]) -> None:
    tool, out_path, *files = argv
    top = 0
    if tool == "commprof-profile":
        tool, top = "commprof", 15
    result = TOOLS[tool](files, top) if top else TOOLS[tool](files)
    result.update(_usage())
    Path(out_path).write_text(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
