"""Overview: the headline, the findings with links to their evidence, the CLI's dimension × tier table,
the step-time breakdown per rank and comm per dimension and tier (click for the filtered views)."""

from __future__ import annotations

from typing import Any

from dash import Dash, Input, Output, State, dcc, html, no_update

from commprof.dashboard import figures, ids
from commprof.dashboard.cache import RunCache
from commprof.dashboard.state import as_key, as_ranks, guarded, href
from commprof.dashboard.style import SEVERITY_COLOURS, fmt_ms, fmt_pct
from commprof.report import analysis_text

TITLE = "Overview"
# hovers on the CLI table's short headers (the table itself is the CLI's, column for column)
HEADER_HELP = {
    "dim": "parallel dimension of the process groups (tp, cp, ep, dp, pp; world; unknown)",
    "tier": "the link the groups' traffic crosses (nvlink, pcie, ib, roce, ethernet, loopback; unknown)",
    "groups": "process groups in this row", "ops/step": "collective calls per rank and step",
    "bytes/step": "message bytes per rank and step", "comm ms/step": "time in comm per rank and step",
    "exposed ms/step": "comm time with no compute running, per rank and step",
    "· wait": "of the exposed time: blocked on a later rank", "· transfer": "of the exposed time: moving data",
    "share of step": "exposed time / step time", "busbw GB/s": "bus bandwidth, time-weighted over the calls",
    "eff": "busbw / the tier's peak",
}
MAX_FINDINGS = 10
MAX_LINK_RANKS = 16


def _tile(label: str, value: str, sub: str, tid: str) -> Any:
    return html.Div([html.Div(label, className="label"), html.Div(value, className="value"),
                     html.Div(sub, className="sub")], className="tile", id=tid)


def headline(cache: RunCache, key: str) -> Any:
    """Step time, exposed share, overlap, wait vs transfer: the analysis' totals (means per rank-step)."""
    t = cache.analysis(key).totals or {}
    if not t:
        return html.Div(html.P("No step could be analyzed in this run.", className="callout"), id=ids.OVERVIEW_HEADLINE)
    exposed = t.get("exposed_comm_ns") or 0
    wait, transfer = t.get("exposed_wait_ns"), t.get("exposed_transfer_ns")
    wait_share = f"{100 * wait / exposed:.0f}% of it waiting" if exposed and wait is not None else ""
    return html.Div([
        _tile("step time", fmt_ms(t.get("step_ns")), "mean per rank and step", "headline-step"),
        _tile("exposed comm", fmt_pct(t.get("exposed_comm_pct_of_step")),
              f"{fmt_ms(exposed)} of the step: comm with no compute running", "headline-exposed"),
        _tile("overlap", fmt_pct(t.get("overlap_pct")), "of comm time hidden behind compute", "headline-overlap"),
        _tile("wait vs transfer", f"{fmt_ms(wait)} / {fmt_ms(transfer)}",
              f"exposed time blocked on late ranks / moving data{' · ' + wait_share if wait_share else ''}",
              "headline-wait"),
    ], className="headline", id=ids.OVERVIEW_HEADLINE)


def evidence_links(cache: RunCache, key: str, finding: Any) -> list[Any]:
    """Where a finding's numbers can be seen: the timeline of its ranks and its groups' (at its first
    step), the skew and collectives pages filtered to its groups, dimension and tier."""
    ranks = cache.finding_ranks(key, finding, MAX_LINK_RANKS)
    steps = [int(s) for s in (getattr(finding, "steps", ()) or ())]
    pgs = cache.finding_groups(key, finding)
    dimension, tier = getattr(finding, "dimension", None), getattr(finding, "tier", None)
    links = []
    if ranks or steps:
        links.append(dcc.Link("timeline of " + (f"{len(ranks)} rank(s)" if ranks else "the step")
                              + (f", step {steps[0]}" if steps else ""),
                              href=href(key, "timeline", ranks=ranks or None, step=steps[0] if steps else None)))
    if pgs:
        links.append(dcc.Link("skew of its group", href=href(key, "skew", pg=pgs[0])))
    if pgs or dimension or tier:
        links.append(dcc.Link("its collectives", href=href(key, "collectives", pg=pgs or None,
                                                             dimension=dimension, tier=tier)))
    return links


def findings_section(cache: RunCache, key: str) -> Any:
    found = cache.findings(key)
    if not found:
        text = ("No findings: nothing in this run costs enough to report. The table below says where comm time goes."
                if cache.findings_computed(key) else
                "This analysis lists no findings. Start from the exposed time by dimension and tier below, and the "
                "skew page for late ranks.")
        return html.Div(html.P(text, className="muted"), id=ids.OVERVIEW_FINDINGS)
    items = []
    for f in found[:MAX_FINDINGS]:
        severity = str(getattr(f, "severity", "info"))
        saving = int(getattr(f, "saving_ns_per_step", 0) or 0)
        model = str(getattr(f, "saving_model", "") or "")
        items.append(html.Div([
            html.Div([html.Span(severity, className="badge",
                                style={"background": SEVERITY_COLOURS.get(severity, "#546e7a")}),
                      html.Span(str(getattr(f, "title", "")), className="title"),
                      html.Span(f" — could save ~{fmt_ms(saving)} per step" if saving > 0 else "",
                                title=model)]),
            html.Div(str(getattr(f, "detail", ""))),
            html.Div(["What to change: ", str(getattr(f, "action", ""))]) if getattr(f, "action", "") else None,
            html.Div(evidence_links(cache, key, f), className="links"),
        ], className="finding", style={"borderLeftColor": SEVERITY_COLOURS.get(severity, "#999")},
            **{"data-finding": str(getattr(f, "key", ""))}))
    more = len(found) - MAX_FINDINGS
    if more > 0:
        items.append(html.P(f"… and {more} more (commprof analyze lists them all).", className="muted"))
    return html.Div(items, id=ids.OVERVIEW_FINDINGS)


def dimension_tier_table(cache: RunCache, key: str) -> Any:
    """The CLI's "by dimension and tier" table, row for row; a dimension or tier opens its collectives."""
    report = cache.report(key)
    rows = analysis_text.dimension_tier_rows(report)
    if not rows:
        return html.P("No communication in the analyzed steps.", className="muted", id=ids.OVERVIEW_DIM_TIER)
    body = []
    for cells in rows:
        dim, tier = cells[0], cells[1]
        body.append(html.Tr([
            html.Td(dcc.Link(dim, href=href(key, "collectives", dimension=dim))),
            html.Td(dcc.Link(tier, href=href(key, "collectives", tier=tier)), className="text"),
            *[html.Td(c) for c in cells[2:]],
        ]))
    head = html.Tr([html.Th(c, className="text" if i < 2 else "", title=HEADER_HELP.get(c, "")) for i, c in
                    enumerate(analysis_text.DIM_TIER_COLUMNS)])
    return html.Div([html.H3(analysis_text.DIM_TIER_TITLE),
                     html.Div(html.Table([html.Thead(head), html.Tbody(body)], className="grid"), className="scroll")],
                    id=ids.OVERVIEW_DIM_TIER)


def _settings_text(cache: RunCache) -> str:
    s = cache.settings
    if s is None:
        return "default analysis options"
    parts = []
    if s.layout is not None:
        parts.append("--layout " + ",".join(f"{d}={n}" for d, n in s.layout.sizes.items()))
    if s.network:
        parts.append(f"--network {s.network}")
    if s.gpus_per_node:
        parts.append(f"--gpus-per-node {s.gpus_per_node}")
    if s.peaks:
        parts.append("--peak " + ",".join(f"{t}={v:g}" for t, v in s.peaks.items()))
    if s.hta_compat:
        parts.append("--hta-compat")
    return "analysis options: " + (" ".join(parts) if parts else "defaults")


def layout(cache: RunCache, key: str, query: dict[str, str] | None = None) -> Any:
    a = cache.analysis(key)
    facts = html.Table([html.Tr([html.Th(k), html.Td(v)]) for k, v in cache.facts(key)], className="facts")
    warnings = ([html.H3(f"Warnings ({len(a.warnings)})"),
                 html.Ul([html.Li(w) for w in a.warnings[:20]], className="muted")] if a.warnings else [])
    return html.Div([
        html.Div([html.H2(f"{key} — overview", style={"flex": "1"}),
                  html.A("Download for Perfetto (.json)", href=f"/download/{key}/perfetto.json", id=ids.PERFETTO_LINK,
                         title="An annotated trace of every rank: open it at ui.perfetto.dev (Open trace file)")],
                 className="controls"),
        headline(cache, key),
        html.H3("Findings"),
        findings_section(cache, key),
        dimension_tier_table(cache, key),
        dcc.Graph(id=ids.OVERVIEW_BREAKDOWN, figure=figures.breakdown_figure(a.rank_summary),
                  config={"displaylogo": False}),
        html.Div([
            html.Div(dcc.Graph(id=ids.OVERVIEW_BY_DIMENSION, config={"displaylogo": False},
                               figure=figures.exposed_by_figure(a.by_dimension, "dimension")), className="half"),
            html.Div(dcc.Graph(id=ids.OVERVIEW_BY_TIER, figure=figures.exposed_by_figure(a.by_tier, "tier"),
                               config={"displaylogo": False}), className="half"),
        ], className="row"),
        html.Div([html.Div([html.H3("Run"), facts, html.P(_settings_text(cache), className="muted")], className="card",
                           id=ids.OVERVIEW_FACTS),
                  html.Div(warnings or [html.H3("Warnings"), html.P("none", className="muted")], className="card",
                           id=ids.OVERVIEW_WARNINGS)], className="row"),
    ])


def register(app: Dash, cache: RunCache) -> None:
    """Clicks on the figures open the filtered views (a rank's timeline, a dimension's or tier's collectives)."""

    @app.callback(Output(ids.URL, "href", allow_duplicate=True),
                  Input(ids.OVERVIEW_BREAKDOWN, "clickData"), Input(ids.OVERVIEW_BY_DIMENSION, "clickData"),
                  Input(ids.OVERVIEW_BY_TIER, "clickData"), State(ids.RUN_KEY, "data"), prevent_initial_call=True)
    @guarded(1, None)
    def drill(rank_click: Any, dim_click: Any, tier_click: Any, key: Any) -> Any:
        from dash import ctx

        key = as_key(key, cache.runs)
        click = {ids.OVERVIEW_BREAKDOWN: rank_click, ids.OVERVIEW_BY_DIMENSION: dim_click,
                 ids.OVERVIEW_BY_TIER: tier_click}.get(str(ctx.triggered_id))
        point = _point(click)
        if point is None:
            return no_update
        if ctx.triggered_id == ids.OVERVIEW_BREAKDOWN:
            return href(key, "timeline", ranks=as_ranks([point], cache.analysis(key).ranks["rank"].to_list()))
        by = "dimension" if ctx.triggered_id == ids.OVERVIEW_BY_DIMENSION else "tier"
        return href(key, "collectives", **{by: str(point)})


def _point(click: Any) -> Any:
    """The customdata of a plotly click, or None for anything else."""
    if not isinstance(click, dict) or not isinstance(click.get("points"), list) or not click["points"]:
        return None
    first = click["points"][0]
    value = first.get("customdata") if isinstance(first, dict) else None
    if isinstance(value, list):
        value = value[0] if value else None
    return value if isinstance(value, (int, str)) and not isinstance(value, bool) else None
