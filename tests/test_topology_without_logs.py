"""``commprof topology`` on a run without NCCL logs shows what the run has and says what is missing."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

from click.testing import Result

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"


def test_gloo_run_shows_hosts_groups_and_captures(cli: Callable[..., Result], tmp_path: Path) -> None:
    result = cli("topology", str(SAMPLES / "tp2_dp2"), env={"COMMPROF_CACHE_DIR": str(tmp_path)})
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    for part in ("4 rank(s) on 1 host(s), gloo; no NCCL logs", "Hosts (from the traces)", "│ vm │ 0-3 │ gloo │ cpu",
                 "mesh_dp", "mesh_tp", "raw/topology/vm.json", "Missing",
                 "The ranks use gloo, not NCCL", "expected on CPU ranks"):
        assert part in text, (part, result.stdout)
    assert "network:" not in text  # one host: nothing links hosts


def test_json_says_what_is_missing(cli: Callable[..., Result], tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(SAMPLES / "tp2_dp2", run, ignore=shutil.ignore_patterns("tables"))
    shutil.rmtree(run / "raw" / "topology")
    result = cli("topology", str(run), "--format", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["nccl_logs"] is False and data["world_size"] == 4 and data["backends"] == ["gloo"]
    assert [h["host"] for h in data["hosts"]] == ["vm"] and data["hosts"][0]["ranks"] == [0, 1, 2, 3]
    assert {g["desc"] for g in data["process_groups"]} == {"default_pg", "mesh_dp", "mesh_tp"}
    assert data["topology_captures"] == []
    assert any(line.startswith("topology captures: none") for line in data["missing"]), data["missing"]


def test_nccl_gpu_traces_without_logs_say_how_to_get_them(cli: Callable[..., Result], tmp_path: Path) -> None:
    """GPU ranks on NCCL whose logs were not kept: two hosts, GPU captures, and the recipe for the logs."""
    run = tmp_path / "run"
    shutil.copytree(SAMPLES / "synth_2x8_tp8_dp2", run, ignore=shutil.ignore_patterns("tables"))
    shutil.rmtree(run / "raw" / "nccl")
    result = cli("topology", str(run), "--format", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [h["host"] for h in data["hosts"]] == ["gpu-node-00", "gpu-node-01"]
    assert data["hosts"][1]["ranks"] == list(range(8, 16)) and data["backends"] == ["nccl"]
    assert len(data["topology_captures"]) == 2
    assert any("NCCL_DEBUG=INFO" in line for line in data["missing"]), data["missing"]
    text = " ".join(cli("topology", str(run)).stdout.split())
    assert "cuda:0-7" in text and "2 host(s), nccl" in text


def test_plain_trace_folder_is_not_a_run(cli: Callable[..., Result], tmp_path: Path) -> None:
    folder = tmp_path / "traces"
    shutil.copytree(SAMPLES / "tp2_dp2" / "raw" / "traces", folder)
    data = json.loads(cli("topology", str(folder), "--format", "json").stdout)
    assert data["topology_captures"] == [] and len(data["hosts"]) == 1
    assert any("not a `commprof record` run directory" in line for line in data["missing"])


def test_json_says_which_shape(cli: Callable[..., Result], tmp_path: Path) -> None:
    with_logs = json.loads(cli("topology", str(SAMPLES / "synth_2x8_tp8_dp2"), "--format", "json").stdout)
    assert with_logs["nccl_logs"] is True and with_logs["communicators"]
    without = json.loads(cli("topology", str(SAMPLES / "tp2_dp2"), "--format", "json",
                             env={"COMMPROF_CACHE_DIR": str(tmp_path)}).stdout)
    assert without["nccl_logs"] is False and without["schema_version"] == with_logs["schema_version"]
