"""Sanity before blame (DESIGN §3 "Findings": no rank is blamed whose clock or run identity is in doubt).

Before a rule names a rank as late (straggler) or out of step (desync), the ranks must plausibly be one
run on comparable clocks. Three checks, each naming the ranks and why:

* **Run identity**: every rank of one job profiles the same steps (same ``ProfilerStep`` numbers). A rank
  whose step numbers differ from the majority's — beyond one step more or less at either end, which a
  trace cut short by a kill gives — is from another run or another profiler window: calls matched by
  order would pair different iterations.
* **Trace start**: ranks in one job run in lockstep, so step k starts on every rank within about a step
  of the others. A rank whose step starts (on the fitted host clock) lie further from the other ranks'
  than twice the longest step any rank took has a trace from another day, or a clock that is wrong.
* **Host clock**: a host whose fitted clock offset is further from the others' than that is doubtful
  too: real clocks of one cluster agree to milliseconds, so the fit paired calls that did not happen
  together.
* **Last word**: a rank whose process died without one (SIGKILL, or its node died: its exit handler never
  ran) while other ranks of the job ended properly has files older than theirs: its Flight Recorder dump
  stops where its last window closed, so "behind its group" would be its death read as a desync. The ranks
  that survived it stopped on that failure, each at its own point: the desync rule then does not read where
  their dumps end as a hang either (a different collective at one sequence number still counts).

The doubtful ranks stay in every table and summary (their numbers are what the traces say); only the
rules that blame a rank skip the calls they took part in.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

DOUBTFUL_SCHEMA = pl.Schema({"rank": pl.Int32, "check": pl.String, "reason": pl.String})
# an offset is implausible beyond this many times the longest step (ranks in lockstep are within one)
STEP_SPANS = 2.0
MIN_IMPLAUSIBLE_NS = 10_000_000  # and never under 10 ms: clocks of one cluster agree to about a millisecond


@dataclass(frozen=True)
class Sanity:
    doubtful: pl.DataFrame  # DOUBTFUL_SCHEMA: one row per rank and failed check
    warnings: tuple[str, ...]

    @property
    def ranks(self) -> frozenset[int]:
        return frozenset(int(r) for r in self.doubtful["rank"].to_list())


def _ranks_text(ranks: list[int]) -> str:
    """0-7, 9, 12-15: runs of consecutive ranks shortened."""
    out: list[str] = []
    for r in sorted(ranks):
        if out and out[-1].split("-")[-1] == str(r - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{r}"
        else:
            out.append(str(r))
    return ", ".join(out[:8]) + (" ..." if len(out) > 8 else "")


def _steps_text(steps: tuple[int, ...]) -> str:
    if not steps:
        return "no step"
    span = f"{steps[0]}-{steps[-1]}" if steps == tuple(range(steps[0], steps[-1] + 1)) else _ranks_text(list(steps))
    return f"steps {span} ({len(steps)})"


def _same_run(mine: tuple[int, ...], ref: tuple[int, ...]) -> bool:
    # one step more or less at either end is a trace cut short (a kill) or a profiler window that opened or
    # closed a step apart, not another run
    return mine in (ref, ref[:-1], ref[1:]) or ref in (mine[:-1], mine[1:])


def _run_identity(marks: pl.DataFrame) -> tuple[list[tuple[int, str]], list[str]]:
    per_rank = {int(r): tuple(sorted(int(s) for s in steps))
                for r, steps in marks.group_by("rank").agg(pl.col("step").unique()).iter_rows()}
    if len(set(per_rank.values())) < 2:
        return [], []
    groups: dict[tuple[int, ...], list[int]] = {}
    for rank, steps in sorted(per_rank.items()):
        groups.setdefault(steps, []).append(rank)
    ref = max(groups, key=lambda s: (len(groups[s]), -min(groups[s])))
    bad = {s: r for s, r in groups.items() if not _same_run(s, ref)}
    if not bad:
        return [], []
    rows, warnings = [], []
    for steps, ranks in bad.items():
        why = f"profiled {_steps_text(steps)} where ranks {_ranks_text(groups[ref])} profiled {_steps_text(ref)}"
        rows += [(r, why) for r in ranks]
        warnings.append(f"ranks {_ranks_text(ranks)} {why}: ranks from another run or another profiler window "
                        "(calls matched by order would pair different iterations); no straggler or desync "
                        "finding rests on them")
    return rows, warnings


def _ms(ns: float) -> str:
    hours = abs(ns) / 3.6e12
    return f"{ns / 3.6e12:+.1f} h" if hours >= 1 else f"{ns / 1e6:+.1f} ms"


def _trace_start(marks: pl.DataFrame, offsets: pl.DataFrame,
                 limit_ns: float) -> tuple[list[tuple[int, str]], list[str]]:
    aligned = (marks.join(offsets, on="rank", how="left")
               .with_columns((pl.col("start_ns") - pl.col("offset_ns").fill_null(0)).alias("_start")))
    per_step = aligned.group_by("step").agg(pl.col("_start").median().alias("_common"), pl.len().alias("_n"))
    dev = (aligned.join(per_step.filter(pl.col("_n") > 1), on="step")
           .group_by("rank").agg((pl.col("_start") - pl.col("_common")).median().alias("_dev")))
    far = dev.filter(pl.col("_dev").abs() > limit_ns).sort("rank")
    rows, warnings = [], []
    for rank, value in far.iter_rows():
        why = (f"its steps start {_ms(value)} from the other ranks' same steps (more than any step lasts): a "
               "trace from another run or day, or a wrong clock")
        rows.append((int(rank), why))
        warnings.append(f"rank {rank}: {why}; no straggler or desync finding rests on it")
    return rows, warnings


def _host_clocks(host_clocks: pl.DataFrame, ranks: pl.DataFrame,
                 limit_ns: float) -> tuple[list[tuple[int, str]], list[str]]:
    fitted = host_clocks.filter(pl.col("fit").is_in(["reference", "aligned"]))
    if fitted.height < 2:
        return [], []
    median = float(fitted["offset_ns"].cast(pl.Float64).median() or 0)  # type: ignore[arg-type]
    far = fitted.filter((pl.col("offset_ns") - median).abs() > limit_ns)
    rows, warnings = [], []
    for host, offset, calls in far.select("host", "offset_ns", "calls_used").iter_rows():
        mine = [int(r) for r in ranks.filter(pl.col("host").fill_null("?") == host)["rank"].to_list()]
        why = (f"the clock of its host {host} is {_ms(offset - median)} off the other hosts' (fitted from {calls} "
               "matched calls; one cluster's clocks agree to milliseconds)")
        rows += [(r, why) for r in mine]
        warnings.append(f"ranks {_ranks_text(mine)}: {why}; no straggler or desync finding rests on them")
    return rows, warnings


def _last_word(ends: tuple[tuple[int, str], ...]) -> tuple[list[tuple[int, str]], list[str]]:
    ended = [r for r, how in ends if how in ("exited", "signalled")]
    died = [r for r, how in ends if how == "died"]
    if not ended or not died:
        return [], []
    why = (f"its process died without a last word (SIGKILL, or its node died) while ranks {_ranks_text(ended)} "
           "ended: its Flight Recorder dump and status are older than theirs")
    return [(r, why) for r in died], [f"ranks {_ranks_text(died)}: {why}; no straggler or desync finding rests on "
                                      "them, and where the other ranks' Flight Recorder dumps end is not read as a "
                                      "hang (they stopped on that failure, each where it was)"]


def check_ranks(step_marks: pl.DataFrame, host_clocks: pl.DataFrame, ranks: pl.DataFrame,
                ends: tuple[tuple[int, str], ...] = ()) -> Sanity:
    """The doubtful ranks of a run and a warning per check that failed. ``step_marks``: rank, step,
    start_ns, end_ns (each rank's own clock); ``host_clocks``: host, offset_ns, fit; ``ranks``: rank, host;
    ``ends``: how each rank's process ended (RunFacts.rank_ends)."""
    step_marks = step_marks.filter(pl.col("step").is_not_null() & pl.col("start_ns").is_not_null())
    if step_marks.height == 0:
        found, said = _last_word(ends)
        return Sanity(pl.DataFrame([(r, "ended", why) for r, why in found], schema=DOUBTFUL_SCHEMA, orient="row"),
                      tuple(said))
    longest = float((step_marks["end_ns"] - step_marks["start_ns"]).cast(pl.Float64).max() or 0)  # type: ignore[arg-type]
    limit_ns = max(STEP_SPANS * longest, MIN_IMPLAUSIBLE_NS)
    offsets = (ranks.select("rank", pl.col("host").fill_null("?"))
               .join(host_clocks.select("host", "offset_ns"), on="host", how="left").select("rank", "offset_ns"))
    rows: list[tuple[int, str, str]] = []
    warnings: list[str] = []
    for check, (found, said) in (("run", _run_identity(step_marks)),
                                 ("start", _trace_start(step_marks, offsets, limit_ns)),
                                 ("clock", _host_clocks(host_clocks, ranks, limit_ns)),
                                 ("ended", _last_word(ends))):
        rows += [(r, check, why) for r, why in found]
        warnings += said
    return Sanity(pl.DataFrame(rows, schema=DOUBTFUL_SCHEMA, orient="row").sort("rank", "check"), tuple(warnings))
