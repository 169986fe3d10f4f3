"""The fault zoo's harness: record train_zoo.py with a fault, analyze it, judge the findings.

Test-support code (not in the package). Each case is a ``--fault`` of train_zoo.py with what a user must be
told about it (EXPECT): the finding kinds that name the fault and the rank / dimension / group they must
name, or, for the clean configurations, no finding above ``info``. Detection is judged on a recorded run
with the fault on every iteration; the fault's true cost comes from an A/B job (the fault on odd iterations
only, no profiler) as median(odd) - median(even) iteration wall time on the slowest rank, twice per fault
(/work/shared/reference/ab-cost.md). A finding's saving is judged against that cost: within SAVING_BAND of
it, or the finding says it is not estimated.

``python tests/zoo/zoo.py`` (``make zoo``) runs the full zoo and prints the calibration table.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ZOO = Path(__file__).resolve().parent
REPO = ZOO.parents[1]
TRAIN = ZOO / "train_zoo.py"
SEVERITY_RANK = {"info": 0, "low": 1, "medium": 2, "high": 3}
SAVING_BAND = (0.5, 1.5)  # estimate / A/B cost accepted on 2 shared cores (synth runs: within 20 %)
NOT_ESTIMATED = ("not estimated", "not a time saving")
WARMUP_ITERS = 4  # A/B: iterations dropped at the start (allocator, Gloo connections, DDP's first buckets)
JOB_TIMEOUT_S = 300
WORLD = (0, 1, 2, 3)


@dataclass(frozen=True)
class Expect:
    """What one case must make commprof say. ``kinds``: finding ids that name the fault (any of them);
    ``rank``/``dimension``/``group`` (the ranks of a process group it names) must match when set;
    ``quiet``: no finding above info at all; ``saving_from``: where the estimate judged against the A/B
    cost comes from ("finding": the named finding's saving, "dim:tp": that dimension's exposed time per
    step, None: no A/B); ``max_hidden_pct``: (dimension, bound) on the share of its comm hidden."""

    fault: str
    kinds: tuple[str, ...] = ()
    rank: int | None = None
    dimension: str | None = None
    group: tuple[int, ...] | None = None
    quiet: bool = False
    saving_from: str | None = "finding"
    max_hidden_pct: tuple[str, float] | None = None
    forbid: tuple[str, ...] = ()  # finding kinds that must not be above info (a false blame beside the fault)
    advice: tuple[str, ...] = ()  # words the naming finding's fix must hold
    advice_not: tuple[str, ...] = ()  # words it must not hold (a fix that does not apply to what it names)
    note: str = ""


EXPECT: dict[str, Expect] = {e.fault: e for e in (
    Expect("clean", quiet=True, saving_from=None, note="DDP, overlapped buckets: nothing to report"),
    Expect("clean_alltoall", quiet=True, saving_from=None, note="even all-to-all splits: nothing to report"),
    Expect("slow_rank", kinds=("straggler",), rank=2, dimension="dp",
           note="rank 2 computes 30 ms more per step: a straggler naming rank 2, saving ~ the A/B cost"),
    Expect("barrier", kinds=("host_sync",), group=WORLD,
           note="a world barrier per step: flagged on the world group, saving ~ what removing it bought"),
    Expect("small_grads", kinds=("small_messages",), dimension="dp",
           note="one all-reduce per gradient: small messages on dp; A/B twin: one flat all-reduce"),
    Expect("dp_after_backward", kinds=("dp_sync_exposed",), dimension="dp",
           note="DP sync after the backward: dp_sync_exposed; A/B twin: DDP (on 2 cores overlap buys little)"),
    Expect("uneven_alltoall", kinds=("alltoall_imbalance",), rank=1, group=WORLD,
           note="rank 1 receives 70 % of the tokens: all-to-all imbalance on the expert group (all 4 ranks) "
                "naming rank 1"),
    Expect("mismatch", kinds=("desync",), rank=3, group=WORLD, saving_from=None,
           note="rank 3 broadcasts into a buffer twice the root's: desync naming rank 3 (no time saving)"),
    Expect("tp_megatron", quiet=True, saving_from="dim:tp", max_hidden_pct=("tp", 10.0),
           note="a clean tp=2 x dp=2 job: quiet; every TP call blocks (hidden <= 10 %); TP exposed ~ A/B cost"),
    Expect("tp_small", kinds=("small_messages",), dimension="tp", advice=("more tokens per call",),
           advice_not=("coalesce them", "bucket_cap_mb"),
           note="tp=2 x dp=2, hidden 64, 2 micro-batches: small TP all-reduces; the fix is more tokens per call "
                "(never bucketing), its saving against the A/B of one micro-batch of the same rows"),
    Expect("ddp_async", quiet=True, saving_from="dim:dp",
           note="DDP with many buckets on Gloo's worker threads: no desync, nothing above info"),
    Expect("pp_uneven", kinds=("pipeline_bubble",), dimension="pp", forbid=("straggler", "desync"),
           note="pp=2 x dp=2, 4 micro-batches, stage 1 holds 5 of 8 blocks: a pipeline bubble on pp, and no rank "
                "of the heavier stage blamed as a straggler; A/B twin: 16 micro-batches (the finding's proposal)"),
)}


def env() -> dict[str, str]:
    """The jobs' environment: the caller's, without another commprof/NCCL setting, one OMP thread per rank."""
    out = {k: v for k, v in os.environ.items() if not k.startswith(("COMMPROF_", "TORCH_FR_"))}
    out.pop("RANK", None)
    out.update(OMP_NUM_THREADS="1", KINETO_LOG_LEVEL="6", GLOO_SOCKET_IFNAME="lo")
    out["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    return out


def torchrun(fault: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4", str(TRAIN),
            "--fault", fault, *args]


def record(run_dir: Path, fault: str, *, steps: int = 26, active: int = 20, train_args: tuple[str, ...] = ()) -> None:
    """``commprof record`` one job with the fault on every iteration (the window: steps 3..3+active-1). Twenty
    profiled steps: the straggler rule judges over stretches of steps, and its work witness needs 6 stretches on 4
    ranks; the calibration (``make zoo-calibrate``) named the slow rank in every 20-step window and in 5 of 16
    10-step windows beside a busy process (docs/findings.md)."""
    cmd = [sys.executable, "-m", "commprof", "record", "-o", str(run_dir), "--force", "--no-analyze",
           "--wait", "2", "--warmup", "1", "--active", str(active), "--",
           *torchrun(fault, "--steps", str(steps), *train_args)]
    done = subprocess.run(cmd, env=env(), capture_output=True, text=True, timeout=JOB_TIMEOUT_S, cwd=REPO)
    (run_dir / "zoo-record.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise RuntimeError(f"recording {fault} failed ({done.returncode}): {done.stderr[-2000:]}")


def analyze(run_dir: Path) -> dict[str, Any]:
    """``commprof analyze DIR --format json`` (the CLI, as a user runs it); the report is kept beside the run."""
    cmd = [sys.executable, "-m", "commprof", "analyze", str(run_dir), "--format", "json"]
    done = subprocess.run(cmd, env=env(), capture_output=True, text=True, timeout=JOB_TIMEOUT_S, cwd=REPO)
    if done.returncode != 0:
        raise RuntimeError(f"analyze {run_dir} failed ({done.returncode}): {done.stderr[-2000:]}")
    (run_dir / "zoo-analyze.json").write_text(done.stdout)
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def ab_job(stamps_dir: Path, fault: str, *, steps: int = 40, train_args: tuple[str, ...] = ()) -> float:
    """Run the ``--ab`` job (no profiler) and return the fault's cost per step in ms."""
    cmd = torchrun(fault, "--ab", "--steps", str(steps), "--stamps", str(stamps_dir), *train_args)
    done = subprocess.run(cmd, env=env(), capture_output=True, text=True, timeout=JOB_TIMEOUT_S, cwd=REPO)
    if done.returncode != 0:
        raise RuntimeError(f"A/B job {fault} failed ({done.returncode}): {done.stderr[-2000:]}")
    return ab_cost_ms(stamps_dir)


def ab_cost_ms(stamps_dir: Path) -> float:
    """median(odd) - median(even) iteration wall time of the job: an iteration ends when its slowest rank
    ends its optimizer step (perf_counter_ns is the host's monotonic clock, the same in every rank)."""
    times = iteration_ms(stamps_dir)
    odd = [t for i, t in times.items() if i % 2 == 1]
    even = [t for i, t in times.items() if i % 2 == 0]
    return statistics.median(odd) - statistics.median(even)


def iteration_ms(stamps_dir: Path) -> dict[int, float]:
    """Iteration i's wall time (ms), from the latest rank's end of step i-1 to the latest's end of step i;
    the first WARMUP_ITERS iterations dropped."""
    ranks = [json.loads(p.read_text())["stamps_ns"] for p in sorted(stamps_dir.glob("rank-*.json"))]
    if not ranks or len({len(s) for s in ranks}) != 1:
        raise RuntimeError(f"no stamps, or ranks with different step counts, in {stamps_dir}")
    ends = [max(s[i] for s in ranks) for i in range(len(ranks[0]))]
    return {i: (ends[i] - ends[i - 1]) / 1e6 for i in range(max(1, WARMUP_ITERS), len(ends))}


@dataclass
class Verdict:
    fault: str
    named: bool  # the fault named (kind and rank/dimension/group), or quiet where quiet is expected
    false_alarms: list[str]  # findings above info on a clean configuration: "id severity"
    estimate_ms: float | None  # what commprof's saving (or dimension exposure) says per step
    estimate_model: str
    # a dimension's exposure: its transfer part, the least that removing the calls saves (see saving_verdict)
    estimate_low_ms: float | None = None
    problems: list[str] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)  # every finding, "id severity saving ms ranks pgs"
    others: list[str] = field(default_factory=list)  # on a fault case: findings above info of other kinds

    @property
    def ok(self) -> bool:
        return self.named and not self.problems and not self.false_alarms


def _group_ranks(report: dict[str, Any], pg: str) -> tuple[int, ...]:
    for g in report.get("process_groups", []):
        if str(g.get("pg")) == str(pg):
            return tuple(sorted(g.get("ranks") or ()))
    return ()


def _names_it(f: dict[str, Any], e: Expect, report: dict[str, Any]) -> list[str]:
    """What the finding fails to name (empty: it names the fault)."""
    miss = []
    if e.rank is not None and e.rank not in (f.get("ranks") or ()):
        miss.append(f"rank {e.rank} not in {f.get('ranks')}")
    if e.dimension is not None and f.get("dimension") != e.dimension:
        dims = {g.get("dimension") for g in report.get("process_groups", []) if str(g.get("pg")) in
                {str(p) for p in f.get("pgs") or ()}}
        if e.dimension not in dims:
            miss.append(f"dimension {f.get('dimension')} (groups: {sorted(map(str, dims))}), not {e.dimension}")
    if e.group is not None and e.group not in {_group_ranks(report, p) for p in f.get("pgs") or ()}:
        miss.append(f"groups {[_group_ranks(report, p) for p in f.get('pgs') or ()]}, not {e.group}")
    return miss


def describe(f: dict[str, Any]) -> str:
    return (f"{f['id']} [{f['severity']}] saving {f.get('saving_ns_per_step', 0) / 1e6:.1f} ms "
            f"ranks={list(f.get('ranks') or ())} pgs={list(f.get('pgs') or ())} dim={f.get('dimension')}")


def _dimension(report: dict[str, Any], dim: str) -> dict[str, Any] | None:
    return next((d for d in report.get("dimensions", []) if d.get("dimension") == dim), None)


def judge(fault: str, report: dict[str, Any]) -> Verdict:
    e = EXPECT[fault]
    findings = report.get("findings", [])
    loud = [f for f in findings if SEVERITY_RANK.get(f["severity"], 0) > 0]
    v = Verdict(fault, named=True, false_alarms=[], estimate_ms=None, estimate_model="",
                findings=[describe(f) for f in findings])
    if e.quiet:
        v.false_alarms = [f"{f['id']} {f['severity']}" for f in loud]
        v.named = not loud
    else:
        kinds = [f for f in findings if f["id"] in e.kinds]
        v.others = [f"{f['id']} {f['severity']}" for f in loud if f["id"] not in e.kinds]
        v.problems += [f"false {f['id']} [{f['severity']}] ranks {f.get('ranks')}" for f in loud
                       if f["id"] in e.forbid]
        naming = [f for f in kinds if not _names_it(f, e, report)]
        v.named = bool(naming)
        if not kinds:
            v.problems.append(f"no {'/'.join(e.kinds)} finding")
        elif not naming:
            v.problems.extend(f"{f['id']}: {m}" for f in kinds for m in _names_it(f, e, report))
        if naming:
            best = max(naming, key=lambda f: f.get("saving_ns_per_step", 0))
            action = str(best.get("action", ""))
            v.problems += [f"its fix lacks {w!r}" for w in e.advice if w not in action]
            v.problems += [f"its fix says {w!r}, which does not apply" for w in e.advice_not if w in action]
            v.estimate_model = str(best.get("saving_model", ""))
            estimated = e.saving_from == "finding" and not any(n in v.estimate_model for n in NOT_ESTIMATED)
            v.estimate_ms = best.get("saving_ns_per_step", 0) / 1e6 if estimated else None
    if e.saving_from and e.saving_from.startswith("dim:"):
        dim = _dimension(report, e.saving_from[4:])
        v.estimate_model = f"{e.saving_from[4:]} exposed per step (its transfer part .. transfer + wait)"
        if dim is None:
            v.problems.append(f"no {e.saving_from[4:]} dimension in the report")
        else:
            v.estimate_ms = dim["exposed_ns_per_step"] / 1e6
            v.estimate_low_ms = dim["exposed_transfer_ns_per_step"] / 1e6
    if e.max_hidden_pct:
        name, bound = e.max_hidden_pct
        dim = _dimension(report, name)
        if dim and dim["comm_ns_per_step"]:
            hidden = 100 * dim["overlapped_ns_per_step"] / dim["comm_ns_per_step"]
            if hidden > bound:
                v.problems.append(f"{name} {hidden:.0f} % hidden (blocking calls: <= {bound:.0f} %)")
    return v


def saving_verdict(estimate_ms: float | None, model: str, costs_ms: list[float], low_ms: float | None = None) -> str:
    """The estimate against the A/B costs: 'ok', 'not estimated (...)', 'outside band', or 'not measurable'.
    With ``low_ms`` the estimate is a range (a dimension's exposure): removing the calls saves at least their
    exposed transfer, and their exposed wait only where it is the sync's own cost (many sync points a step,
    each waiting for whichever rank is behind at that moment), not where it is one rank's steady lateness,
    which moves to the next sync when the calls go; the A/B cost must then fall inside the range, widened by
    SAVING_BAND."""
    if estimate_ms is None:
        return f"not estimated ({model})" if model else "no estimate (no finding)"
    cost = statistics.median(costs_ms)
    spread = max(costs_ms) - min(costs_ms)
    if cost <= 0 or spread > cost:
        return f"not measurable (A/B {', '.join(f'{c:.1f}' for c in costs_ms)} ms: noise >= effect)"
    low, high = SAVING_BAND
    if low_ms is not None:
        inside = low * low_ms <= cost <= high * estimate_ms
        return f"{'ok' if inside else 'outside band'} (A/B {cost:.1f} vs transfer {low_ms:.1f} .. {estimate_ms:.1f})"
    ratio = estimate_ms / cost
    return f"{'ok' if low <= ratio <= high else 'outside band'} ({ratio:.2f}x)"
