"""Overview: the headline, the findings with links to their evidence, the CLI's dimension × tier table,
the step-time breakdown per rank and comm per dimension and tier (click for the filtered views). Past 256
ranks (dashboard/scale.py) also the worst hosts (the analysis' host summary) and the most exposed process
groups (the CLI's rows), each with how many more there are."""

from __future__ import annotations

from typing import Any

from dash import Dash, Input, Output, State, dcc, html, no_update

from commprof.dashboard import ids, scale
from commprof.dashboard.cache import RunCache
from commprof.dashboard.state import as_key, as_ranks, guarded, href
from commprof.figures import charts as figures
from commprof.figures.style import SEVERITY_COLOURS, fmt_ms, fmt_pct
from commprof.report import analysis_text
from commprof.report.findings_text import _share  # the CLI's "(x % of the step)"

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


def _tile(label: str, value: str, sub: str, tid: str, wide: bool = False) -> Any:
    return html.Div([html.Div(label, className="label"), html.Div(value, className="value"),
                     html.Div(sub, className="sub")], className="tile wide" if wide else "tile", id=tid)


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
        *_scale_tiles(cache, key),
        _tile("exposed comm", fmt_pct(t.get("exposed_comm_pct_of_step")),
              f"{fmt_ms(exposed)} of the step: comm with no compute running", "headline-exposed"),
        _tile("overlap", fmt_pct(t.get("overlap_pct")), "of comm time hidden behind compute", "headline-overlap"),
        _tile("wait vs transfer", f"{fmt_ms(wait)} / {fmt_ms(transfer)}",
              f"exposed time blocked on late ranks / moving data{' · ' + wait_share if wait_share else ''}",
              "headline-wait", wide=True),
    ], className="headline", id=ids.OVERVIEW_HEADLINE)


def _scale_tiles(cache: RunCache, key: str) -> list[Any]:
    """The rank the others wait for and the group with the most exposed comm: where a run of any size
    starts to be read (the analysis' stragglers table and the CLI's process-group rows)."""
    _, worst = cache.skew(key)
    groups = cache.report(key).get("process_groups") or []
    top = max(groups, key=lambda g: (g.get("exposed_ns_per_step") or 0, -len(str(g["pg"]))), default=None)
    tiles = []
    judged = next((f for f in cache.findings(key) if getattr(f, "id", "") == "straggler" and f.ranks), None)
    if judged is not None:  # the straggler rule's verdict, not merely the rank waited on most
        late = judged.numbers.get("late_ns_per_step")
        tiles.append(_tile("straggler", f"rank {judged.ranks[0]}",
                           (f"arrives {fmt_ms(late)} per step after its peers" if late else judged.title)
                           + f" · {judged.severity}", ids.OVERVIEW_STRAGGLER))
    elif worst:
        tiles.append(_tile("most waited on", f"rank {worst['rank']}",
                           f"the others wait {fmt_ms(worst['caused_wait_ns_per_step'])} per step for it (no "
                           "straggler finding: its lateness may be the schedule's)", ids.OVERVIEW_STRAGGLER))
    if top and top.get("exposed_ns_per_step"):
        tiles.append(_tile("worst group", f"{top['dimension']} · pg {top['pg']}",
                           f"{fmt_ms(top['exposed_ns_per_step'])} exposed per rank-step · {top['tier']} · "
                           f"{len(top.get('ranks') or [])} ranks", ids.OVERVIEW_WORST_GROUP))
    return tiles


def spread(cache: RunCache, key: str) -> Any:
    """Past the CLI's 16 rank rows: the CLI's spread over the ranks (min, p10, median, p90, max, where)."""
    rows = analysis_text.distribution_rows(cache.report(key))
    if not rows:
        return None
    head = html.Tr([html.Th(c, className="text" if i == 0 else "") for i, c in enumerate(analysis_text.DIST_COLUMNS)])
    body = [html.Tr([html.Td(c) for c in r]) for r in rows]
    return html.Div([html.H3(f"Spread over the {len(cache.report(key)['ranks']):,} ranks (ms per step)"),
                     html.Div(html.Table([html.Thead(head), html.Tbody(body)], className="grid"), className="scroll")],
                    id=ids.OVERVIEW_SPREAD)


def breakdown(cache: RunCache, key: str) -> Any:
    """The step split per rank; past the CLI's 16 rows, the ranks the CLI shows (each figure's min and max,
    then the most exposed) and the straggler, so that a bar is a rank and not a pixel."""
    a = cache.analysis(key)
    summary = a.rank_summary
    report = cache.report(key)
    if summary.height > analysis_text.MAX_RANK_ROWS:
        _, worst = cache.skew(key)
        keep = {int(r["rank"]) for r in analysis_text.shown_ranks(report)} | ({int(worst["rank"])} if worst else set())
        summary = summary.filter(summary["rank"].is_in(sorted(keep)))
    title = (None if summary.height == a.rank_summary.height else
             f"{summary.height} of {a.rank_summary.height:,} ranks: each figure's min and max, the straggler, then "
             "the most exposed (click a rank for its timeline)")
    return dcc.Graph(id=ids.OVERVIEW_BREAKDOWN, figure=figures.breakdown_figure(summary, title),
                     config={"displaylogo": False})


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


def exposed_note_block(cache: RunCache, key: str) -> Any:
    """The analysis' note on where a large exposed time goes when no finding above info names a cause (the
    CLI's "Where the exposed time goes"): never a silent overview."""
    note = getattr(cache.analysis(key), "exposed_note", None)
    if note is None:
        return None
    return html.Div([html.Div([html.Span("where the exposed time goes", className="badge",
                                         style={"background": SEVERITY_COLOURS.get("medium", "#546e7a")}),
                               html.Span(note.headline, className="title")]),
                     html.Div(["Where: ", note.detail]), html.Div(["Look at: ", note.look_at])],
                    className="finding", id=ids.OVERVIEW_EXPOSED_NOTE,
                    style={"borderLeftColor": SEVERITY_COLOURS.get("medium", "#999")})


def findings_section(cache: RunCache, key: str) -> Any:
    found = cache.findings(key)
    note = exposed_note_block(cache, key)
    if not found:
        text = ("No findings: no rule names a cause." if note is not None else
                "No findings: nothing in this run costs enough to report. The table below says where comm time goes."
                if cache.findings_computed(key) else
                "This analysis lists no findings. Start from the exposed time by dimension and tier below, and the "
                "skew page for late ranks.")
        return html.Div([html.P(text, className="muted"), note], id=ids.OVERVIEW_FINDINGS)
    items = []
    step = (cache.analysis(key).totals or {}).get("step_ns")
    for f in found[:MAX_FINDINGS]:
        severity = str(getattr(f, "severity", "info"))
        saving = int(getattr(f, "saving_ns_per_step", 0) or 0)
        model = str(getattr(f, "saving_model", "") or "")
        items.append(html.Div([
            html.Div([html.Span(severity, className="badge",
                                style={"background": SEVERITY_COLOURS.get(severity, "#546e7a")}),
                      html.Span(str(getattr(f, "title", "")), className="title"),
                      html.Span(f" — could save ~{fmt_ms(saving)} per step{_share(saving, step)}"
                                if saving > 0 else "", title=model)]),
            html.Div(str(getattr(f, "detail", ""))),
            html.Div(["What to change: ", str(getattr(f, "action", ""))]) if getattr(f, "action", "") else None,
            html.Div(evidence_links(cache, key, f), className="links"),
        ], className="finding", style={"borderLeftColor": SEVERITY_COLOURS.get(severity, "#999")},
            **{"data-finding": str(getattr(f, "key", ""))}))
    more = len(found) - MAX_FINDINGS
    if more > 0:
        items.append(html.P(f"… and {more} more (commprof analyze lists them all).", className="muted"))
    if note is not None:
        items.append(note)
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


def windows_section(cache: RunCache, key: str) -> Any:
    """record --every/--on-demand: how the windows change (the CLI's Windows table, row for row, and their
    trend); nothing for a run of one window."""
    report = cache.report(key)
    rows = analysis_text.window_rows(report)
    if not rows:
        return None
    head = html.Tr([html.Th(c, className="text" if c in ("window", "by") or c.startswith("findings") else "")
                    for c in analysis_text.WINDOW_COLUMNS])
    body = [html.Tr([html.Td(c, className="text" if i in (0, 2, 11) else "") for i, c in enumerate(cells)])
            for cells in rows]
    return html.Div([html.H3(analysis_text.window_title(report)),
                     dcc.Graph(id=ids.OVERVIEW_WINDOWS_GRAPH, config={"displaylogo": False},
                               figure=figures.window_trend_figure((report.get("windows") or {}).get("rows") or [])),
                     html.Div(html.Table([html.Thead(head), html.Tbody(body)], className="grid"), className="scroll")],
                    id=ids.OVERVIEW_WINDOWS)


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
        windows_section(cache, key),
        html.H3("Findings"),
        findings_section(cache, key),
        dimension_tier_table(cache, key),
        spread(cache, key),
        breakdown(cache, key),
        *([scale.hosts_table(cache, key, ids.OVERVIEW_HOSTS), scale.groups_table(cache, key, ids.OVERVIEW_GROUPS)]
          if scale.at_scale(cache, key) else []),
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
