"""The parts of the ``analyze`` outputs that come from sources without a timeline, formatted only (the
numbers are made in analyzers/hang.py, inspector.py, nccl_profiler.py): Flight Recorder's hang report (JSON,
lines and table, also beside traces), NCCL Inspector's bandwidth per communicator, the profiler plugin's
algorithms, and the report of a folder holding only such files, with what they cannot give named."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only: a report read back from the report cache is rendered without polars
    import polars as pl

    from commprof.analyzers.hang import HangReport

HANG_COLUMNS = ["pg", "desc", "size", "seq", "op", "state", "waiting in it", "behind (last seq)", "never arrived"]
# what a Flight Recorder dump cannot give: the report says so instead of showing zeros
FR_ONLY_ABSENT = ("step time, compute, overlap and exposed communication (no timeline: the dumps hold calls, "
                  "not kernels)", "bandwidth and efficiency (no transfer times)",
                  "dimension and tier classification beyond the group descriptions")


def hang_dict(hang: HangReport | None) -> dict[str, Any] | None:
    if hang is None:
        return None
    return {
        "ranks_dumped": list(hang.ranks), "groups_seen": hang.groups_seen, "stalled": hang.stalled,
        "suspects": list(hang.suspects), "empty_dumps": list(hang.empty_dumps), "timed": hang.timed,
        "states": hang.states, "groups": hang.groups.to_dicts(),
    }


def _ranks(ranks: list[int]) -> str:
    return ",".join(map(str, ranks)) if ranks else "-"


def hang_lines(report: dict[str, Any]) -> list[str]:
    fr = report.get("flight_recorder")
    if not fr:
        return []
    head = f"Flight Recorder: {len(fr['ranks_dumped'])} rank(s) dumped, {fr['groups_seen']} group(s) with calls"
    if not fr["stalled"]:
        return [head + "; every member of every group reached its group's last recorded call (no hang seen)"]
    lines = [head + f"; {len(fr['groups'])} group(s) stalled: their members did not all reach the last call"]
    if fr["suspects"]:
        lines.append(f"  look first at rank(s) {_ranks(fr['suspects'])}: behind or absent wherever they appear, "
                     "never waiting; the others wait for them")
    if fr["empty_dumps"]:
        lines.append(f"  rank(s) {_ranks(fr['empty_dumps'])} dumped no call at all")
    if not fr["timed"]:
        lines.append("  no durations (TORCH_NCCL_ENABLE_TIMING was off): states say enqueued, not started or done")
    return lines


def hang_section(report: dict[str, Any]) -> tuple[str, list[str], list[list[str]]]:
    fr = report.get("flight_recorder") or {}
    rows = [[g["pg"], g["desc"] or "-", str(g["size"]), str(g["seq"]), g["op"] or "?", g["state"] or "?",
             _ranks(g["waiting"]),
             ", ".join(f"{r} ({s})" for r, s in zip(g["behind"], g["behind_last_seq"], strict=True)) or "-",
             _ranks(g["absent"])] for g in fr.get("groups", [])]
    return "Hang report (Flight Recorder): each stalled group's last call, who waits in it, who never got there", \
        HANG_COLUMNS, rows


INSPECTOR_ONLY_ABSENT = ("step time, compute, overlap and exposed communication (no timeline: Inspector records "
                         "hold each call's size and time, not when it ran)",
                         "which parallel dimension a communicator serves (no group names or layout)",
                         "efficiency against a tier's peak (the records cannot tell NVLink from PCIe, nor the "
                         "network's kind)")
INSPECTOR_COLUMNS = ["communicator", "name", "ranks", "nodes", "tier", "op", "bytes", "calls", "mean µs", "max µs",
                     "algbw GB/s", "busbw GB/s", "Inspector's busbw"]


PLUGIN_ABSENT = ("collective times from the profiler plugin (a COLL event ends when it is enqueued, not done)",)
PLUGIN_COLUMNS = ["communicator", "op", "algorithm", "protocol", "calls", "ranks", "channels", "bytes"]


def untraced_report(path: str, hang: HangReport | None, inspector: pl.DataFrame | None, records: int,
                    warnings: list[str], algorithms: pl.DataFrame | None = None,
                    plugin_calls: int = 0) -> dict[str, Any]:
    """The report of a folder without traces: Flight Recorder's hang report, NCCL Inspector's bandwidth per
    communicator and/or the profiler plugin's algorithms, and the figures these sources cannot have, named."""
    absent = (FR_ONLY_ABSENT[1:] if inspector is not None else FR_ONLY_ABSENT) if hang is not None else ()
    plugin_absent = PLUGIN_ABSENT if algorithms is not None and inspector is None else ()
    return {
        "run": {"path": path, "kind": "untraced",
                "sources": {**({"flight_recorder": list(hang.ranks)} if hang else {}),
                            **({"nccl_inspector": []} if inspector is not None else {}),
                            **({"nccl_profiler": []} if algorithms is not None else {})}},
        "flight_recorder": hang_dict(hang),
        "inspector": None if inspector is None else {"records": records, "summary": inspector.to_dicts()},
        "nccl_profiler": None if algorithms is None else {"collectives": plugin_calls,
                                                           "algorithms": algorithms.to_dicts()},
        "not_available": sorted({*absent, *(INSPECTOR_ONLY_ABSENT if inspector is not None else ()),
                                 *plugin_absent}),
        "warnings": warnings,
    }


def plugin_section(report: dict[str, Any]) -> tuple[str, list[str], list[list[str]]]:
    from commprof.report.analysis_text import fmt_bytes

    def span(lo: Any, hi: Any, fmt: Any = str) -> str:
        return "?" if lo is None else fmt(lo) if lo == hi else f"{fmt(lo)}-{fmt(hi)}"

    rows = [[r["comm_hash"] or "?", r["op"] or "?", r["algorithm"] or "?", r["protocol"] or "?", f"{r['calls']:,}",
             str(r["ranks"]), span(r["channels_min"], r["channels_max"]), span(r["bytes_min"], r["bytes_max"],
                                                                              fmt_bytes)]
            for r in (report.get("nccl_profiler") or {}).get("algorithms", [])]
    return "NCCL profiler plugin: the algorithm and protocol NCCL chose, per communicator and op", \
        PLUGIN_COLUMNS, rows


def inspector_section(report: dict[str, Any]) -> tuple[str, list[str], list[list[str]]]:
    from commprof.report.analysis_text import fmt_bytes, fmt_gbps

    rows = [[r["comm_id"] or "?", r["comm_name"] or "-", str(r["n_ranks"]), str(r["n_nodes"]), r["tier"], r["op"],
             fmt_bytes(r["bytes"]), f"{r['calls']:,}", f"{r['mean_us']:,.1f}", f"{r['max_us']:,.1f}",
             fmt_gbps(r["algbw_gbps"]), fmt_gbps(r["busbw_gbps"]), fmt_gbps(r["inspector_busbw_gbps"])]
            for r in (report.get("inspector") or {}).get("summary", [])]
    return ("NCCL Inspector: bandwidth per communicator, op and size (all ranks' calls; busbw with n = the "
            "communicator's size, bytes on the full buffer)", INSPECTOR_COLUMNS, rows)
