"""The ``analyze``, ``check`` and ``diff`` reports as one HTML file each (``--format html``), and the HTML pieces a
notebook shows (``Analysis._repr_html_``).

Every number is read from the report dict, as the text and Markdown views read it: the findings first (what,
where, saving, fix, evidence), then the pictures (commprof/figures/pictures.py), then the tables of
``analysis_text.sections`` (the text report's own rows). Pictures are passed in, so this module never opens a run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from commprof.report import analysis_text as text
from commprof.report.findings_text import exposed_lines, saving_text, what_if_lines
from commprof.report.html_page import esc, figure_block, page, table
from commprof.report.other_sources import (
    hang_lines,
    hang_section,
    inspector_section,
    plugin_section,
    ras_lines,
    ras_section,
)

if TYPE_CHECKING:
    from commprof.analyzers.pipeline import Analysis
    from commprof.figures.pictures import Picture

MAX_FINDINGS = 25  # every finding is in --format json; a page of 25 is already long


def pictures_for(report: dict[str, Any], analysis: Analysis | None = None) -> list[Picture]:
    """The report's pictures: from the report dict, and from the run's analysis when there is one."""
    if "ranks" not in report:  # a report without traces (Flight Recorder, Inspector): nothing to draw
        return []
    from commprof.figures.pictures import report_pictures, run_pictures

    return report_pictures(report) + (run_pictures(analysis, report) if analysis is not None else [])


# ---------------------------------------------------------------- pieces
def _where(f: dict[str, Any]) -> str:
    parts = []
    if f.get("ranks"):
        parts.append(f"rank(s) {text.fmt_ranks(f['ranks'])}")
    if f.get("pgs"):
        parts.append("group(s) " + ", ".join(map(str, f["pgs"][:12])) + (" …" if len(f["pgs"]) > 12 else ""))
    if f.get("dimension"):
        parts.append(f"dimension {f['dimension']}")
    if f.get("tier"):
        parts.append(f"tier {f['tier']}")
    if f.get("steps"):
        parts.append(f"step(s) {text.fmt_ranks(f['steps'])}")
    return "; ".join(parts) or "the whole run"


def finding_html(f: dict[str, Any], step_ns: float | None) -> str:
    severity = esc(f["severity"])
    numbers = ", ".join(f"{k} = {v:,.6g}" if isinstance(v, (int, float)) else f"{k} = {v}"
                        for k, v in (f.get("numbers") or {}).items())
    rows = [("where", _where(f)), ("saving", saving_text(f, step_ns)),
            ("how", f.get("saving_model") or "-"), ("fix", f["action"]), ("evidence", f["detail"])]
    return (f'<article class="finding {severity}" data-finding="{esc(f["key"])}">'
            f'<h3><span class="badge {severity}">{severity}</span>{esc(f["title"])}</h3><dl>'
            + "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in rows)
            + "</dl>" + (f'<p class="numbers">{esc(numbers)}</p>' if numbers else "") + "</article>")


def findings_html(report: dict[str, Any]) -> str:
    """The findings, each with what, where, saving, fix and evidence; the exposed note and the what-if after."""
    found = report.get("findings") or []
    step = (report.get("totals") or {}).get("step_ns")
    out = ['<section class="findings"><h2>Findings</h2>']
    if not report.get("findings_computed"):
        out.append('<p class="note">Not computed: no analyzed step in this run.</p>')
    elif not found:
        out.append('<p class="note">None: no rule found a problem above noise (docs/findings.md lists the rules).</p>')
    else:
        out.append(f'<p class="note">{len(found)} finding(s), largest estimated saving per step first.</p>')
        out += [finding_html(f, step) for f in found[:MAX_FINDINGS]]
        if len(found) > MAX_FINDINGS:
            out.append(f'<p class="note">{len(found) - MAX_FINDINGS} more in --format json (findings[]).</p>')
    lines = exposed_lines(report)
    if lines:
        out.append('<div class="exposed-note">' + "".join(f"<p>{esc(x.strip())}</p>" for x in lines) + "</div>")
    what_if = what_if_lines(report)
    if what_if:
        out.append('<h3>What-if (an estimate)</h3><div class="what-if">'
                   + "".join(f"<p>{esc(x.strip())}</p>" for x in what_if) + "</div>")
    return "".join(out) + "</section>"


def pictures_html(pictures: Sequence[Picture], prefix: str = "") -> str:
    if not pictures:
        return ""
    return ('<section class="pictures"><h2>Pictures</h2>'
            + "".join(figure_block(prefix + p.key, p.figure, p.caption) for p in pictures) + "</section>")


def tables_html(report: dict[str, Any]) -> str:
    """The text report's tables, row for row (analysis_text.sections), then the bandwidth note and warnings."""
    parts = text.sections(report)
    out = ['<section class="tables"><h2>Tables</h2>']
    for title, columns, rows in parts:
        if not rows:
            continue
        if title.startswith("Process groups"):  # as the text report titles it
            title += " (calls: AR all-reduce, AG all-gather, RS reduce-scatter, A2A all-to-all, BC broadcast"
            title += f"; {text.tier_sources(report)})" if text.tier_sources(report) else ")"
        out.append(table(title, columns, rows, key=title.split(" (")[0].split(":")[0]))
    if any(rows and "busbw GB/s" in columns for _, columns, rows in parts):
        out.append(f'<p class="note">{esc(text.bandwidth_note(report))}</p>')
    return "".join(out) + "</section>" + warnings_html(report.get("warnings") or [])


def warnings_html(warnings: Sequence[str]) -> str:
    if not warnings:
        return ""
    return ('<section class="warnings"><h2>Warnings</h2><ul>'
            + "".join(f'<li class="warning">{esc(w)}</li>' for w in warnings) + "</ul></section>")


def headline_html(report: dict[str, Any]) -> str:
    lines = [*hang_lines(report), *ras_lines(report)]
    return (f'<p class="headline">{esc(text.headline(report))}</p>'
            + "".join(f'<p class="warning">{esc(x)}</p>' for x in lines))


def untraced_html(report: dict[str, Any]) -> str:
    """A report of Flight Recorder dumps, NCCL RAS reports or Inspector logs without traces."""
    out = [f'<p class="headline">{esc(x)}</p>' for x in (*hang_lines(report), *ras_lines(report))]
    for title, columns, rows in (hang_section(report), ras_section(report), inspector_section(report),
                                 plugin_section(report)):
        if rows:
            out.append(table(title, columns, rows))
    out += [f'<p class="note">not available from these sources: {esc(w)}</p>' for w in report.get("not_available")
            or []]
    return "".join(out) + warnings_html(report.get("warnings") or [])


def analysis_body(report: dict[str, Any], pictures: Sequence[Picture] = (), prefix: str = "") -> str:
    """Findings, headline, pictures, tables: the analyze report's body (check and diff hold it too)."""
    if "ranks" not in report:
        return untraced_html(report)
    return findings_html(report) + headline_html(report) + pictures_html(pictures, prefix) + tables_html(report)


def _subtitle(report: dict[str, Any]) -> list[str]:
    run = report.get("run") or {}
    lines = [f"run: {run.get('path')}", f"written {report.get('generated_at', '')}"]
    if run.get("synthetic"):
        lines.append("a synthetic run: every number known by construction")
    return lines


# ---------------------------------------------------------------- whole pages
def render_analysis(report: dict[str, Any], pictures: Sequence[Picture] = ()) -> str:
    return page("commprof analysis", _subtitle(report), analysis_body(report, pictures))


def render_check(doc: dict[str, Any], pictures: Sequence[Picture] = ()) -> str:
    """The check's verdict and rules first, then the analysis it judged."""
    from commprof.check.render import MARK, headline, value_text

    rows = "".join(
        f'<tr data-rule="{esc(r["name"])}"><td><span class="badge {esc(r["status"])}">{esc(MARK[r["status"]])}</span>'
        f'</td><td>{esc(r["name"])}</td><td>{esc(value_text(r, r["measured"]))}</td>'
        f'<td>{esc(value_text(r, r["allowed"]))}</td><td style="text-align:left">{esc(r["detail"])}</td></tr>'
        for r in doc["rules"])
    rules = ('<section class="rules"><h2>Rules</h2><div class="scroll"><table><thead><tr><th>result</th><th>rule</th>'
             f"<th>measured</th><th>allowed</th><th>detail</th></tr></thead><tbody>{rows}</tbody></table></div>"
             if doc["rules"] else '<section class="rules"><h2>Rules</h2><p class="note">No rules configured: give '
             "thresholds as flags, --rule NAME=VALUE or a commprof.toml.</p>")
    for r in (r for r in doc["rules"] if r["status"] == "fail"):
        shown = r["violations"][:50]
        rules += (f'<h3>{esc(r["name"])}: {esc(r["description"])}</h3><ul>'
                  + "".join(f"<li>{esc(v['message'])}</li>" for v in shown)
                  + (f"<li>… and {len(r['violations']) - 50} more</li>" if len(r["violations"]) > 50 else "")
                  + "</ul>")
    rules += "</section>"
    verdict = f'<p class="headline"><span class="badge {"pass" if doc["passed"] else "fail"}">' \
              f'{"passed" if doc["passed"] else "failed"}</span>{esc(headline(doc))}</p>'
    subtitle = [*_subtitle(doc["report"]), *([f"baseline: {doc['baseline']}"] if doc.get("baseline") else [])]
    return page("commprof check", subtitle, verdict + rules + analysis_body(doc["report"], pictures))


def render_diff(doc: dict[str, Any], a: dict[str, Any], b: dict[str, Any], pictures: Sequence[Picture] = ()) -> str:
    """What changed (the diff's own rows), then the two runs side by side: headline, findings and pictures each."""
    from commprof.report import diff as diff_report

    out = [pictures_html(pictures)]
    current: tuple[str, str] | None = None
    rows: list[list[str]] = []
    title = ""
    for section, subject, cells in diff_report.rows(doc):
        if (section, subject) != current:
            if rows:
                out.append(table(title, ["metric", "A", "B", "change", "change %"], rows, key=title))
            current, rows = (section, subject), []
            title = "Run totals (mean per rank and step)" if section == "totals" else \
                f"{section[:-1].capitalize()} {subject} (per rank and step)"
        rows.append(cells)
    if rows:
        out.append(table(title, ["metric", "A", "B", "change", "change %"], rows, key=title))
    new_gone = [(label, f) for label in ("new", "gone") for f in doc["findings"][label]]
    out.append("<h2>Findings new in B, gone from A</h2>" + ("".join(
        f'<div class="changed" data-change="{esc(label)}"><span class="badge">{esc(label)}</span>'
        + finding_html(f, None) + "</div>" for label, f in new_gone)
        if new_gone else '<p class="note">No findings appeared or went away.</p>'))
    from commprof.figures.pictures import report_pictures

    sides = []
    for name, report in (("A", a), ("B", b)):
        sides.append(f"<div><h2>{name}: {esc(report['run'].get('path'))}</h2>" + headline_html(report)
                     + findings_html(report) + pictures_html(report_pictures(report), prefix=f"{name.lower()}-")
                     + "</div>")
    out.append('<section class="side-by-side"><div class="side">' + "".join(sides) + "</div></section>")
    out.append(warnings_html(doc["warnings"]))
    subtitle = [f"A = {doc['a']['path']}", f"B = {doc['b']['path']}", f"written {doc['generated_at']}"]
    return page("commprof diff", subtitle, "".join(out))
