"""One self-contained HTML file: inline CSS, plotly.js inlined, each figure's JSON in the page. It opens offline in
any browser, with no server and no request: a Content-Security-Policy forbids every fetch, and nothing is linked.

Safe to open whatever a trace holds: every text goes through :func:`esc` (html.escape), figure JSON sits in
``<script type="application/json">`` with ``<``, ``>``, ``&`` and U+2028/2029 as JSON escapes (no ``</script>``
can close it), and plotly's own text markup is tamed: in a figure's strings only the tags commprof writes itself
(``<br>``, ``<b>``, ``<i>``, ``<extra>``) stay tags, any other ``<`` reads as the character (:func:`tame`).
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

import commprof

# no fetch, no frame, no form, no base: scripts and styles only inline; images only from data: (plotly's modebar
# icons are inline SVG; its "download png" makes a data: URL)
CSP = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
       "img-src data: blob:; font-src data:; connect-src 'none'; base-uri 'none'; form-action 'none'")
PLOTLY_CONFIG = {"displaylogo": False, "responsive": True, "showLink": False, "showSendToCloud": False,
                 "showEditInChartStudio": False, "modeBarButtonsToRemove": ["sendDataToCloud"]}
_OUR_TAGS = re.compile(r"<(/?(?:br|b|i|extra)\s*/?)>", re.IGNORECASE)


def esc(text: Any) -> str:
    """Any value as HTML text (quotes too: safe in attributes)."""
    return html.escape("" if text is None else str(text), quote=True)


def tame(value: Any) -> Any:
    """A figure's JSON with every ``<`` that does not open one of our own tags written as ``&lt;`` (plotly shows
    the character): a trace's ``<a href=...>`` or ``<span style=...>`` is text, never markup."""
    if isinstance(value, str):
        if "<" not in value:
            return value
        parts = _OUR_TAGS.split(value)
        # split keeps the captured tag names at odd positions
        return "".join(f"<{p}>" if i % 2 else p.replace("<", "&lt;") for i, p in enumerate(parts))
    if isinstance(value, dict):
        return {k: tame(v) for k, v in value.items()}
    if isinstance(value, list):
        return [tame(v) for v in value]
    return value


def script_json(value: Any) -> str:
    """JSON to place inside ``<script type="application/json">``: nothing in it can end the element or the line."""
    text = json.dumps(value, separators=(",", ":"), allow_nan=False)
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def figure_payload(fig: Any) -> dict[str, Any]:
    """A plotly figure as the page draws it: WebGL traces as SVG (a canvas is not there in every browser, and a
    report's one step is small), the template inlined, its strings tamed, NaN as null."""
    doc = json.loads(fig.to_json())
    for trace in doc.get("data", []):
        if trace.get("type") == "scattergl":
            trace["type"] = "scatter"
    tamed: dict[str, Any] = tame(doc)
    return tamed


def figure_block(key: str, fig: Any, caption: str = "") -> str:
    """A figure's place in the page and its data; drawn by the page's one script."""
    ident = f"figure-{re.sub(r'[^a-z0-9_-]', '-', key.lower())}"
    return (f'<figure class="picture" data-picture="{esc(key)}"><div class="plot" id="{ident}"></div>'
            f'<script type="application/json" class="figure-data" data-target="{ident}">'
            f"{script_json(figure_payload(fig))}</script>"
            + (f"<figcaption>{esc(caption)}</figcaption>" if caption else "") + "</figure>")


def table(title: str, columns: Sequence[str], rows: Iterable[Sequence[Any]], key: str = "") -> str:
    """A table as the text report has it (title, columns, rows of already-formatted cells); cells after the
    named ones right-aligned."""
    head = "".join(f"<th>{esc(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in rows)
    data = f' data-table="{esc(key)}"' if key else ""
    return (f'<section class="table"{data}><h3>{esc(title)}</h3><div class="scroll"><table><thead><tr>{head}</tr>'
            f"</thead><tbody>{body}</tbody></table></div></section>")


def plotly_js() -> str:
    from plotly.offline import get_plotlyjs

    js: str = get_plotlyjs()
    return js.replace("</script", "<\\/script")  # it has none; kept so no future build can end the element


DRAW = """
(function () {
  var config = %s;
  var drawn = 0, failed = [];
  document.querySelectorAll('script.figure-data').forEach(function (node) {
    var target = document.getElementById(node.getAttribute('data-target'));
    try {
      var fig = JSON.parse(node.textContent);
      var layout = fig.layout || {};
      layout.autosize = true;
      Plotly.newPlot(target, fig.data || [], layout, config);
      drawn += 1;
    } catch (err) {
      failed.push(node.getAttribute('data-target'));
      target.textContent = 'This figure could not be drawn: ' + err;
    }
  });
  document.body.setAttribute('data-figures-drawn', String(drawn));
  document.body.setAttribute('data-figures-failed', failed.join(' '));
})();
"""

STYLE = """
:root { --ink: #1f2933; --muted: #52606d; --line: #d9e2ec; --bg: #f5f7fa; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--ink); }
header { background: #102a43; color: #fff; padding: 18px 28px; }
header h1 { margin: 0 0 4px; font-size: 20px; font-weight: 600; }
header p { margin: 2px 0; color: #d9e2ec; overflow-wrap: anywhere; }
main { padding: 8px 28px 40px; max-width: 1500px; }
h2 { font-size: 17px; margin: 28px 0 10px; border-bottom: 1px solid var(--line); padding-bottom: 4px; }
h3 { font-size: 14px; margin: 18px 0 6px; }
.headline { font-size: 15px; background: var(--bg); padding: 10px 14px; border-radius: 6px; }
.finding { border: 1px solid var(--line); border-left: 6px solid #546e7a; border-radius: 6px; padding: 10px 14px;
  margin: 10px 0; }
.finding.high { border-left-color: #b71c1c; } .finding.medium { border-left-color: #e65100; }
.finding.low { border-left-color: #827717; }
.finding h3 { margin: 0 0 6px; font-size: 15px; }
.finding dl { display: grid; grid-template-columns: 6em 1fr; gap: 2px 10px; margin: 0; }
.finding dt { color: var(--muted); } .finding dd { margin: 0; overflow-wrap: anywhere; }
.badge { display: inline-block; padding: 0 7px; border-radius: 9px; color: #fff; font-size: 12px;
  background: #546e7a; margin-right: 6px; text-transform: uppercase; }
.badge.high { background: #b71c1c; } .badge.medium { background: #e65100; } .badge.low { background: #827717; }
.badge.pass { background: #2e7d32; } .badge.fail { background: #b71c1c; } .badge.skip { background: #78909c; }
.numbers { font-size: 12px; color: var(--muted); }
.note { color: var(--muted); }
.warning { color: #8d6e00; overflow-wrap: anywhere; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; font-size: 13px; font-variant-numeric: tabular-nums; }
th, td { padding: 3px 9px; border-bottom: 1px solid var(--line); text-align: right; white-space: nowrap; }
th { background: var(--bg); }
td:first-child, th:first-child { text-align: left; }
figure.picture { margin: 14px 0 24px; border: 1px solid var(--line); border-radius: 6px; padding: 6px; }
figcaption { color: var(--muted); padding: 4px 8px 2px; }
.side { display: grid; grid-template-columns: 1fr 1fr; gap: 18px; }
.side > div { min-width: 0; }
footer { color: var(--muted); padding: 10px 28px 30px; font-size: 12px; }
"""


def page(title: str, subtitle: Sequence[str], body: str) -> str:
    """The whole file: ``body`` holds figure blocks; one script draws them all once plotly.js is in."""
    subtitle_html = "".join(f"<p>{esc(line)}</p>" for line in subtitle)
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f'<meta http-equiv="Content-Security-Policy" content="{esc(CSP)}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<meta name="generator" content="commprof {esc(commprof.__version__)}">'
        f"<title>{esc(title)}</title><style>{STYLE}</style></head><body>"
        f"<header><h1>{esc(title)}</h1>{subtitle_html}</header><main>{body}</main>"
        f"<footer>Written by commprof {esc(commprof.__version__)}: one file, no server, no network. Numbers are "
        "those of the JSON report of the same run (--format json).</footer>"
        f"<script>{plotly_js()}</script><script>{DRAW % json.dumps(PLOTLY_CONFIG)}</script>"
        "</body></html>\n"
    )
