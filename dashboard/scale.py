"""The pages past ``AGGREGATE_ABOVE_RANKS`` ranks: hosts and process groups, worst first, never a row per
rank. What "worst" means is the analysis' (``Analysis.host_summary``: slow ports, then the ranks the others
wait for, then exposed comm; ``Analysis.group_waits``: the groups that wait most; the CLI's process-group
rows: the most exposed); these helpers only pick the first K rows, say how many more there are and find
another host or group by name for a dropdown. Runs of at most 256 ranks never reach this module's views.
"""

from __future__ import annotations

from typing import Any

import polars as pl
from dash import dcc, html

from commprof.dashboard.cache import RunCache
from commprof.dashboard.state import href

# past AGGREGATE_ABOVE_RANKS (the largest run the browser tests check rank by rank, test_256_ranks) the pages, and the
# report's topology picture, draw hosts; WORST_HOSTS of them
from commprof.figures.hosts import AGGREGATE_ABOVE_RANKS, WORST_HOSTS
from commprof.figures.style import fmt_bytes
from commprof.report import analysis_text
from commprof.report.analysis_text import fmt_ms  # the CLI's: the unit is in the column's name

WORST_GROUPS = analysis_text.MAX_GROUP_ROWS  # process groups in a table (the CLI's 20)
SEARCH_RESULTS = 20  # a dropdown's options: the worst ones, or those a search finds
HOST_COLUMNS = ["#", "host", "ranks", "step ms", "exposed ms", "· wait ms", "others wait for its rank ms/step",
                "to other hosts /step", "inside /step", "port GB/s"]


def at_scale(cache: RunCache, key: str) -> bool:
    """True past AGGREGATE_ABOVE_RANKS ranks: the pages show hosts and groups instead of ranks."""
    return cache.analysis(key).ranks.height > AGGREGATE_ABOVE_RANKS


def worst_of(shown: int, total: int, what: str, how: str) -> str:
    """'the worst 16 of 4,096 hosts (slow ports, ...); 4,080 more' — the sentence every aggregated view carries."""
    more = total - shown
    return f"the worst {shown:,} of {total:,} {what} ({how})" + (f"; {more:,} more" if more > 0 else "")


def host_rows(cache: RunCache, key: str, limit: int = WORST_HOSTS, chosen: str | None = None) -> list[dict[str, Any]]:
    """The first ``limit`` rows of the analysis' host summary (worst first), and ``chosen`` wherever it is."""
    summary = cache.analysis(key).host_summary
    rows = summary.head(limit).to_dicts()
    if chosen and chosen not in {r["host"] for r in rows}:
        rows += summary.filter(pl.col("host") == chosen).to_dicts()
    return rows


def hosts_table(cache: RunCache, key: str, table_id: str, chosen: str | None = None, here: bool = False) -> Any:
    """The worst hosts (the analysis' host summary, its order), each a link to the topology drawn around it
    (``here``: the table is on the topology page, whose router does not rebuild it for a new query string, so
    the link loads the page afresh)."""
    return html.Div(hosts_table_rows(cache, key, chosen, here), id=table_id)


def hosts_table_rows(cache: RunCache, key: str, chosen: str | None = None, here: bool = False) -> list[Any]:
    """hosts_table's children (a page that redraws around another host replaces them); ``chosen`` in bold."""
    link = html.A if here else dcc.Link
    summary = cache.analysis(key).host_summary
    rows = host_rows(cache, key, WORST_HOSTS, chosen)
    body = []
    for r in rows:
        span = f"{r['first_rank']}–{r['last_rank']}" if r["ranks"] > 1 else str(r["first_rank"])
        port = "–" if r["port_gbps"] is None else f"{r['port_gbps']:g}" + (" (slow)" if r["slow_port"] else "")
        cells = [str(r["worst"]), link(r["host"], href=href(key, "topology", host=r["host"])),
                 f"{r['ranks']} ({span})", fmt_ms(r["step_ns"]), fmt_ms(r["exposed_comm_ns"]),
                 fmt_ms(r["exposed_wait_ns"]),
                 f"{fmt_ms(r['waited_on_ns_per_step'])} (rank {r['waited_on_rank']})"
                 if r["waited_on_ns_per_step"] else "–",
                 fmt_bytes(r["net_bytes_per_step"]), fmt_bytes(r["local_bytes_per_step"]), port]
        body.append(html.Tr([html.Td(c, className="text" if i == 1 else "") for i, c in enumerate(cells)],
                            style={"fontWeight": "600"} if r["host"] == chosen else None))
    head = html.Tr([html.Th(c, className="text" if i == 1 else "") for i, c in enumerate(HOST_COLUMNS)])
    title = "Hosts: " + worst_of(min(WORST_HOSTS, summary.height), summary.height, "hosts",
                                 "slow ports, then the ranks the others wait for, then exposed comm")
    return [html.H3(title), html.P("Means per rank and step over each host's ranks; a host opens the topology "
                                   "drawn around it.", className="muted"),
            html.Div(html.Table([html.Thead(head), html.Tbody(body)], className="grid"), className="scroll")]


def groups_table(cache: RunCache, key: str, table_id: str) -> Any:
    """The CLI's process-group rows (the most exposed 20), each group a link to its skew."""
    report = cache.report(key)
    rows = analysis_text.pg_rows(report)
    body = [html.Tr([html.Td(dcc.Link(cells[0], href=href(key, "skew", pg=cells[0]))),
                     *[html.Td(c, className="text" if i in (0, 2, 3) else "") for i, c in enumerate(cells[1:])]])
            for cells in rows]
    head = html.Tr([html.Th(c, className="text" if i in (0, 1, 2, 3, 4) else "")
                    for i, c in enumerate(analysis_text.PG_COLUMNS)])
    n = len(report["process_groups"])
    title = "Process groups: " + worst_of(len(rows), n, "groups", "the most exposed time per rank-step")
    return html.Div([html.H3(title), html.Div(html.Table([html.Thead(head), html.Tbody(body)], className="grid"),
                                              className="scroll")], id=table_id)


def find(options: list[tuple[Any, str]], text: Any, keep: Any, limit: int = SEARCH_RESULTS
         ) -> list[dict[str, Any]]:
    """A dropdown's options: with no search text the first ``limit`` (the worst), else the first ``limit``
    whose label holds the text (case-insensitive); ``keep`` (the chosen value, or a list of them for a dropdown
    of several) always among them."""
    needle = text.strip().lower() if isinstance(text, str) else ""
    hits = [(v, label) for v, label in options if not needle or needle in label.lower()][:limit]
    kept = set(keep) if isinstance(keep, list) else {keep} if keep is not None else set()
    missing = kept - {v for v, _ in hits}
    if missing:
        hits += [(v, label) for v, label in options if v in missing]
    return [{"label": label, "value": v} for v, label in hits]


def rank_options(cache: RunCache, key: str) -> list[tuple[int, str]]:
    """(rank, "9001 · gpu-node-1125") of every rank, the worst hosts' first (host_summary's order), a host's
    ranks in order: what the timeline's rank dropdown finds past 256 ranks by typing a rank or a host."""
    a = cache.analysis(key)
    order = {h: i for i, h in enumerate(a.host_summary["host"].to_list())}
    rows = a.ranks.select("rank", "host").iter_rows()
    return [(r, f"{r} · {h}" if h else str(r))
            for r, h in sorted(rows, key=lambda rh: (order.get(rh[1], len(order)), rh[0]))]


def group_options(cache: RunCache, key: str) -> list[tuple[str, str]]:
    """(pg, "name · dimension · 5.10 ms/step waiting") of every group with matched calls, the most waiting
    first (the analysis' group_waits order)."""
    names = cache.group_names(key)
    waits = cache.analysis(key).group_waits
    return [(pg, f"{names.get(pg, pg)} · {dim} · {fmt_ms(wait)} ms/step waiting")
            for pg, dim, wait in waits.select("pg", "dimension", "wait_ns_per_step").iter_rows()]


def host_options(cache: RunCache, key: str) -> list[tuple[str, str]]:
    """(host, "#3 gpu-node-12 · ranks 96–103") of every host, worst first."""
    summary = cache.analysis(key).host_summary
    return [(h, f"#{w} {h} · ranks {a}–{b}" if a != b else f"#{w} {h} · rank {a}")
            for w, h, a, b in summary.select("worst", "host", "first_rank", "last_rank").iter_rows()]
