"""``commprof topology``: text and JSON views of what NCCL saw, output files, and one-line errors."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

from click.testing import Result

FIXTURES = Path(__file__).parent / "fixtures" / "nccl"


def test_text_output(cli: Callable[..., Result]) -> None:
    result = cli("topology", str(FIXTURES / "ib_gdr_pxn_2.23"))
    assert result.exit_code == 0, result.output
    out = result.stdout
    for text in ("NCCL topology", "2.23.4+cuda12.4", "gpu-a", "gpu-b", "0x4d5e6f708192a3b4", "net/IB ×2 GDR PXN",
                 "p2p/CUMEM ×6", "mlx5_0…mlx5_3 (4) IB GDR", "AllReduce", "│ ib ", "Parsed 194 of 234"):  # fmt: skip
        assert text in out, text


def test_text_output_tiers_and_skips(cli: Callable[..., Result]) -> None:
    out = " ".join(cli("topology", str(FIXTURES / "mixed_prefixes" / "job.log")).stdout.split())
    assert "0xa3b4c5d6e7f8091a" in out and "malformed 1" in out and "1 interleaved line(s)" in out
    assert "4 ranks, 2 node(s)" in out and "foreign 4" in out


def test_json_output(cli: Callable[..., Result]) -> None:
    result = cli("topology", str(FIXTURES / "roce_2.27"), "--format", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["schema_version"] == 2
    assert data["nccl_versions"] == ["2.27.3+cuda12.4"]
    comms = {c["comm_id"]: c for c in data["communicators"]}
    world = comms["0x5e6f708192a3b4c5"]
    assert {k: world[k] for k in ("nranks", "nnodes", "hosts", "tier", "networks")} == {
        "nranks": 4, "nnodes": 2, "hosts": ["roce1", "roce2"], "tier": "roce", "networks": ["roce"],
    }  # fmt: skip
    assert sorted(world["transports"]) == ["net/IB", "p2p/CUMEM"]
    assert comms["0x5e6f708192a3b4c5/s1c0"]["parent_comm"] == "0x5e6f708192a3b4c5"
    hosts = {h["host"]: h for h in data["hosts"]}
    assert hosts["roce1"]["ranks"] == [0, 1] and hosts["roce1"]["nics"][0]["speed_mbps"] == 200000
    assert data["parse_stats"]["skipped"] == {"other_nccl": 28}


def test_output_file(cli: Callable[..., Result], tmp_path: Path) -> None:
    target = tmp_path / "topo.json"
    result = cli("topology", str(FIXTURES / "socket_2.30"), "--format", "json", "-o", str(target))
    assert result.exit_code == 0 and result.stdout == ""
    assert json.loads(target.read_text())["communicators"][0]["tier"] == "ethernet"
    text = tmp_path / "topo.txt"
    assert cli("topology", str(FIXTURES / "socket_2.30"), "-o", str(text)).exit_code == 0
    assert "ethernet" in text.read_text() and "WARN" in text.read_text()


def test_run_directory(cli: Callable[..., Result], tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "efa_2.22", run / "raw" / "nccl")
    (run / "manifest.json").write_text("{}")
    data = json.loads(cli("topology", str(run), "--format", "json").stdout)
    assert data["communicators"][0]["networks"] == ["efa"] and data["files"]["logs"] == 1


def test_missing_path_is_one_line_exit_2(cli: Callable[..., Result], tmp_path: Path) -> None:
    result = cli("topology", str(tmp_path / "nope"))
    assert result.exit_code == 2
    assert result.stderr.strip().count("\n") == 0 and "no such file or folder" in result.stderr
    assert "Traceback" not in result.output


def test_no_logs_is_one_line_exit_2(cli: Callable[..., Result], tmp_path: Path) -> None:
    (tmp_path / "train.log").write_text("epoch 1 loss 2.0\n")
    for target in (tmp_path, tmp_path / "train.log"):
        result = cli("topology", str(target))
        assert result.exit_code == 2 and result.stderr.startswith("commprof: error:"), result.output
        assert result.stderr.strip().count("\n") == 0


def test_unwritable_output_is_one_line_exit_2(cli: Callable[..., Result], tmp_path: Path) -> None:
    result = cli("topology", str(FIXTURES / "efa_2.22"), "-o", str(tmp_path / "missing" / "out.txt"))
    assert result.exit_code == 2 and "cannot write output" in result.stderr
