"""The app factory and its router: ``/run/<key>/<page>?state``, ``/compare?a=&b=``, ``/`` (the runs);
anything else is a message. ``/download/<key>/perfetto.json`` serves the run's Perfetto export.

Runs come only from ``create_app``'s dict (the CLI's paths): a URL selects one by its key and can never
name a file. The router re-renders on a new path only: a page writes its own state into the query string
(``state.py``) without being rebuilt.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote

from dash import Dash, Input, Output, State, dcc, html
from flask import Response

from commprof.dashboard import ids, pages, scale
from commprof.dashboard.cache import RunCache
from commprof.dashboard.memo import Memo
from commprof.dashboard.serve import cache_answers
from commprof.dashboard.state import LOG, parse_query
from commprof.figures.style import fmt_ms, fmt_pct

if TYPE_CHECKING:
    from commprof.analyzers.pipeline import AnalysisSettings
    from commprof.run import Run

CSS = """
body { font-family: system-ui, sans-serif; margin: 0; color: #222; font-size: 14px; }
#nav { background: #263238; padding: 8px 16px; display: flex; gap: 14px; flex-wrap: wrap; align-items: center; }
#nav a { color: #eceff1; text-decoration: none; } #nav a.active { font-weight: bold; text-decoration: underline; }
#nav .brand { color: #80cbc4; font-weight: bold; margin-right: 12px; }
#page { padding: 8px 20px 40px; max-width: 1500px; }
h2 { margin: 10px 0 8px; } h3 { margin: 14px 0 6px; }
.row { display: flex; gap: 16px; flex-wrap: wrap; } .half { flex: 1 1 560px; min-width: 0; }
.card { border: 1px solid #ddd; border-radius: 6px; padding: 8px 12px; flex: 1 1 380px; min-width: 0; }
.facts th { text-align: left; padding-right: 12px; font-weight: 600; vertical-align: top; white-space: nowrap; }
.facts td { overflow-wrap: anywhere; }
.controls { display: flex; gap: 8px; align-items: center; flex-wrap: wrap; margin: 6px 0; }
.muted { color: #555; font-size: 13px; } .callout { background: #fff8e1; padding: 6px 10px; border-radius: 4px; }
.message { background: #ffebee; padding: 12px; border-radius: 6px; white-space: pre-wrap; overflow-wrap: anywhere; }
.message:empty { display: none; }
.headline { display: flex; gap: 12px; flex-wrap: wrap; margin: 6px 0 12px; }
.tile { border: 1px solid #cfd8dc; border-radius: 6px; padding: 8px 14px; flex: 1 1 150px; min-width: 0; }
.tile.wide { flex: 2 1 260px; }
.tile .value { font-size: 24px; font-weight: 600; overflow-wrap: anywhere; }
.tile .label { color: #546e7a; font-size: 12px; text-transform: uppercase; letter-spacing: .03em; }
.tile .sub { color: #555; font-size: 12px; }
table.grid { border-collapse: collapse; font-size: 13px; max-width: 100%; }
table.grid th, table.grid td { border-bottom: 1px solid #e0e0e0; padding: 3px 10px; text-align: right;
  white-space: nowrap; }
table.grid th { background: #eceff1; font-weight: 600; }
table.grid td:first-child, table.grid th:first-child, table.grid td.text, table.grid th.text { text-align: left; }
.scroll { overflow-x: auto; max-width: 100%; }
.finding { border-left: 5px solid #999; padding: 4px 10px; margin: 6px 0; background: #fafafa; }
.finding .title { font-weight: 600; } .finding .links a { margin-right: 12px; }
.badge { display: inline-block; color: white; border-radius: 3px; padding: 0 6px; font-size: 11px; margin-right: 6px; }
a { color: #1565c0; }
.cell-markdown p, .dash-cell-value p { margin: 0; }
"""


PLOTLY_JS = "_dash-component-suites/plotly/package_data/plotly.min.js"  # what dcc.Graph loads (dash 4)


def run_path(key: str, page: str = "overview") -> str:
    return f"/run/{quote(key, safe='')}/{page}"


def _nav(cache: RunCache, key: str | None, page: str | None) -> list[Any]:
    items: list[Any] = [dcc.Link("commprof", href="/", className="brand")]
    if key is not None and key in cache.runs:
        items.append(html.Span(key, style={"color": "#b0bec5"}))
        for name, module in pages.RUN_PAGES.items():
            items.append(dcc.Link(module.TITLE, href=run_path(key, name),
                                  className="active" if name == page else "", id=f"nav-{name}"))
    items.append(dcc.Link("Compare", href="/compare", id="nav-compare",
                          className="active" if page == "compare" else ""))
    items.append(dcc.Link("All runs", href="/", id="nav-runs", className="active" if page == "index" else ""))
    return items


def message_page(title: str, text: str) -> Any:
    return html.Div([html.H2(title), html.Div(text, id=ids.MESSAGE, className="message")])


def index_page(cache: RunCache) -> Any:
    """A line per run: what it is, its headline figures, or why it cannot be shown."""
    head = ["run", "source", "ranks", "hosts", "steps", "mean step", "exposed comm", "overlap", "top finding",
            "status"]
    rows = []
    for key in cache.keys():
        problem = cache.check(key)
        if problem:
            rows.append(html.Tr([html.Td(key), *[html.Td("–") for _ in head[1:-1]],
                                 html.Td(problem, className="text", style={"whiteSpace": "normal"})]))
            continue
        a = cache.analysis(key)
        t = a.totals or {}
        rows.append(html.Tr([
            html.Td(dcc.Link(key, href=run_path(key))), html.Td(a.facts.kind, className="text"),
            html.Td(f"{a.ranks.height}" + (f" of {a.facts.world_size}" if a.facts.world_size else "")),
            html.Td(str(len(a.facts.hosts) or "unknown")), html.Td(str(a.steps_analyzed)),
            html.Td(fmt_ms(t.get("step_ns"))),
            html.Td(f"{fmt_ms(t.get('exposed_comm_ns'))} ({fmt_pct(t.get('exposed_comm_pct_of_step'))})"),
            html.Td(fmt_pct(t.get("overlap_pct"))),
            html.Td(_top_finding(cache, key), className="text", style={"whiteSpace": "normal"}),
            html.Td(f"{len(a.warnings)} warning(s)" if a.warnings else "ok", className="text"),
        ]))
    table = html.Table([html.Thead(html.Tr([html.Th(h, className="text" if h in ("run", "source", "top finding",
                                                                                   "status")
                                                    else "") for h in head])), html.Tbody(rows)],
                       className="grid", id=ids.INDEX_TABLE)
    more = [dcc.Link("compare two runs", href="/compare")] if len(cache.keys()) > 1 else []
    return html.Div([html.H2("Runs"), html.P("Times are means per rank and step.", className="muted"),
                     html.Div(table, className="scroll"), html.P(more)])


def _top_finding(cache: RunCache, key: str) -> str:
    found = cache.findings(key)
    if not found:
        return "none" if cache.findings_computed(key) else "–"
    first = found[0]
    return f"[{getattr(first, 'severity', '?')}] {getattr(first, 'title', '')}" + (
        f" (+{len(found) - 1} more)" if len(found) > 1 else "")


def route(cache: RunCache, pathname: str | None, search: str | None = None) -> tuple[Any, Any]:
    """(page, nav) for a URL."""
    path = (pathname if isinstance(pathname, str) else "/").rstrip("/") or "/"
    parts = [unquote(p) for p in path.split("/") if p]
    query = parse_query(search)
    if path == "/":
        if len(cache.keys()) == 1 and not cache.check(cache.keys()[0]):
            parts = ["run", cache.keys()[0], "overview"]
        else:
            return index_page(cache), _nav(cache, None, "index")
    if parts == ["compare"]:
        return pages.compare.layout(cache, query.get("a"), query.get("b")), _nav(cache, None, "compare")
    if len(parts) in (2, 3) and parts[0] == "run":
        key, page = parts[1], (parts[2] if len(parts) == 3 else "overview")
        problem = cache.check(key)
        if problem is not None:
            return message_page("Cannot show this run", problem), _nav(cache, None, None)
        module = pages.RUN_PAGES.get(page)
        if module is None:
            return message_page("No such page", f"Pages: {', '.join(pages.RUN_PAGES)}."), _nav(cache, key, None)
        try:
            body = module.layout(cache, key, query)
        except Exception as err:  # noqa: BLE001 - a broken page is a message, never a traceback
            LOG.warning("page %s of %s failed", page, key, exc_info=True)
            return message_page(f"{module.TITLE} failed for {key!r}", f"{type(err).__name__}: {err}"), _nav(
                cache, key, page)
        return html.Div([dcc.Store(id=ids.RUN_KEY, data=key), body]), _nav(cache, key, page)
    return message_page("Not found", f"Nothing at {str(pathname)[:200]!r}."), _nav(cache, None, None)


def _register_download(app: Dash, cache: RunCache) -> None:
    @app.server.route("/download/<key>/perfetto.json")
    def perfetto(key: str) -> Response:
        problem = cache.check(key)
        if problem is not None:
            return Response(problem + "\n", status=404, mimetype="text/plain")
        try:
            body = cache.perfetto(key)
        except Exception as err:  # noqa: BLE001 - a failed export is a message, never a traceback
            LOG.warning("perfetto export of %s failed", key, exc_info=True)
            return Response(f"the export failed: {type(err).__name__}: {err}\n", status=500, mimetype="text/plain")
        name = "".join(c if c.isalnum() or c in "-_." else "_" for c in key) or "run"
        return Response(body, mimetype="application/json",
                        headers={"Content-Disposition": f'attachment; filename="{name}.perfetto.json"'})


def _preload(app: Dash) -> str:
    """plotly.js (4.8 MB) is fetched by the first dcc.Graph only after the page's callback has answered; a
    preload fetches it beside Dash's own bundles from the start (the same URL, so the graph's load finds it)."""
    url = app.config.requests_pathname_prefix + PLOTLY_JS
    return f'<link rel="preload" href="{url}" as="script">'


def create_app(runs: dict[str, Run], cache: RunCache | None = None, settings: AnalysisSettings | None = None
               ) -> Dash:
    """A Dash app serving exactly these runs (key -> opened run)."""
    cache = cache or RunCache(runs, settings)
    app = Dash(__name__, title="commprof", suppress_callback_exceptions=True, update_title=None,
               assets_ignore=".*")
    app.index_string = app.index_string.replace("{%css%}", "{%css%}<style>" + CSS + "</style>" + _preload(app))
    app.layout = html.Div([dcc.Location(id=ids.URL, refresh="callback-nav"), html.Nav(id=ids.NAV),
                           html.Main(id=ids.PAGE)])

    pages_built: Memo[tuple[Any, Any]] = Memo(32)  # few: the answer cache keeps the serialized pages too

    def built(pathname: Any, search: Any) -> tuple[Any, Any]:
        """A URL's page, built once (the runs are fixed: a URL always shows the same page)."""
        where = (pathname if isinstance(pathname, str) else None, search if isinstance(search, str) else None)
        return pages_built.get(where, lambda: route(cache, *where))

    @app.callback(Output(ids.PAGE, "children"), Output(ids.NAV, "children"),
                  Input(ids.URL, "pathname"), State(ids.URL, "search"))
    def _route(pathname: Any, search: Any) -> tuple[Any, Any]:
        try:
            return built(pathname, search)
        except Exception as err:  # noqa: BLE001 - never a 500
            LOG.warning("routing %r failed", pathname, exc_info=True)
            return message_page("This page failed", f"{type(err).__name__}: {err}"), []

    for module in pages.ALL:
        module.register(app, cache)
    _register_download(app, cache)
    app.commprof_answers = cache_answers(app)  # type: ignore[attr-defined]  # one computation per view state
    app.commprof_cache = cache  # type: ignore[attr-defined]  # tests and the benchmark read it
    def warm_pages(key: str) -> None:
        """Each run's overview built before anyone asks (warm_in_background), so a first visit only draws;
        past 256 ranks the skew and topology too, whose first build then reads the analysis' per-host and
        per-group tables (~1.5 s each at 16,384 ranks)."""
        built(run_path(key), "")
        if scale.at_scale(cache, key):
            for page in ("skew", "topology"):
                built(run_path(key, page), "")

    app.commprof_warm_page = warm_pages  # type: ignore[attr-defined]
    return app
