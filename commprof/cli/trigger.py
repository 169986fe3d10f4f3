"""``commprof trigger RUN``: ask a job recorded with ``record --on-demand`` for a window now, on every rank at the
same optimizer step (commprof/record/rank/windows.py says how the ranks read it)."""

from __future__ import annotations

import json
import math
import os
import socket
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import click

STALE_S = 60.0  # progress older than this: the job may have ended or hang


def _progress(run: Path) -> list[dict[str, Any]]:
    from commprof.record.rank.windows import CONTROL_DIR, PROGRESS_DIR

    out = []
    for path in sorted((run / CONTROL_DIR / PROGRESS_DIR).glob("rank-*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # being replaced: the next read has it
        if isinstance(data, dict) and type(data.get("step")) is int:
            out.append(data)
    return out


def _age_s(stamp: Any, now: datetime) -> float | None:
    try:
        when = datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
    except ValueError:
        return None
    return max(0.0, (now - when).total_seconds())


@click.command()
@click.argument("runs", nargs=-1, required=True, type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.option("--steps", "active", type=click.IntRange(1), default=None,
              help="Steps to record in this window (default: the run's --active).")
@click.option("--warmup", type=click.IntRange(0), default=None, help="Warm-up steps (default: the run's --warmup).")
@click.option("--at-step", type=click.IntRange(0), default=None, metavar="S",
              help="Open the window at optimizer step S (default: a few seconds ahead of the fastest rank).")
@click.option("--lead", type=click.FloatRange(0.5), default=5.0, show_default=True, metavar="SECONDS",
              help="How far ahead of the fastest rank to open it: every rank must read the request first.")
def trigger(runs: tuple[Path, ...], active: int | None, warmup: int | None, at_step: int | None,
            lead: float) -> None:
    """Open a profiling window in a running job recorded with `commprof record --on-demand`.

    RUNS: the run folder (or, for a job whose nodes record into folders of their own, every node's folder). The
    window opens on every rank at the same optimizer step and lands in RUN/windows/step-<S>/; `commprof analyze
    RUN` shows it beside the earlier windows. Costs the job nothing until then."""
    from commprof.errors import InputError, UsageError
    from commprof.record.rank.files import atomic_write_json
    from commprof.record.rank.windows import CONTROL_DIR, TRIGGER_PREFIX, window_name

    now = datetime.now(timezone.utc)
    everyone = [p for run in runs for p in _progress(run)]
    if not everyone:
        raise InputError("no rank reports its progress here: was the job recorded with `commprof record "
                         "--on-demand`, and is it running?", " + ".join(map(str, runs)))
    ranks = [p for p in everyone if not p.get("ended")]
    if not ranks:
        raise InputError(f"the job has ended (its {len(everyone)} rank(s) said so at their exit): nothing to "
                         "record", " + ".join(map(str, runs)))
    fastest = max(ranks, key=lambda r: r["step"])
    ages = [a for r in ranks if (a := _age_s(r.get("at"), now)) is not None]
    age = min(ages) if ages else 0.0
    rates = [float(r["steps_per_s"]) for r in ranks if isinstance(r.get("steps_per_s"), (int, float))]
    rate = max(rates) if rates else None
    if at_step is None:
        if rate is None:  # one progress line so far: no rate yet
            raise UsageError("the ranks have not reported a step rate yet (a few seconds after the window-less "
                             "start): try again, or give --at-step")
        # where the fastest rank is now, and a lead that every rank's next look at the folder falls within
        at_step = math.ceil(fastest["step"] + rate * (age + lead)) + 1
    elif at_step <= fastest["step"]:
        raise UsageError(f"--at-step {at_step} has passed: the ranks are at step {fastest['step']} or later")
    request = {"step": at_step, "active": active, "warmup": warmup, "id": f"{TRIGGER_PREFIX}{at_step}",
               "requested_at": now.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
               "requested_by": f"{socket.gethostname()}:{os.getpid()}"}
    for run in runs:
        folder = run / CONTROL_DIR
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{TRIGGER_PREFIX}{at_step}.json"
        if path.exists():
            click.echo(f"commprof: a window at step {at_step} is already asked for in {run}", err=True)
            continue
        try:
            atomic_write_json(str(path), request)
        except OSError as err:
            raise InputError(f"cannot write the request ({err.strerror or err})", path) from None
    when = f", in ~{(at_step - fastest['step']) / rate - age:.0f} s" if rate else ""
    stale = f"; the newest progress is {age:.0f} s old: is the job still running?" if age > STALE_S else ""
    click.echo(f"commprof: window asked for at optimizer step {at_step} (the fastest of {len(ranks)} rank(s) was at "
               f"step {fastest['step']}{f', {rate:.1f} steps/s' if rate else ''}{when}){stale}; it will be "
               f"{runs[0] / 'windows' / window_name(at_step)} (commprof analyze {runs[0]})")
