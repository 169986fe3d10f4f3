"""Render the ``analyze`` report (the dict from analysis_json.build) for a terminal or as Markdown."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from commprof.report.findings_text import finding_lines, what_if_lines


def fmt_ms(ns: float | None) -> str:
    return "-" if ns is None else f"{ns / 1e6:,.2f}"


def fmt_pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}%"


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "?"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1000
    return f"{n}"


def fmt_gbps(value: float | None) -> str:
    return "-" if value is None else f"{value:,.2f}"


def fmt_eff(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def fmt_ranks(ranks: list[int] | None) -> str:
    if not ranks:
        return "?"
    ranks = sorted(ranks)
    step = ranks[1] - ranks[0] if len(ranks) > 1 else 1
    if len(ranks) > 4 and all(b - a == step for a, b in zip(ranks, ranks[1:], strict=False)):
        return f"{ranks[0]}..{ranks[-1]}" + (f" step {step}" if step != 1 else "")
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
DIM_TIER_TITLE = "Communication by dimension and tier (per rank and step; share = exposed / step time)"


def rank_rows(report: dict[str, Any]) -> list[list[str]]:
    return [
        [str(r["rank"]), str(r["steps"]), fmt_ms(r["step_ns"]), fmt_ms(r["compute_ns"]),
         fmt_ms(r["overlapped_comm_ns"]), fmt_ms(r["exposed_comm_ns"]), fmt_ms(r["exposed_wait_ns"]),
         fmt_ms(r["exposed_transfer_ns"]), fmt_ms(r["memory_ns"]),
         fmt_ms(r["idle_ns"]), fmt_pct(r["overlap_pct"])]
        for r in report["ranks"]
    ]


def pg_rows(report: dict[str, Any]) -> list[list[str]]:
    return [
        [str(g["pg"]), g["desc"] or "-", fmt_ranks(g["ranks"]), g["dimension"], g["tier"], _op_mix(g["op_mix"]),
         fmt_bytes(g["bytes_per_step"]), fmt_ms(g["comm_ns_per_step"]), fmt_ms(g["exposed_ns_per_step"]),
         fmt_gbps(g["busbw_gbps"]), fmt_eff(g.get("efficiency"))]
        for g in report["process_groups"]
    ]


def top_rows(report: dict[str, Any]) -> list[list[str]]:
    return [
        [str(c["pg"]), c["op"], fmt_bytes(c["bytes"]), str(c["count"]), fmt_ms(c["comm_ns"]),
         fmt_ms(c["exposed_ns"]), fmt_gbps(c["busbw_gbps"]), fmt_eff(c.get("efficiency"))]
        for c in report["top_collectives"]
    ]


def dimension_tier_rows(report: dict[str, Any]) -> list[list[str]]:
    return [
        [d["dimension"], d["tier"], str(d["groups"]), f"{d['ops_per_step']:,.1f}", fmt_bytes(d["bytes_per_step"]),
         fmt_ms(d["comm_ns_per_step"]), fmt_ms(d["exposed_ns_per_step"]), fmt_ms(d["exposed_wait_ns_per_step"]),
         fmt_ms(d["exposed_transfer_ns_per_step"]), fmt_pct(d["exposed_pct_of_step"]),
         fmt_gbps(d["busbw_gbps"]), fmt_eff(d["efficiency"])]
        for d in report.get("dimension_tier") or []
    ]


def skew_rows(report: dict[str, Any], top: int = 5) -> list[list[str]]:
    """The ranks the others wait for most (only those that make anyone wait)."""
    rows = sorted((s for s in report["skew"]["stragglers"] if (s.get("caused_wait_ns_per_step") or 0) > 0),
                  key=lambda s: (-s["caused_wait_ns_per_step"], s["rank"]))[:top]
    return [[str(s["rank"]), fmt_ms(s["caused_wait_ns_per_step"]), f"{s['times_last']} calls",
             fmt_ms(s["wait_ns_per_step"]), fmt_ms(s["max_wait_ns"]),
             f"pg {s['max_wait_pg']} {s['max_wait_op']}" if s.get("max_wait_pg") else "-"] for s in rows]


def clock_rows(report: dict[str, Any]) -> list[list[str]]:
    clocks = report["skew"]["host_clocks"]
    if len(clocks) < 2:
        return []
    return [[c["host"], f"{c['offset_ns'] / 1e3:+,.1f}", f"{c['residual_ns'] / 1e3:,.1f}", str(c["calls_used"]),
             c["fit"]] for c in clocks]


def skew_title(report: dict[str, Any]) -> str:
    how = {"seq": "by (pg, seq)", "order": "by call order per group (no seq in the trace)",
           "seq and order": "by (pg, seq), else call order"}.get(report["skew"]["match_by"], "")
    return f"Late ranks: who the others wait for (calls matched {how})"


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


def render_text(report: dict[str, Any], console: Console) -> None:
    for line in finding_lines(report):  # what is wrong and what it costs comes first
        console.print(line, highlight=False, soft_wrap=True, markup=False)
    for line in what_if_lines(report):
        console.print(line, style="cyan", highlight=False, soft_wrap=True, markup=False)
    console.print(headline(report), style="bold", highlight=False)
    sections = [
        ("Step time per rank (mean ms per step)", RANK_COLUMNS, rank_rows(report)),
        ("Process groups", PG_COLUMNS, pg_rows(report)),
        (DIM_TIER_TITLE, DIM_TIER_COLUMNS, dimension_tier_rows(report)),
        ("Top collectives by exposed time (all ranks)", TOP_COLUMNS, top_rows(report)),
        (skew_title(report), SKEW_COLUMNS, skew_rows(report)),
        ("Host clocks (aligned from matched collectives' end times)", CLOCK_COLUMNS, clock_rows(report)),
    ]
    for title, columns, rows in sections:
        if not rows:
            continue
        if title == "Process groups":
            title += " (calls: AR all-reduce, AG all-gather, RS reduce-scatter, A2A all-to-all, BC broadcast)"
        table = Table(title=title, title_justify="left", header_style="bold")
        for i, col in enumerate(columns):
            table.add_column(col, justify="left" if i < 2 or col in {"desc", "ops", "dim", "tier", "op"} else "right")
        for row in rows:
            table.add_row(*row)
        console.print(table)
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
        out += ["## What-if (an estimate)", "", *what_if_lines(report), ""]
    out += [headline(report), ""]
    for title, columns, rows in [
        ("Step time per rank (mean ms per step)", RANK_COLUMNS, rank_rows(report)),
        ("Process groups", PG_COLUMNS, pg_rows(report)),
        (DIM_TIER_TITLE, DIM_TIER_COLUMNS, dimension_tier_rows(report)),
        ("Top collectives by exposed time", TOP_COLUMNS, top_rows(report)),
        (skew_title(report), SKEW_COLUMNS, skew_rows(report)),
        ("Host clocks", CLOCK_COLUMNS, clock_rows(report)),
    ]:
        if rows:
            out += [f"## {title}", "", _md_table(columns, rows), ""]
    if report["warnings"]:
        out += ["## Warnings", ""] + [f"- {w}" for w in report["warnings"]] + [""]
    return "\n".join(out)
