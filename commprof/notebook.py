"""What a notebook shows of a run and its analysis: Jupyter calls ``Run._repr_html_`` and ``Analysis._repr_html_``,
which hand over to this module, so that neither the run (ingest) nor the analysis (analyzers) knows any HTML. The
pieces are the HTML report's own (commprof/report/html_report.py) and their numbers the JSON report's; the
pictures are plotly figures, shown by the notebook's plotly renderer::

    import commprof
    run = commprof.open_run("runs/exp1")
    run                                   # where it is: ranks, hosts, process groups
    a = commprof.analyze(run)
    a                                     # the findings, the headline and the text report's tables
    a.findings                            # polars: one row per finding (docs/notebook.md has the columns)
    commprof.notebook.figures(a)["timeline"]   # any picture of the HTML report, as a plotly figure
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from commprof.analyzers.pipeline import Analysis
    from commprof.run import Run

# the report page's look for its pieces, scoped to them: a notebook's own styles stay as they are
STYLE = """<style>
.commprof-report { font-family: system-ui, sans-serif; }
.commprof-report .finding { border: 1px solid #d9e2ec; border-left: 6px solid #546e7a; border-radius: 6px;
  padding: 8px 12px; margin: 8px 0; }
.commprof-report .finding.high { border-left-color: #b71c1c; }
.commprof-report .finding.medium { border-left-color: #e65100; }
.commprof-report .finding.low { border-left-color: #827717; }
.commprof-report .finding dl { display: grid; grid-template-columns: 6em 1fr; gap: 2px 10px; margin: 0; }
.commprof-report .finding dd { margin: 0; }
.commprof-report .badge { display: inline-block; padding: 0 7px; border-radius: 9px; color: #fff; font-size: 12px;
  background: #546e7a; margin-right: 6px; text-transform: uppercase; }
.commprof-report .badge.high { background: #b71c1c; } .commprof-report .badge.medium { background: #e65100; }
.commprof-report .badge.low { background: #827717; }
.commprof-report .numbers, .commprof-report .note { color: #52606d; font-size: 12px; }
.commprof-report .warning { color: #8d6e00; }
.commprof-report td, .commprof-report th { text-align: right; white-space: nowrap; }
</style>"""


def report(analysis: Analysis) -> dict[str, Any]:
    """The analyze report of the analysis (the dict ``--format json`` writes), made once per analysis."""
    from commprof.report import analysis_json

    cached: dict[str, Any] | None = analysis.__dict__.get("_notebook_report")
    if cached is None:
        cached = analysis_json.build(analysis)
        analysis.__dict__["_notebook_report"] = cached  # a frozen dataclass: kept beside its cached properties
    return cached


def analysis_html(analysis: Analysis) -> str:
    """The findings, the headline and the tables of the HTML report."""
    from commprof.report import html_report

    doc = report(analysis)
    return (f'{STYLE}<div class="commprof-report">{html_report.findings_html(doc)}{html_report.headline_html(doc)}'
            f"{html_report.tables_html(doc)}</div>")


def figures(analysis: Analysis) -> dict[str, go.Figure]:
    """The HTML report's pictures by name (breakdown, dimension_tier, timeline, skew, topology) as plotly figures."""
    from commprof.report.html_report import pictures_for

    return {p.key: p.figure for p in pictures_for(report(analysis), analysis)}


def run_html(run: Run) -> str:
    """The run's path, its ranks and hosts, and its process groups (before any analysis)."""
    from commprof.report.html_page import esc, table

    ranks = run.ranks
    hosts = sorted({str(h) for h in ranks["host"].drop_nulls().to_list()}) if "host" in ranks.columns else []
    groups = run.process_groups
    rows = [[str(g.get("pg")), str(g.get("desc") or "-"), str(g.get("size") or "?"), str(g.get("backend") or "?")]
            for g in groups.head(20).iter_rows(named=True)]
    head = (f"<p><b>commprof run</b> {esc(run.source.label)}: {ranks.height} rank(s) on {len(hosts)} host(s)"
            f"{' (' + esc(', '.join(hosts[:8])) + (' …' if len(hosts) > 8 else '') + ')' if hosts else ''}, "
            f"{groups.height} process group(s), world size {esc(run.world_size or 'unknown')}.</p>")
    title = "Process groups" + (f" (20 of {groups.height})" if groups.height > 20 else "")
    return (f'{STYLE}<div class="commprof-report">{head}'
            + (table(title, ["pg", "desc", "size", "backend"], rows) if rows else "") + "</div>")
