"""The targets the bench checks, and the table it prints. Ratios are taken between medians.

CPU time (``cpu s``) covers the whole child: imports, every phase, re-opens. Peak RSS is the child's
own ``ru_maxrss`` plus the largest of its waited-for children's (pool workers): an upper bound on what
the tool held at once, the same rule for every tool.
"""

from __future__ import annotations

import operator
from typing import Any

OVERLAP_TOLERANCE_PP = 0.5
LABELS = {"hta": "HTA 0.5.0", "commprof": "commprof", "floor": "gunzip+orjson"}
PHASES = {
    "hta": ("TraceAnalysis()", "get_comm_comp_overlap"),
    "commprof": ("open_run", "analyze()"),
    "floor": ("gunzip", "orjson.loads"),
}


def peak_rss_mb(median: dict[str, Any]) -> float:
    return float(median["maxrss_self_kb"] + median["maxrss_children_kb"]) / 1024


def _ratio(num: float | None, den: float | None) -> float | None:
    return None if num is None or not den else num / den


def _get(median: dict[str, Any] | None, key: str) -> float | None:
    if not median or "error" in median:
        return None
    value = median.get(key)
    return float(value) if value is not None else None


def _check(
    name: str, value: float | None, op: str, target: float, fmt: str, detail: str = ""
) -> dict[str, Any]:
    compare = operator.ge if op == ">=" else operator.le
    status = "n/a" if value is None else ("PASS" if compare(value, target) else "FAIL")
    shown = "n/a" if value is None else fmt.format(value)
    return {"name": name, "value": value, "shown": shown, "target": f"{op} {fmt.format(target)}",
            "status": status, "detail": detail}


def check_targets(medians: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    hta, cp, floor = medians.get("hta"), medians.get("commprof"), medians.get("floor")
    cp_total = _get(cp, "total_s")
    rss = None
    if _get(hta, "maxrss_self_kb") is not None and _get(cp, "maxrss_self_kb") is not None:
        rss = peak_rss_mb(cp) / peak_rss_mb(hta)  # type: ignore[arg-type]
    speedup = _ratio(_get(hta, "total_s"), cp_total)
    vs_floor = _ratio(cp_total, _get(floor, "total_s"))
    reopen = _ratio(_get(cp, "reopen_read_s"), cp_total)
    checks = [
        _check("speed-up vs HTA (parse + overlap)", speedup, ">=", 8.0, "{:.1f}x",
               "HTA TraceAnalysis()+get_comm_comp_overlap over commprof open_run+analyze()"),
        _check("peak RSS commprof / HTA", rss, "<=", 0.5, "{:.2f}", "self + children, whole child process"),
        _check("commprof / (gunzip + orjson.loads)", vs_floor, "<=", 1.0, "{:.2f}x",
               "first ingest against only decompressing and decoding the JSON"),
        _check("cached re-open + read / first ingest", reopen, "<=", 0.05, "{:.1%}",
               "open_run on the warm cache + run.intervals + run.collectives"),
    ]
    checks.extend(_overlap_checks(hta, cp))
    return checks


def _overlap_checks(hta: dict[str, Any] | None, cp: dict[str, Any] | None) -> list[dict[str, Any]]:
    if _get(hta, "total_s") is None or _get(cp, "total_s") is None:
        return [_check("overlap % --hta-compat vs HTA", None, "<=", OVERLAP_TOLERANCE_PP, "{:.2f} pp")]
    assert hta is not None and cp is not None
    ours: dict[str, float | None] = cp["overlap_pct_hta_compat"]
    out = []
    for rank, theirs in sorted(hta["overlap_pct"].items()):
        mine = ours.get(rank)
        mine_pct = 0.0 if mine is None and rank in ours else mine  # no comm at all: 0 % overlapped
        diff = None if mine_pct is None else abs(mine_pct - theirs)
        shown = "missing" if mine_pct is None else f"{mine_pct:.2f} vs {theirs:.2f}"
        check = _check(f"overlap % --hta-compat vs HTA, rank {rank}", diff, "<=", OVERLAP_TOLERANCE_PP,
                       "{:.2f} pp", f"commprof {shown} (HTA)")
        if diff is None:
            check["status"] = "FAIL"
        out.append(check)
    extra = sorted(set(ours) - set(hta["overlap_pct"]))
    if extra:
        out.append({"name": "ranks only commprof reports", "value": None, "shown": ", ".join(extra),
                    "target": "none", "status": "FAIL", "detail": "HTA found no such rank"})
    return out


def _tool_rows(medians: dict[str, dict[str, Any]]) -> list[str]:
    head = (f"  {'tool':<14} {'import s':>8} {'phase 1 s':>10} {'phase 2 s':>10} {'total s':>8} "
            f"{'peak RSS MB':>12} {'(self + children)':>18} {'after import':>12} {'cpu s':>6}   phases")
    rows = [head]
    for tool, m in medians.items():
        if "error" in m:
            rows.append(f"  {LABELS[tool]:<14} failed: {m['error'].splitlines()[0]}")
            continue
        own, kids = m["maxrss_self_kb"] / 1024, m["maxrss_children_kb"] / 1024
        rss, base = f"({own:.0f} + {kids:.0f})", m["maxrss_after_import_kb"] / 1024
        rows.append(
            f"  {LABELS[tool]:<14} {m['import_s']:>8.3f} {m['parse_s']:>10.3f} {m['analyze_s']:>10.3f} "
            f"{m['total_s']:>8.3f} {peak_rss_mb(m):>12.0f} {rss:>18} {base:>12.0f} "
            f"{m['cpu_s']:>6.2f}"
            f"   {' | '.join(PHASES[tool])}"
        )
    return rows


def print_report(name: str, result: dict[str, Any], repeat: int) -> None:
    medians = result["medians"]
    floor = medians.get("floor", {})
    size = f", {floor['json_mb']:.1f} MB of JSON" if "json_mb" in floor else ""
    print(f"\n== {name}: {len(result['files'])} file(s), {result['compressed_mb']:.1f} MB compressed{size}; "
          f"median of {repeat} runs; import time excluded from every ratio ==")
    print("\n".join(_tool_rows(medians)))
    cp = medians.get("commprof", {})
    if "error" not in cp and cp:
        print(f"  commprof also: analyze(hta_compat=True) {cp['analyze_hta_compat_s']:.3f} s; "
              f"cached re-open + read tables {cp['reopen_read_s']:.4f} s ({cp['reopen_rows']} rows, "
              f"{cp['reparsed_on_reopen']} re-parsed);\n  cached re-open + analyze "
              f"{cp['reopen_analyze_s']:.3f} s; peak RSS after first ingest "
              f"{cp['maxrss_after_first_ingest_kb'] / 1024:.0f} MB")
        print(f"  commprof overlap %: default {_pcts(cp['overlap_pct'])}; hta_compat "
              f"{_pcts(cp['overlap_pct_hta_compat'])}")
    print(f"\n  {'target':<44} {'measured':>16} {'target':>12}  result")
    for c in result["checks"]:
        flag = "FAIL  <<<" if c["status"] == "FAIL" else c["status"]
        print(f"  {c['name']:<44} {c['shown']:>16} {c['target']:>12}  {flag}   {c['detail']}")


def _pcts(by_rank: dict[str, float | None]) -> str:
    return ", ".join(f"rank {r} {'n/a' if p is None else f'{p:.2f}'}" for r, p in sorted(by_rank.items()))
