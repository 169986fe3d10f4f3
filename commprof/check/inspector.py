"""``check`` on a folder of NCCL Inspector logs (always-on production monitoring, no trace): the bandwidth rules.

The records give each communicator's calls, sizes and times, and how many nodes it spans, not which link: a
``[tier.ib]`` (or roce, ethernet) rule applies to the communicators spanning nodes, a ``[tier.nvlink]`` (or
pcie) rule to those inside one node; the config's tier says what the records cannot. Efficiency = busbw /
the tier's peak (``peak_gbps``, else analyze's default for that tier: networks have one, NVLink and PCIe
depend on the GPU, which the records do not name). Rules that need a timeline (exposure, waits, findings)
are skipped and say why; with no bandwidth rule configured there is nothing to check, which is an error.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from commprof.analyzers.efficiency import peak_gbps
from commprof.analyzers.inspector import INSIDE_NODE, INSPECTOR_SUMMARY, NETWORK, inspector_efficiency
from commprof.check.config import CheckConfig, ConfigError
from commprof.check.results import SKIP, CheckResult, RuleResult
from commprof.check.rules import _limit_rule

RECORD_TIER = {"ib": NETWORK, "roce": NETWORK, "ethernet": NETWORK, "nvlink": INSIDE_NODE, "pcie": INSIDE_NODE}
NO_TIMELINE = "NCCL Inspector logs have no timeline (step time, exposure, waits, findings need a trace)"
USAGE = ("a folder of NCCL Inspector logs has no timeline: only the bandwidth rules can run on it "
         "([tier.ib|roce|ethernet|nvlink|pcie] min_busbw_efficiency, e.g. --rule tier.ib.min_busbw_efficiency=0.6)")


def _timeline_rules(config: CheckConfig) -> list[str]:
    names = [k for k in ("max_exposed_comm_pct", "max_exposed_ms_per_step", "max_straggler_wait_ms",
                         "fail_on_findings") if getattr(config, k) is not None]
    for dim, limits in sorted(config.dimension.items()):
        names += [f"dimension.{dim}.{k}" for k in ("max_exposed_comm_pct", "max_exposed_ms_per_step")
                  if getattr(limits, k) is not None]
    return names


def evaluate_inspector(config: CheckConfig, report: dict[str, Any]) -> CheckResult:
    """The rules on an untraced report holding Inspector records (commprof.report.other_sources)."""
    if config.baseline:
        raise ConfigError(f"--baseline compares analyze reports of traced runs; {USAGE}")
    wanted = {t: lim for t, lim in sorted(config.tier.items()) if lim.min_busbw_efficiency is not None}
    if not wanted:
        raise ConfigError(f"no bandwidth rule configured: {USAGE}")
    clash = sorted(t for t in wanted if RECORD_TIER.get(t) and [RECORD_TIER.get(u) for u in wanted].count(
        RECORD_TIER[t]) > 1)
    if clash:
        raise ConfigError(f"[tier.{clash[0]}] and [tier.{clash[1]}] would judge the same communicators: NCCL "
                          "Inspector logs cannot tell them apart (configure one)")
    summary = pl.DataFrame((report.get("inspector") or {}).get("summary", []), schema=INSPECTOR_SUMMARY)
    peaks = {RECORD_TIER[t]: p for t, lim in wanted.items() if t in RECORD_TIER
             and (p := lim.peak_gbps if lim.peak_gbps is not None else peak_gbps(t, None)) is not None}
    rows = inspector_efficiency(summary, peaks)
    rules = [_tier_rule(t, lim.min_busbw_efficiency or 0.0, lim.min_bytes, rows) for t, lim in wanted.items()]
    rules += [RuleResult(name, "needs a trace", SKIP, "", None, detail=NO_TIMELINE)
              for name in _timeline_rules(config)]
    return CheckResult(rules)


def _tier_rule(tier: str, allowed: float, min_bytes: float, rows: pl.DataFrame) -> RuleResult:
    name = f"tier.{tier}.min_busbw_efficiency"
    on = RECORD_TIER.get(tier)
    if on is None:
        return RuleResult(name, f"busbw / peak on {tier}", SKIP, "", allowed,
                          detail=f"NCCL Inspector logs cannot show {tier} (only nodes spanned: network or inside one)")
    mine = rows.filter(pl.col("tier") == on)
    peak = mine["peak_gbps"].drop_nulls()
    subjects = [({"pg": r["comm_id"], "name": r["comm_name"], "tier": tier, "op": r["op"], "bytes": r["bytes"]},
                 float(r["efficiency"]))
                for r in mine.filter((pl.col("bytes") >= min_bytes) & pl.col("efficiency").is_not_null())
                .iter_rows(named=True)]
    where = "spanning nodes" if on == NETWORK else "inside one node"
    peak_text = f"{peak[0]:g} GB/s peak" if peak.len() else "peak"
    return _limit_rule(name, f"busbw / {peak_text} of communicators {where} ({tier}), per communicator, op and "
                             f"size (calls ≥ {min_bytes:,.0f} B)", "", allowed, subjects, higher_is_worse=False,
                       empty=f"no communicator {where} with calls ≥ {min_bytes:,.0f} B" if peak.len() else
                       f"no peak for {tier} (the records name no GPU): set [tier.{tier}] peak_gbps")
