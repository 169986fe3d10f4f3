"""The app factory and its router: ``/run/<key>/<page>``, ``/compare?a=&b=``; anything else is a message.

Runs come only from ``create_app``'s dict (the CLI's paths): a URL selects one by its key and can never
name a file.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, quote, unquote

from dash import Dash, Input, Output, dcc, html

from commprof.dashboard import ids, pages
from commprof.dashboard.cache import RunCache

if TYPE_CHECKING:
    from commprof.run import Run

CSS = """
body { font-family: system-ui, sans-serif; margin: 0; color: #222; }
#nav { background: #263238; padding: 8px 16px; display: flex; gap: 14px; flex-wrap: wrap; align-items: center; }
#nav a { color: #eceff1; text-decoration: none; } #nav a.active { font-weight: bold; text-decoration: underline; }
#nav .brand { color: #80cbc4; font-weight: bold; margin-right: 12px; }
#page { padding: 8px 20px; }
.row { display: flex; gap: 16px; flex-wrap: wrap; } .half { flex: 1 1 480px; min-width: 420px; }
.card { border: 1px solid #ddd; border-radius: 6px; padding: 8px 12px; flex: 1 1 380px; }
.facts th { text-align: left; padding-right: 12px; font-weight: 600; vertical-align: top; }
.controls { display: flex; gap: 8px; align-items: center; flex-wrap: wrap; margin: 6px 0; }
.muted { color: #666; font-size: 13px; } .callout { background: #fff8e1; padding: 6px 10px; border-radius: 4px; }
.message { background: #ffebee; padding: 12px; border-radius: 6px; white-space: pre-wrap; }
"""


def run_path(key: str, page: str = "overview") -> str:
    return f"/run/{quote(key, safe='')}/{page}"


def _nav(cache: RunCache, key: str | None, page: str | None) -> list[Any]:
    items: list[Any] = [html.Span("commprof", className="brand")]
    if key is not None and key in cache.runs:
        for name, module in pages.RUN_PAGES.items():
            items.append(dcc.Link(module.TITLE, href=run_path(key, name),
                                  className="active" if name == page else "", id=f"nav-{name}"))
    items.append(dcc.Link("Compare", href="/compare", id="nav-compare",
                          className="active" if page == "compare" else ""))
    others = [k for k in cache.keys() if k != key]
    if others:
        items.append(html.Span("· runs:", style={"color": "#90a4ae"}))
        items += [dcc.Link(k, href=run_path(k)) for k in others[:12]]
    return items


def message_page(title: str, text: str) -> Any:
    return html.Div([html.H2(title), html.Div(text, id=ids.MESSAGE, className="message")])


def route(cache: RunCache, pathname: str | None, search: str | None = None) -> tuple[Any, Any]:
    """(page, nav) for a URL."""
    path = (pathname or "/").rstrip("/") or "/"
    parts = [unquote(p) for p in path.split("/") if p]
    if path == "/":
        if len(cache.keys()) == 1:
            parts = ["run", cache.keys()[0], "overview"]
        else:
            listing = html.Ul([html.Li(dcc.Link(k, href=run_path(k))) for k in cache.keys()])
            return html.Div([html.H2("Runs"), listing, dcc.Link("compare two runs", href="/compare")]), _nav(
                cache, None, None)
    if parts == ["compare"]:
        query = parse_qs((search or "").lstrip("?"))
        return pages.compare.layout(cache, *(query.get(k, [None])[0] for k in ("a", "b"))), _nav(
            cache, None, "compare")
    if len(parts) in (2, 3) and parts[0] == "run":
        key, page = parts[1], (parts[2] if len(parts) == 3 else "overview")
        problem = cache.check(key)
        if problem is not None:
            return message_page("Cannot show this run", problem), _nav(cache, None, None)
        module = pages.RUN_PAGES.get(page)
        if module is None:
            return message_page("No such page", f"Pages: {', '.join(pages.RUN_PAGES)}."), _nav(cache, key, None)
        try:
            body = module.layout(cache, key)
        except Exception as err:  # noqa: BLE001 - a broken page is a message, never a traceback
            return message_page(f"{module.TITLE} failed for {key!r}", f"{type(err).__name__}: {err}"), _nav(
                cache, key, page)
        return html.Div([dcc.Store(id=ids.RUN_KEY, data=key), body]), _nav(cache, key, page)
    return message_page("Not found", f"Nothing at {pathname!r}."), _nav(cache, None, None)


def create_app(runs: dict[str, Run], cache: RunCache | None = None) -> Dash:
    """A Dash app serving exactly these runs (key -> opened run)."""
    cache = cache or RunCache(runs)
    app = Dash(__name__, title="commprof", suppress_callback_exceptions=True, update_title=None,
               assets_ignore=".*")
    app.index_string = app.index_string.replace("{%css%}", "{%css%}<style>" + CSS + "</style>")
    app.layout = html.Div([dcc.Location(id=ids.URL), html.Nav(id=ids.NAV), html.Main(id=ids.PAGE)])

    @app.callback(Output(ids.PAGE, "children"), Output(ids.NAV, "children"),
                  Input(ids.URL, "pathname"), Input(ids.URL, "search"))
    def _route(pathname: str | None, search: str | None) -> tuple[Any, Any]:
        return route(cache, pathname, search)

    for module in pages.ALL:
        module.register(app, cache)
    app.commprof_cache = cache  # type: ignore[attr-defined]  # tests and the benchmark read it
    return app
