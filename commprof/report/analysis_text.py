"""Render the ``analyze`` report (the dict from analysis_json.build) for a terminal or as Markdown."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from commprof.report.findings_text import finding_lines, what_if_lines
from commprof.report.other_sources import LIST_MAX, RUNS_MAX, _runs, hang_lines, hang_section, ras_lines, ras_section


def fmt_ms(ns: float | None) -> str:
    return "-" if ns is None else f"{ns / 1e6:,.2f}"


def fmt_pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}%"


def fmt_bytes(n: float | None) -> str:
    if n is None:  # the trace does not give the size
        return "unknown"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1000
    return f"{n}"


def fmt_known_bytes(row: dict[str, Any], key: str) -> str:
    """A row's bytes, saying where the trace does not give the calls' sizes: "unknown" when none of its calls
    has one (library kernels, NCCL traces without record_param_comms), "1.2 MB + ?" when some lack it."""
    unknown = row.get("bytes_unknown_calls") or 0
    if unknown and not row.get(key):
        return "unknown"
    return fmt_bytes(row.get(key)) + (" + ?" if unknown else "")


def fmt_gbps(value: float | None) -> str:
    return "-" if value is None else f"{value:,.2f}"


def fmt_eff(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def fmt_ranks(ranks: list[int] | None) -> str:
    """"0..7", "3..4091 step 8", a short list as it is; past LIST_MAX irregular ranks, their count and first
    runs (a group of 2,048 members is never printed member by member; --format json lists them)."""
    if not ranks:
        return "?"
    ranks = sorted(ranks)
    step = ranks[1] - ranks[0] if len(ranks) > 1 else 1
    if len(ranks) > 4 and all(b - a == step for a, b in zip(ranks, ranks[1:], strict=False)):
        return f"{ranks[0]}..{ranks[-1]}" + (f" step {step}" if step != 1 else "")
    if len(ranks) > LIST_MAX:
        runs = [r.replace("-", "..", 1) for r in _runs(ranks)]
        more = f", … ({len(runs) - RUNS_MAX} more runs)" if len(runs) > RUNS_MAX else ""
        return f"{len(ranks):,} ranks: {', '.join(runs[:RUNS_MAX])}{more}"
    return ",".join(map(str, ranks))


_OP_SHORT = {"all_reduce": "AR", "all_gather": "AG", "reduce_scatter": "RS", "all_to_all": "A2A",
             "broadcast": "BC", "reduce": "R", "send": "send", "recv": "recv", "send_recv": "SR",
             "barrier": "bar", "gather": "G", "scatter": "S", "unknown": "?"}


def _op_mix(mix: dict[str, int]) -> str:
    return " ".join(f"{_OP_SHORT.get(op, op)}×{n}" for op, n in mix.items()) or "-"


RANK_COLUMNS = ["rank", "steps", "step ms", "compute", "overlapped", "exposed", "· wait", "· transfer", "memory",
                "idle", "overlap"]
PG_COLUMNS = ["pg", "desc", "ranks", "dim", "tier", "calls", "bytes/step", "comm ms/step", "exposed ms/step",
              "busbw GB/s", "eff"]
TOP_COLUMNS = ["pg", "op", "bytes", "calls", "comm ms", "exposed ms", "busbw GB/s", "eff"]
DIM_TIER_COLUMNS = ["dim", "tier", "groups", "ops/step", "bytes/step", "comm ms/step", "exposed ms/step",
                    "· wait", "· transfer", "share of step", "busbw GB/s", "eff"]
SKEW_COLUMNS = ["rank", "others wait for it ms/step", "last at", "its own wait ms/step", "longest wait ms", "on"]
CLOCK_COLUMNS = ["host", "offset µs", "residual µs", "calls used", "fit"]
PAIR_COLUMNS = ["host", "host", "groups", "calls", "busbw GB/s", "tier"]
DIM_TIER_TITLE = "Communication by dimension and tier (per rank and step; share = exposed / step time)"


# past these, the text and Markdown reports show the worst rows and say how many were left out
# (every row stays in --format json)
MAX_RANK_ROWS = 16
MAX_GROUP_ROWS = 20
MAX_HOST_ROWS = 16
DIST_COLUMNS = ["over the ranks", "min", "p10", "median", "p90", "max", "min at rank", "max at rank"]
_DIST_LABELS = {"step_ns": ("step ms", "ms"), "exposed_comm_ns": ("exposed comm ms", "ms"),
                "exposed_wait_ns": ("· of it waiting ms", "ms"), "exposed_pct_of_step": ("exposed % of step", "%"),
                "overlap_pct": ("comm hidden %", "%")}


def _worst(rows: list[dict[str, Any]], key: str, limit: int) -> list[dict[str, Any]]:
    """The ``limit`` rows with the largest ``key`` (ties by position), shown in their original order."""
    if len(rows) <= limit:
        return rows
    picked = sorted(range(len(rows)), key=lambda i: (-(rows[i].get(key) or 0), i))[:limit]
    return [rows[i] for i in sorted(picked)]


def shown_ranks(report: dict[str, Any], limit: int = MAX_RANK_ROWS) -> list[dict[str, Any]]:
    """Every rank, or past ``limit``: the ranks at each figure's min and max (the straggler is often the
    one with the least exposed time: the others wait for it), then those with the most exposed comm."""
    ranks: list[dict[str, Any]] = report["ranks"]
    if len(ranks) <= limit:
        return ranks
    extremes = {r for d in report.get("rank_distribution") or [] for r in (d["max_rank"], d["min_rank"])}
    by_exposed = sorted(range(len(ranks)), key=lambda i: (-(ranks[i].get("exposed_comm_ns") or 0), i))
    picked = [i for i, r in enumerate(ranks) if r["rank"] in extremes][:limit]
    picked += [i for i in by_exposed if i not in picked][: limit - len(picked)]
    return [ranks[i] for i in sorted(picked)]


def rank_rows(report: dict[str, Any], limit: int | None = MAX_RANK_ROWS) -> list[list[str]]:
    ranks = report["ranks"] if limit is None else shown_ranks(report, limit)
    return [
        [str(r["rank"]), str(r["steps"]), fmt_ms(r["step_ns"]), fmt_ms(r["compute_ns"]),
         fmt_ms(r["overlapped_comm_ns"]), fmt_ms(r["exposed_comm_ns"]), fmt_ms(r["exposed_wait_ns"]),
         fmt_ms(r["exposed_transfer_ns"]), fmt_ms(r["memory_ns"]),
         fmt_ms(r["idle_ns"]), fmt_pct(r["overlap_pct"])]
        for r in ranks
    ]


def rank_title(report: dict[str, Any]) -> str:
    n = len(report["ranks"])
    if n <= MAX_RANK_ROWS:
        return "Step time per rank (mean ms per step)"
    return (f"Step time per rank (mean ms per step): {MAX_RANK_ROWS} of {n:,} ranks — each figure's min and max, then "
            f"the most exposed comm; {n - MAX_RANK_ROWS:,} more in --format json")


def distribution_rows(report: dict[str, Any]) -> list[list[str]]:
    """The spread over the ranks, shown when the per-rank table leaves ranks out."""
    if len(report["ranks"]) <= MAX_RANK_ROWS:
        return []
    out = []
    for d in report.get("rank_distribution") or []:
        label, unit = _DIST_LABELS.get(d["metric"], (d["metric"], ""))
        cell = fmt_ms if unit == "ms" else (lambda v: "-" if v is None else f"{v:.1f}")
        out.append([label, *(cell(d[k]) for k in ("min", "p10", "median", "p90", "max")), str(d["min_rank"]),
                    str(d["max_rank"])])
    return out


def pg_rows(report: dict[str, Any], limit: int | None = MAX_GROUP_ROWS) -> list[list[str]]:
    groups = report["process_groups"]
    groups = groups if limit is None else _worst(groups, "exposed_ns_per_step", limit)
    return [
        [str(g["pg"]), g["desc"] or "-", fmt_ranks(g["ranks"]), g["dimension"], g["tier"], _op_mix(g["op_mix"]),
         fmt_known_bytes(g, "bytes_per_step"), fmt_ms(g["comm_ns_per_step"]), fmt_ms(g["exposed_ns_per_step"]),
         fmt_gbps(g["busbw_gbps"]), fmt_eff(g.get("efficiency"))]
        for g in groups
    ]


def pg_title(report: dict[str, Any]) -> str:
    n = len(report["process_groups"])
    if n <= MAX_GROUP_ROWS:
        return "Process groups"
    return (f"Process groups: the {MAX_GROUP_ROWS} of {n:,} with the most exposed time; "
            f"{n - MAX_GROUP_ROWS:,} more in --format json")


def top_rows(report: dict[str, Any]) -> list[list[str]]:
    return [
        [str(c["pg"]), c["op"], fmt_bytes(c["bytes"]), str(c["count"]), fmt_ms(c["comm_ns"]),
         fmt_ms(c["exposed_ns"]), fmt_gbps(c["busbw_gbps"]), fmt_eff(c.get("efficiency"))]
        for c in report["top_collectives"]
    ]


def dimension_tier_rows(report: dict[str, Any]) -> list[list[str]]:
    return [
        [d["dimension"], d["tier"], str(d["groups"]), f"{d['ops_per_step']:,.1f}", fmt_known_bytes(d, "bytes_per_step"),
         fmt_ms(d["comm_ns_per_step"]), fmt_ms(d["exposed_ns_per_step"]), fmt_ms(d["exposed_wait_ns_per_step"]),
         fmt_ms(d["exposed_transfer_ns_per_step"]), fmt_pct(d["exposed_pct_of_step"]),
         fmt_gbps(d["busbw_gbps"]), fmt_eff(d["efficiency"])]
        for d in report.get("dimension_tier") or []
    ]


SKEW_ROWS = 5


def _late(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for s in report["skew"]["stragglers"] if (s.get("caused_wait_ns_per_step") or 0) > 0]


def skew_rows(report: dict[str, Any], top: int = SKEW_ROWS) -> list[list[str]]:
    """The ranks the others wait for most (only those that make anyone wait)."""
    rows = sorted(_late(report), key=lambda s: (-s["caused_wait_ns_per_step"], s["rank"]))[:top]
    return [[str(s["rank"]), fmt_ms(s["caused_wait_ns_per_step"]), f"{s['times_last']} calls",
             fmt_ms(s["wait_ns_per_step"]), fmt_ms(s["max_wait_ns"]),
             f"pg {s['max_wait_pg']} {s['max_wait_op']}" if s.get("max_wait_pg") else "-"] for s in rows]


def shown_clocks(report: dict[str, Any], limit: int = MAX_HOST_ROWS) -> list[dict[str, Any]]:
    """Every host, or past ``limit``: the reference and every host left unaligned, then those whose clock was
    moved most, then those that fit worst (largest residual); in the report's order."""
    clocks: list[dict[str, Any]] = report["skew"]["host_clocks"]
    if len(clocks) <= limit:
        return clocks
    picked = [i for i, c in enumerate(clocks) if c["fit"] != "aligned"][:limit]
    by_offset = sorted(range(len(clocks)), key=lambda i: (-abs(clocks[i]["offset_ns"] or 0), i))
    by_residual = sorted(range(len(clocks)), key=lambda i: (-(clocks[i]["residual_ns"] or 0), i))
    for order, share in ((by_offset, (limit + len(picked)) // 2), (by_residual, limit)):
        picked += [i for i in order if i not in picked][: max(0, share - len(picked))]
    return [clocks[i] for i in sorted(picked)]


def clock_rows(report: dict[str, Any]) -> list[list[str]]:
    clocks = report["skew"]["host_clocks"]
    if len(clocks) < 2:
        return []
    return [[c["host"], f"{c['offset_ns'] / 1e3:+,.1f}", f"{c['residual_ns'] / 1e3:,.1f}", str(c["calls_used"]),
             c["fit"]] for c in shown_clocks(report)]


def clock_title(report: dict[str, Any]) -> str:
    n = len(report["skew"]["host_clocks"])
    title = "Host clocks (aligned from matched collectives' end times)"
    if n <= MAX_HOST_ROWS:
        return title
    return (f"{title}: {MAX_HOST_ROWS} of {n:,} hosts — the reference and any not aligned, then the largest offsets "
            f"and residuals; {n - MAX_HOST_ROWS:,} more in --format json")


def pair_rows(report: dict[str, Any], limit: int = MAX_HOST_ROWS) -> list[list[str]]:
    """What each pair of hosts reached (slowest first); past ``limit`` the slowest and the fastest half each."""
    pairs = report["skew"].get("host_pairs") or []
    if len(pairs) > limit:
        pairs = pairs[: limit // 2] + pairs[-(limit - limit // 2):]
    return [[p["host_a"], p["host_b"], str(p["groups"]), f"{p['calls']:,}", fmt_gbps(p["busbw_gbps"]), p["tier"]]
            for p in pairs]


def pair_title(report: dict[str, Any]) -> str:
    n = len(report["skew"].get("host_pairs") or [])
    title = "Host pairs (measured busbw, slowest first)"
    return title if n <= MAX_HOST_ROWS else f"{title}: the {MAX_HOST_ROWS // 2} slowest and fastest of {n:,}"


def tier_sources(report: dict[str, Any]) -> str:
    """How the groups' tiers were decided, counted: "tiers from hosts 4, switches 3"."""
    counts: dict[str, int] = {}
    for g in report["process_groups"]:
        if g.get("tier_source"):
            counts[g["tier_source"]] = counts.get(g["tier_source"], 0) + 1
    return "tiers from " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) if counts else ""


def skew_title(report: dict[str, Any]) -> str:
    how = {"seq": "by (pg, seq)", "order": "by call order per group (no seq in the trace)",
           "seq and order": "by (pg, seq), else call order"}.get(report["skew"]["match_by"], "")
    n = len(_late(report))
    more = (f": the {SKEW_ROWS} of {n:,} that make the others wait most; {n - SKEW_ROWS:,} more in --format json"
            if n > SKEW_ROWS else "")
    return f"Late ranks: who the others wait for (calls matched {how}){more}"


def headline(report: dict[str, Any]) -> str:
    run, totals = report["run"], report["totals"]
    if not totals:
        return f"{run['path']}: no steps to analyze"
    return (
        f"{run['path']}: {run['ranks_analyzed']} rank(s)"
        + (f" of {run['world_size']}" if run["world_size"] else "")
        + f"; mean step {fmt_ms(totals['step_ns'])} ms, exposed comm {fmt_ms(totals['exposed_comm_ns'])} ms "
        f"({fmt_pct(totals['exposed_comm_pct_of_step'])} of the step), "
        f"{fmt_pct(totals['overlap_pct'])} of comm hidden behind compute; of the exposed time "
        f"{fmt_ms(totals['exposed_wait_ns'])} ms is waiting for late ranks, "
        f"{fmt_ms(totals['exposed_transfer_ns'])} ms transfer"
        + (" [HTA-compatible rules]" if run["hta_compat"] else "")
    )


WINDOW_COLUMNS = ["window", "step", "by", "ranks", "steps", "step ms", "vs first", "exposed ms", "vs first",
                  "exposed %", "overlap", "findings (+ new, - gone)"]


def _signed_pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1f}%"


def window_title(report: dict[str, Any]) -> str:
    windows = report.get("windows") or {}
    newest = (report["run"].get("window") or {}).get("name") or "the newest"
    path = str(report["run"]["path"])
    run = path.rsplit("/windows/", 1)[0] if "/windows/" in path else path
    return (f"Windows ({windows.get('count', 0)}, oldest first): the tables below are {newest}'s; another: "
            f"commprof analyze {run}/windows/NAME; two: commprof diff {run}/windows/A {run}/windows/B")


def window_rows(report: dict[str, Any]) -> list[list[str]]:
    """record --every/--on-demand: one row per window (analyzers/trend.py)."""
    windows = report.get("windows") or {}
    out = []
    for w in windows.get("rows") or []:
        found = [f"{f['severity']} {f['id']}" for f in w["findings"]]
        found += [f"+{k}" for k in w["new_findings"]] + [f"-{k}" for k in w["gone_findings"]]
        at = w["step"] if w["step"] is not None else (f"{w['seconds']} s" if w.get("seconds") is not None else "-")
        out.append([w["window"], str(at), w["reason"] or "-",
                    str(w["ranks"] if w["ranks"] is not None else "-"), str(w["steps"] if w["steps"] is not None
                                                                            else "-"),
                    fmt_ms(w["step_ns"]), _signed_pct(w["step_change_pct"]), fmt_ms(w["exposed_comm_ns"]),
                    _signed_pct(w["exposed_change_pct"]), fmt_pct(w["exposed_pct_of_step"]), fmt_pct(w["overlap_pct"]),
                    ", ".join(found) or "none"])
    out += [[f["window"], *["-"] * 10, f"not analyzed: {f['why']}"] for f in windows.get("failed") or []]
    return out


def sections(report: dict[str, Any]) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, columns, rows) of each table, in report order; text and Markdown show the same."""
    return [
        (window_title(report), WINDOW_COLUMNS, window_rows(report)),
        (rank_title(report), RANK_COLUMNS, rank_rows(report)),
        (f"Spread over the {len(report['ranks']):,} ranks (per step; min/max at: the rank holding it)", DIST_COLUMNS,
         distribution_rows(report)),
        (pg_title(report), PG_COLUMNS, pg_rows(report)),
        (DIM_TIER_TITLE, DIM_TIER_COLUMNS, dimension_tier_rows(report)),
        ("Top collectives by exposed time (all ranks)", TOP_COLUMNS, top_rows(report)),
        (skew_title(report), SKEW_COLUMNS, skew_rows(report)),
        (clock_title(report), CLOCK_COLUMNS, clock_rows(report)),
        (pair_title(report), PAIR_COLUMNS, pair_rows(report)),
        hang_section(report),
        ras_section(report),
    ]


def bandwidth_note(report: dict[str, Any]) -> str:
    return f"Bandwidth: {report.get('conventions', {}).get('bandwidth', 'GB/s = 10^9 B/s')}."


def render_text(report: dict[str, Any], console: Console) -> None:
    for line in finding_lines(report):  # what is wrong and what it costs comes first
        console.print(line, highlight=False, soft_wrap=True, markup=False)
    for line in what_if_lines(report):
        console.print(line, style="cyan", highlight=False, soft_wrap=True, markup=False)
    console.print(headline(report), style="bold", highlight=False)
    for line in (*hang_lines(report), *ras_lines(report)):
        console.print(line, style="bold red", highlight=False, soft_wrap=True, markup=False)
    parts = sections(report)
    for title, columns, rows in parts:
        if not rows:
            continue
        if title.startswith("Process groups"):
            title += " (calls: AR all-reduce, AG all-gather, RS reduce-scatter, A2A all-to-all, BC broadcast"
            title += f"; {tier_sources(report)})" if tier_sources(report) else ")"
        table = Table(title=title, title_justify="left", header_style="bold")
        for i, col in enumerate(columns):
            if columns is WINDOW_COLUMNS:
                left = col in ("window", "by") or col.startswith("findings")
            else:
                named = i < 2 or col in {"desc", "ops", "dim", "tier", "op"}
                left = i == 0 or (columns is not DIST_COLUMNS and named)
            table.add_column(col, justify="left" if left else "right")
        for row in rows:
            table.add_row(*row)
        console.print(table)
    if any(rows and "busbw GB/s" in columns for _, columns, rows in parts):
        console.print(bandwidth_note(report), style="dim", highlight=False, soft_wrap=True, markup=False)
    for warning in report["warnings"]:
        console.print(f"warning: {warning}", style="yellow", highlight=False, soft_wrap=True)


def _md_table(columns: list[str], rows: list[list[str]]) -> str:
    def esc(cell: str) -> str:
        return cell.replace("|", "\\|")

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(esc(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def render_markdown(report: dict[str, Any]) -> str:
    out = ["# commprof analysis", "", *finding_lines(report, markdown=True), ""]
    if report.get("what_if"):
        out += ["## What-if (an estimate)", "", *what_if_lines(report, markdown=True), ""]
    out += [headline(report), "", *hang_lines(report), *ras_lines(report), ""]
    for title, columns, rows in sections(report):
        if rows:
            out += [f"## {title}", "", _md_table(columns, rows), ""]
    if any(rows and "busbw GB/s" in columns for _, columns, rows in sections(report)):
        out += [bandwidth_note(report), ""]
    if report["warnings"]:
        out += ["## Warnings", ""] + [f"- {w}" for w in report["warnings"]] + [""]
    return "\n".join(out)
