"""The parts of the ``analyze`` outputs that come from sources without a timeline, formatted only (the
numbers are made in analyzers/hang.py, ras.py, inspector.py, nccl_profiler.py): the hang report from Flight
Recorder and from NCCL RAS (JSON, lines and tables, also beside traces), NCCL Inspector's bandwidth per
communicator, the profiler plugin's algorithms, and the report of a folder holding only such files, with what
they cannot give named."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only: a report read back from the report cache is rendered without polars
    import polars as pl

    from commprof.analyzers.hang import HangReport
    from commprof.analyzers.ras import RasReport

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


LIST_MAX = 16  # a longer rank list is shown as its count and its runs (the JSON report lists every rank)
RUNS_MAX = 4
HANG_ROWS = 20  # stalled groups in the text and HTML tables, the first to stall first; the rest counted


def _ranks(ranks: list[int]) -> str:
    if len(ranks) <= LIST_MAX:
        return ",".join(map(str, ranks)) if ranks else "-"
    runs = _runs(sorted(ranks))
    more = f", … ({len(runs) - RUNS_MAX} more runs)" if len(runs) > RUNS_MAX else ""
    return f"{len(ranks)} ranks: {', '.join(runs[:RUNS_MAX])}{more}"


def _runs(ranks: list[int]) -> list[str]:
    """Sorted ranks as runs of three or more at one stride (a DP group: "3-2723 step 8") and single ranks."""
    out: list[str] = []
    i = 0
    while i < len(ranks):
        step = ranks[i + 1] - ranks[i] if i + 1 < len(ranks) else 0
        j = i + 1
        while step > 0 and j + 1 < len(ranks) and ranks[j + 1] - ranks[j] == step:
            j += 1
        if step > 0 and j - i >= 2:
            out.append(f"{ranks[i]}-{ranks[j]}" + (f" step {step}" if step != 1 else ""))
            i = j + 1
        else:
            out.append(str(ranks[i]))
            i += 1
    return out


def _behind(ranks: list[int], seqs: list[int]) -> str:
    if len(ranks) <= LIST_MAX:
        return ", ".join(f"{r} ({s})" for r, s in zip(ranks, seqs, strict=True)) or "-"
    at: dict[int, list[int]] = {}
    for r, s in zip(ranks, seqs, strict=True):
        at.setdefault(s, []).append(r)
    shown = sorted(at.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    more = f"; … ({len(shown) - RUNS_MAX} more seqs)" if len(shown) > RUNS_MAX else ""
    return "; ".join(f"at seq {s}: {_ranks(rs)}" for s, rs in shown[:RUNS_MAX]) + more


def hang_lines(report: dict[str, Any]) -> list[str]:
    fr = report.get("flight_recorder")
    if not fr:
        return []
    head = f"Flight Recorder: {len(fr['ranks_dumped'])} rank(s) dumped, {fr['groups_seen']} group(s) with calls"
    if not fr["stalled"]:
        return [head + "; every member of every group reached its group's last recorded call (no hang seen)"]
    lines = [head + f"; {len(fr['groups'])} group(s) stalled: their members did not all reach the last call"]
    first = fr["groups"][0]
    later = f"; {len(fr['groups']) - 1} more stalled after it" if len(fr["groups"]) > 1 and first["since_ns"] else ""
    lines.append(f"  {'first to stall' if first['since_ns'] else 'stalled'}: group {first['pg']} "
                 f"({first['desc'] or 'no desc'}, {first['size']} ranks) in {first['op'] or '?'} seq {first['seq']}: "
                 f"{len(first['waiting'])} waiting, {len(first['behind'])} behind, {len(first['absent'])} never "
                 f"arrived{later}")
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
    groups = fr.get("groups", [])
    rows = [[g["pg"], g["desc"] or "-", str(g["size"]), str(g["seq"]), g["op"] or "?", g["state"] or "?",
             _ranks(g["waiting"]), _behind(g["behind"], g["behind_last_seq"]), _ranks(g["absent"])]
            for g in groups[:HANG_ROWS]]
    if len(groups) > HANG_ROWS:
        rest = groups[HANG_ROWS:]
        descs: dict[str, int] = {}
        for g in rest:
            descs[g["desc"] or "-"] = descs.get(g["desc"] or "-", 0) + 1
        kinds = ", ".join(f"{n} {d}" for d, n in sorted(descs.items(), key=lambda kv: -kv[1])[:3])
        rows.append(["…", f"{len(rest)} more stalled group(s), later: {kinds}", "", "", "", "",
                     f"{sum(len(g['waiting']) for g in rest)} waiting",
                     f"{sum(len(g['behind']) for g in rest)} behind", f"{sum(len(g['absent']) for g in rest)}"])
    return "Hang report (Flight Recorder): each stalled group's last call, who waits in it, who never got there", \
        HANG_COLUMNS, rows


RAS_COLUMNS = ["communicator", "op", "ranks", "ahead (ops: ranks)", "behind (ops: ranks)", "over queries"]
RAS_ONLY_ABSENT = ("step time, compute, overlap and exposed communication (no timeline: a RAS report holds "
                   "operation counts, not when the operations ran)", "bandwidth and efficiency (no transfer times)",
                   "which parallel dimension a communicator serves (RAS names communicators by hash and size)")


def ras_dict(ras: RasReport | None) -> dict[str, Any] | None:
    """The RAS hang report: per communicator and op whose ranks disagree, the ranks ahead and behind."""
    if ras is None:
        return None
    lagging = []
    for (file, comm, op), part in ras.lagging.group_by("file", "comm", "op", maintain_order=True):
        rows = part.sort("ops", descending=True).to_dicts()
        level = [{k: r[k] for k in ("ops", "behind_by", "ranks_count", "ranks", "ranks_listed", "nodes", "pids")}
                 for r in rows]
        lagging.append({"file": file, "comm": comm, "hash": rows[0]["hash"], "op": op, "nranks": rows[0]["nranks"],
                        "progress": rows[0]["progress"], "ahead": level[0], "behind": level[1:]})
    return {
        "source": "NCCL RAS", "files": list(ras.files), "nccl_versions": list(ras.versions), "queries": ras.queries,
        "mismatched": ras.mismatched, "statuses": ras.statuses, "communicators": ras.communicators.to_dicts(),
        "lagging": lagging, "notes": ras.notes.to_dicts(),
    }


def _level(level: dict[str, Any]) -> str:
    ranks = _ranks(level["ranks"]) if level["ranks"] else f"{level['ranks_count']} rank(s), not listed"
    where = sorted({n for n in level.get("nodes") or [] if n})
    return f"{level['ops']}: {ranks}" + (f" (node {', '.join(where)})" if where else "")


def _over(entry: dict[str, Any], queries: int) -> str:
    if entry["progress"] == "unchanged":
        return f"unchanged over {queries} queries: stuck"
    if entry["progress"] == "advancing":
        return f"moved on over {queries} queries"
    return "one query"


def ras_lines(report: dict[str, Any]) -> list[str]:
    ras = report.get("nccl_ras")
    if not ras:
        return []
    versions = f", NCCL {', '.join(ras['nccl_versions'])}" if ras["nccl_versions"] else ""
    head = f"NCCL RAS: {len(ras['files'])} report(s){versions}, {ras['queries']} query(ies) in the longest"
    if not ras["mismatched"]:
        lines = [head + "; no communicator's ranks disagree on their operation counts (no rank ahead or behind)"]
    else:
        lines = [head + f"; {len(ras['lagging'])} communicator op(s) whose ranks disagree on operation counts "
                 "(launched, sampled while the job ran):"]
    for e in ras["lagging"]:
        behind = "; ".join(_level(b) for b in e["behind"])
        size = f", {e['nranks']} ranks" if e["nranks"] else ""
        lines.append(f"  {e['hash'] or '?'} ({e['comm']}{size}) {e['op']}: behind at {behind}; ahead at "
                     f"{_level(e['ahead'])}; {_over(e, ras['queries'])}")
    for n in ras["notes"]:
        who = f" (ranks {_ranks(n['ranks'])})" if n["ranks"] and n["kind"] != "STATUS" else ""
        where = f" {n['hash']} ({n['comm']})" if n["comm"] else ""
        lines.append(f"  {n['kind']}{where}: {n['detail'] or '-'}{who}")
    if ras["mismatched"]:
        lines.append("  ranks are the communicator's own; a spread of one that moves on between queries is RAS "
                     "outrunning its query, the same ranks behind by the same count in repeated queries is a hang")
    return lines


def ras_section(report: dict[str, Any]) -> tuple[str, list[str], list[list[str]]]:
    ras = report.get("nccl_ras") or {}
    rows = [[f"{e['hash'] or '?'} ({e['comm']})", e["op"], str(e["nranks"] or "?"), _level(e["ahead"]),
             "; ".join(_level(b) for b in e["behind"]), _over(e, ras.get("queries", 1))]
            for e in ras.get("lagging", [])]
    return "Hang report (NCCL RAS): per communicator and collective, the ranks ahead and behind (operations " \
        "launched)", RAS_COLUMNS, rows


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
                    plugin_calls: int = 0, ras: RasReport | None = None) -> dict[str, Any]:
    """The report of a folder without traces: the hang report (Flight Recorder's, NCCL RAS's), NCCL Inspector's
    bandwidth per communicator and/or the profiler plugin's algorithms, and the figures these sources cannot have,
    named."""
    absent = (FR_ONLY_ABSENT[1:] if inspector is not None else FR_ONLY_ABSENT) if hang is not None else ()
    plugin_absent = PLUGIN_ABSENT if algorithms is not None and inspector is None else ()
    ras_absent = RAS_ONLY_ABSENT if ras is not None and hang is None and inspector is None else ()
    return {
        "run": {"path": path, "kind": "untraced",
                "sources": {**({"flight_recorder": list(hang.ranks)} if hang else {}),
                            **({"nccl_ras": list(ras.files)} if ras else {}),
                            **({"nccl_inspector": []} if inspector is not None else {}),
                            **({"nccl_profiler": []} if algorithms is not None else {})}},
        "flight_recorder": hang_dict(hang),
        **({"nccl_ras": ras_dict(ras)} if ras is not None else {}),
        "inspector": None if inspector is None else {"records": records, "summary": inspector.to_dicts()},
        "nccl_profiler": None if algorithms is None else {"collectives": plugin_calls,
                                                           "algorithms": algorithms.to_dicts()},
        "not_available": sorted({*absent, *(INSPECTOR_ONLY_ABSENT if inspector is not None else ()),
                                 *plugin_absent, *ras_absent}),
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
