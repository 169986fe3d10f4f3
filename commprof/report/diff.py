"""What changed between two runs, from their analyze reports: step time and its parts, exposed and
overlapped comm, bytes and busbw per dimension and per tier, findings that appeared or went away.

Per-dimension and per-tier figures are the reports' own ``dimensions`` and ``tiers`` rows (means per rank
and step over the whole run), so runs of different lengths compare and nothing is recomputed here.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from commprof.report.analysis_json import json_safe
from commprof.vocab import UNKNOWN

FORMAT = "commprof-diff"
SCHEMA_VERSION = 1

TOTALS = ("step_ns", "compute_ns", "overlapped_comm_ns", "exposed_comm_ns", "exposed_wait_ns", "exposed_transfer_ns",
          "memory_ns", "idle_ns",
          "overlap_pct", "exposed_comm_pct_of_step")
GROUP_METRICS = ("exposed_ns_per_step", "exposed_wait_ns_per_step", "exposed_transfer_ns_per_step",
                 "overlapped_ns_per_step", "comm_ns_per_step", "bytes_per_step", "busbw_gbps")


def _change(a: float | None, b: float | None) -> dict[str, float | None]:
    delta = None if a is None or b is None else b - a
    pct = None if delta is None or not a else 100.0 * delta / a
    return {"a": a, "b": b, "delta": delta, "delta_pct": pct}


def _by(report: dict[str, Any], key: str) -> dict[str, dict[str, float | None]]:
    """The report's per-dimension (``dimensions``) or per-tier (``tiers``) rows, by name."""
    section = "dimensions" if key == "dimension" else "tiers"
    return {str(row.get(key) or UNKNOWN): {m: row.get(m) for m in GROUP_METRICS} for row in report.get(section) or []}


def _groups(a: dict[str, Any], b: dict[str, Any], key: str) -> dict[str, dict[str, Any]]:
    left, right = _by(a, key), _by(b, key)
    out = {}
    for name in sorted(set(left) | set(right)):
        la, rb = left.get(name, {}), right.get(name, {})
        out[name] = {m: _change(la.get(m), rb.get(m)) for m in GROUP_METRICS}
    return out


def _finding_key(f: dict[str, Any]) -> str:
    """Findings are the same across runs when their key is (kind and what it is about, not the numbers)."""
    return str(f.get("key") or f.get("id") or f.get("title") or f)




def build(a: dict[str, Any], b: dict[str, Any], a_path: str, b_path: str) -> dict[str, Any]:
    """``a`` and ``b``: analyze reports (the current schema version). B is compared against A."""
    ta, tb = a.get("totals") or {}, b.get("totals") or {}
    fa = {_finding_key(f): f for f in a.get("findings") or []}
    fb = {_finding_key(f): f for f in b.get("findings") or []}
    warnings = []
    if a["run"].get("world_size") != b["run"].get("world_size"):
        warnings.append(f"world sizes differ: {a['run'].get('world_size')} vs {b['run'].get('world_size')}")
    if a["run"].get("hta_compat") != b["run"].get("hta_compat"):
        warnings.append("one report was made with --hta-compat and the other without")
    doc = {
        "format": FORMAT,
        "schema_version": SCHEMA_VERSION,
        "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "a": {"path": a_path, "run": a["run"]},
        "b": {"path": b_path, "run": b["run"]},
        "totals": {k: _change(ta.get(k), tb.get(k)) for k in TOTALS},
        "dimensions": _groups(a, b, "dimension"),
        "tiers": _groups(a, b, "tier"),
        "findings": {"new": [fb[k] for k in fb if k not in fa], "gone": [fa[k] for k in fa if k not in fb]},
        "warnings": warnings,
    }
    cleaned: dict[str, Any] = json_safe(doc)
    return cleaned


def _fmt(metric: str, value: float | None, signed: bool = False) -> str:
    if value is None:
        return "—"
    sign = "+" if signed and value > 0 else ""
    if metric.endswith("_pct") or metric == "overlap_pct" or metric == "exposed_comm_pct_of_step":
        return f"{sign}{value:.1f}" + ("pp" if signed else "%")
    if metric.startswith("bytes"):
        return f"{sign}{value / 1e6:.3f} MB"
    if metric.endswith("gbps"):
        return f"{sign}{value:.3f} GB/s"
    return f"{sign}{value / 1e6:.3f} ms"


def _pct(change: dict[str, Any], metric: str) -> str:
    if metric.endswith("pct") or metric.endswith("pct_of_step") or change["delta_pct"] is None:
        return ""
    return f"{change['delta_pct']:+.1f}%"


def rows(doc: dict[str, Any]) -> list[tuple[str, str, list[str]]]:
    """(section, subject, [metric, A, B, change, change %]) for every line the renderers show."""
    out = []
    for metric, ch in doc["totals"].items():
        out.append(("totals", "run", [metric, _fmt(metric, ch["a"]), _fmt(metric, ch["b"]),
                                      _fmt(metric, ch["delta"], True), _pct(ch, metric)]))
    for section in ("dimensions", "tiers"):
        for name, metrics in doc[section].items():
            for metric, ch in metrics.items():
                out.append((section, name, [metric, _fmt(metric, ch["a"]), _fmt(metric, ch["b"]),
                                            _fmt(metric, ch["delta"], True), _pct(ch, metric)]))
    return out


def _finding_lines(doc: dict[str, Any]) -> list[str]:
    return [
        f"{label}: [{f.get('severity', '?')}] {f.get('title') or f.get('id')}"
        + (f" (saves ~{f['saving_ns_per_step'] / 1e6:.2f} ms/step)" if f.get("saving_ns_per_step") else "")
        for label in ("new", "gone") for f in doc["findings"][label]
    ]


def render_text(doc: dict[str, Any]) -> str:
    header = ["metric", "A", "B", "change", "change %"]
    table = rows(doc)
    widths = [max(len(h), *(len(r[2][i]) for r in table)) for i, h in enumerate(header)] if table else []
    lines = [f"commprof diff: A = {doc['a']['path']}  B = {doc['b']['path']}"]
    current = None
    for section, subject, cells in table:
        if (section, subject) != current:
            current = (section, subject)
            title = "run totals (mean per rank and step)" if section == "totals" else \
                f"{section[:-1]} {subject} (per rank and step)"
            lines += ["", title, "  " + "  ".join(h.rjust(w) if i else h.ljust(w)
                                                  for i, (h, w) in enumerate(zip(header, widths, strict=True)))]
        lines.append("  " + "  ".join(c.rjust(w) if i else c.ljust(w)
                                      for i, (c, w) in enumerate(zip(cells, widths, strict=True))))
    findings = _finding_lines(doc)
    lines += ["", "findings: " + ("none new, none gone" if not findings else "")] + [f"  {f}" for f in findings]
    lines += [f"warning: {w}" for w in doc["warnings"]]
    return "\n".join(lines) + "\n"


def render_markdown(doc: dict[str, Any]) -> str:
    out = ["## commprof diff", "", f"A = `{doc['a']['path']}`, B = `{doc['b']['path']}`", ""]
    current = None
    for section, subject, cells in rows(doc):
        if (section, subject) != current:
            current = (section, subject)
            title = "Run totals (mean per rank and step)" if section == "totals" else \
                f"{section[:-1].capitalize()} `{subject}` (per rank and step)"
            out += ["", f"### {title}", "", "| metric | A | B | change | change % |", "|---|---|---|---|---|"]
        out.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    out += ["", "### Findings", ""]
    findings = _finding_lines(doc)
    out += [f"- {f}" for f in findings] if findings else ["No findings appeared or went away."]
    out += [f"\n> warning: {w}" for w in doc["warnings"]]
    return "\n".join(out) + "\n"
