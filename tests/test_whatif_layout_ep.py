"""The layout what-if on a run whose expert groups are folded into the dense ranks (Megatron-Core's MoE layout:
tp x cp x dp x pp is the world and the EP groups are carved out of it). The rules by construction, then a real
recorded MoE job (tests/zoo/train_zoo.py tp_megatron --moe 2: tp=2 x dp=2 with all_to_all expert groups of 2,
Gloo on 4 CPU ranks). How close the estimate comes to rerunning the job laid out so is measured by
``make zoo-calibrate`` (tests/zoo/whatif_check.py, the tp2_moe cases), not here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from commprof.analyzers.whatif_layout import factors, folded_ep, sizes_after
from commprof.errors import UsageError

sys.path.insert(0, str(Path(__file__).resolve().parent / "zoo"))
import zoolib  # noqa: E402 (test-support module in tests/zoo)


@pytest.mark.parametrize(("sizes", "world", "folded"), [
    ({"tp": 2, "dp": 2, "ep": 2}, 4, True),            # experts over the dp ranks
    ({"tp": 2, "dp": 2, "ep": 4}, 4, True),            # experts over every rank of the stage
    ({"tp": 2, "dp": 2, "pp": 2, "ep": 4}, 8, True),   # within one pipeline stage (8 / 2 ranks)
    ({"tp": 2, "dp": 2, "pp": 2, "ep": 8}, 8, False),  # larger than a stage: not Megatron's layout
    ({"tp": 2, "ep": 2}, 4, False),                    # its own axis: tp x ep is the world
    ({"tp": 2, "dp": 2, "ep": 3}, 4, False),           # does not divide the ranks
    ({"tp": 2, "dp": 2}, 4, False),                    # no experts
])
def test_ep_is_folded_when_the_dense_dimensions_alone_make_the_world(sizes: dict[str, int], world: int,
                                                                    folded: bool) -> None:
    assert folded_ep(sizes, world) is folded


def test_a_folded_ep_keeps_its_size_and_bytes_while_the_dense_layout_changes() -> None:
    old = {"tp": 2, "dp": 2, "ep": 2}
    new, folded = sizes_after("layout:tp=4", old, {"tp": 4}, 4)
    assert (new, folded) == ({"tp": 4, "ep": 2}, True)
    f = factors(old, new, folded)
    # dense tokens per rank: 1 / dp (ep does not split the batch again); parameters per rank: 1 / tp
    assert (f["tp"], f["dp"]) == (2.0, 0.5)
    # the MoE layer's tokens per rank, 1 / (tp x dp): the same world and depth move the same bytes
    assert f["ep"] == 1.0
    new, _ = sizes_after("layout:dp=4", old, {"dp": 4, "ep": 2}, 4)  # naming ep at its size is the same
    assert new == {"dp": 4, "ep": 2}
    assert factors(old, new, True) == {"tp": 0.5, "pp": 0.5, "cp": 0.5, "ep": 1.0, "dp": 2.0}


def test_ep_on_its_own_axis_still_splits_the_tokens() -> None:
    assert factors({"ep": 2, "dp": 2}, {"ep": 2, "dp": 2})["tp"] == 1.0
    assert factors({"tp": 2, "ep": 2}, {"tp": 1, "ep": 2, "dp": 2})["ep"] == 0.5  # tokens / (ep x dp)


@pytest.mark.parametrize(("given", "message"), [
    ({"tp": 4, "ep": 4}, "keep ep=2: changing the ep size is not modelled"),
    ({"tp": 4, "dp": 2}, "tp=4 x dp=2 is 8 ranks, the run has 4 (ep=2 is folded into them, as Megatron lays out "
                         "MoE experts)"),
])
def test_what_a_folded_ep_cannot_estimate_is_refused_with_why(given: dict[str, int], message: str) -> None:
    with pytest.raises(UsageError, match="cannot be estimated from this run") as err:
        sizes_after("layout:x", {"tp": 2, "dp": 2, "ep": 2}, given, 4)
    assert message in str(err.value)


def _what_if(run_dir: Path, change: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "commprof", "analyze", str(run_dir), "--format", "json",
                           "--what-if", change], env=zoolib.env(), capture_output=True, text=True,
                          timeout=zoolib.JOB_TIMEOUT_S, cwd=zoolib.REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    report: dict[str, Any] = json.loads(done.stdout)
    return report


@pytest.mark.torchrun
@pytest.mark.slow
def test_a_recorded_moe_job_gets_a_layout_estimate_with_its_experts_kept(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="records a real torchrun job: torch is not installed")
    run_dir = tmp_path / "moe"
    zoolib.record(run_dir, "tp_megatron", steps=9, active=4, train_args=("--tp", "2", "--moe", "2", "--layers", "4"))
    report = _what_if(run_dir, "layout:tp=4")
    sizes = {g["dimension"]: g["size"] for g in report["process_groups"] if g["dimension"] != "world"}
    assert sizes == {"tp": 2, "dp": 2, "ep": 2}, report["process_groups"]  # the all_to_all groups are ep
    w = report["what_if"]
    assert w["changes"] == ["layout:tp=4"]
    assert "ep=2 folded into the dense ranks (Megatron MoE): its groups and tier kept as measured, bytes per " \
           "call x 1" in w["method"]
    assert 0 < w["totals"]["step_ns_after"] and w["totals"]["step_ns_after"] != w["totals"]["step_ns"]
    refused = subprocess.run([sys.executable, "-m", "commprof", "analyze", str(run_dir),
                              "--what-if", "layout:tp=4,ep=4"], env=zoolib.env(), capture_output=True, text=True,
                             timeout=zoolib.JOB_TIMEOUT_S, cwd=zoolib.REPO)
    assert refused.returncode != 0 and "keep ep=2" in refused.stderr and "Traceback" not in refused.stderr
