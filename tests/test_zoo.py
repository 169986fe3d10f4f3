"""The fault zoo's small budget (``make test``): a few faults of tests/zoo/train_zoo.py and a clean twin,
recorded once each on 4 Gloo ranks with short steps, analyzed by ``commprof analyze --format json`` and
judged by tests/zoo/zoolib.py: the fault named with its kind and rank / group, the clean twin without a
finding above info. ``make zoo`` runs every fault 3 times with A/B costs (docs/findings.md, "Calibration
on recorded runs")."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.torchrun, pytest.mark.slow]
pytest.importorskip("torch", reason="the fault zoo records real torchrun jobs: torch is not installed")

sys.path.insert(0, str(Path(__file__).resolve().parent / "zoo"))
import zoolib  # noqa: E402 (test-support module in tests/zoo)

# fewer, smaller layers than the full zoo: ~60-100 ms steps, 3 recorded (the faults' effects stay >= 20 ms)
SMALL = ("--layers", "4", "--batch", "96")


# 10 profiled steps where the straggler rule is judged (6 is the fewest at which its second witness, a rank's own
# work per step, can speak on 4 ranks; there it found the slow rank in some runs only). A rank doing 30 ms more
# compute on 2 shared cores costs its peers only ~10 ms of waiting and shows more work in most steps, not all:
# at 10 steps this small budget named it in 5 of 6 runs while three other jobs loaded the 2 cores (load 3-7).
# It runs and reports XFAIL/XPASS on every `make test` (the full zoo judges it over 3 repetitions, docs/findings.md
# "Calibration on recorded runs"); the clean twin must hold every time.
SLOW_RANK_SMALL = pytest.mark.xfail(
    reason="a small budget on 2 shared cores: the work witness names the slow rank in most runs, not all", strict=False)
# (steps, profiled) where the straggler rule is judged
STEPS = {"slow_rank": (16, 10), "clean": (16, 10), "pp_uneven": (11, 6)}


@pytest.mark.parametrize("fault", [pytest.param("slow_rank", marks=SLOW_RANK_SMALL), "barrier", "mismatch",
                                   "clean", "pp_uneven"])
def test_zoo_case_is_judged_right(fault: str, tmp_path: Path) -> None:
    run_dir = tmp_path / fault
    steps, active = STEPS.get(fault, (9, 3))
    zoolib.record(run_dir, fault, steps=steps, active=active, train_args=SMALL)
    report = zoolib.analyze(run_dir)
    verdict = zoolib.judge(fault, report)
    expect = zoolib.EXPECT[fault]
    said = "; ".join(verdict.findings) or "no findings"
    assert not verdict.false_alarms, f"{fault}: findings above info on a clean configuration: {said}"
    assert verdict.named, f"{fault}: expected {expect.note}; commprof said: {said}; {verdict.problems}"
    assert not verdict.problems, f"{fault}: {verdict.problems}; commprof said: {said}"
    if fault == "pp_uneven":  # its A/B: 4x the micro-batches made the step slower on 2 cores (docs/findings.md)
        assert "not estimated on a CPU run" in verdict.estimate_model, said


def test_judge_rejects_a_finding_on_the_wrong_rank() -> None:
    """The judge itself: a straggler on rank 0 does not name slow_rank's rank 2; a clean twin with a low
    finding is a false alarm; an info finding is not."""
    group = {"pg": "0", "ranks": [0, 1, 2, 3], "dimension": "dp"}
    straggler = {"id": "straggler", "severity": "medium", "saving_ns_per_step": 20_000_000, "saving_model": "x",
                 "ranks": [0], "pgs": ["0"], "dimension": "dp"}
    report = {"findings": [straggler], "process_groups": [group], "dimensions": []}
    wrong = zoolib.judge("slow_rank", report)
    assert not wrong.named and wrong.problems == ["straggler: rank 2 not in [0]"]
    right = zoolib.judge("slow_rank", {**report, "findings": [{**straggler, "ranks": [2]}]})
    assert right.ok and right.estimate_ms == 20.0
    assert zoolib.judge("clean", report).false_alarms == ["straggler medium"]
    assert zoolib.judge("clean", {**report, "findings": [{**straggler, "severity": "info"}]}).ok
    assert zoolib.saving_verdict(20.0, "x", [18.0, 22.0]).startswith("ok")
    assert zoolib.saving_verdict(40.0, "x", [18.0, 22.0]).startswith("outside band")
    assert zoolib.saving_verdict(20.0, "x", [2.0, 30.0]).startswith("not measurable")
