"""Generated runs read like real ones: the same trace fields and types as a real GPU trace, NCCL logs
that the NCCL parser takes without a malformed line, `commprof topology` naming every tier, and the
`commprof synth` command's options and errors."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from commprof.cli import main
from commprof.synth import SynthConfig, generate
from commprof.synth.config import parse_version

SHARED = Path(__file__).resolve().parents[2] / "shared"
REAL = SHARED / "real_traces" / "hta" / "nccl_parser_config" / "nccl_data.json.gz"
SAMPLE = Path(__file__).resolve().parents[1] / "sample_traces" / "synth_2x8_tp8_dp2"


def _events(trace: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """One event of each kind we compare: comm kernel, compute kernel, launch, record_param_comms, step."""
    out: dict[str, dict[str, Any]] = {}
    for e in trace["traceEvents"]:
        name, cat = e.get("name", ""), e.get("cat")
        kind = ("nccl_kernel" if cat == "kernel" and name.startswith("nccl") else "kernel" if cat == "kernel"
                else "launch" if cat == "cuda_runtime" and name == "cudaLaunchKernel"
                else "record_param_comms" if name == "record_param_comms"
                else "step" if name.startswith("ProfilerStep#") else None)
        if kind and kind not in out:
            out[kind] = e
    return out


def _types(d: dict[str, Any]) -> dict[str, type]:
    return {k: float if isinstance(v, int | float) and not isinstance(v, bool) else type(v) for k, v in d.items()}


@pytest.mark.skipif(not REAL.exists(), reason="../shared/real_traces is absent (real GPU traces live there)")
def test_same_fields_and_types_as_a_real_gpu_trace() -> None:
    real = json.loads(gzip.open(REAL).read())
    ours = json.loads(gzip.open(SAMPLE / "raw" / "traces" / "rank-0.json.gz").read())
    for key in ("schemaVersion", "distributedInfo", "deviceProperties", "baseTimeNanoseconds", "traceEvents"):
        assert type(ours[key]) is type(real[key]), key
    for key in ("backend", "rank", "world_size", "pg_count", "pg_config", "nccl_version"):
        assert type(ours["distributedInfo"][key]) is type(real["distributedInfo"][key]), key
    assert set(real["distributedInfo"]["pg_config"][0]) <= set(ours["distributedInfo"]["pg_config"][0])
    mine, theirs = _events(ours), _events(real)
    assert set(theirs) <= set(mine)
    for kind, want in theirs.items():
        got = mine[kind]
        top = _types(want)
        assert {k: t for k, t in _types(got).items() if k in top} == {k: t for k, t in top.items() if k != "id"}, kind
        wanted_args = _types(want.get("args", {}))
        shared = {k: t for k, t in _types(got.get("args", {})).items() if k in wanted_args}
        # every arg the real event has that describes the op is there, with the same type
        for k in ("correlation", "stream", "device", "Collective name", "In msg nelems", "Out msg nelems",
                  "Group size", "dtype", "Process Group Name", "Process Group Description", "Process Group Ranks"):
            if k in wanted_args:
                assert shared.get(k) == wanted_args[k], (kind, k)


@pytest.mark.parametrize("version", ["2.18.1", "2.19.3", "2.21.5", "2.22.3", "2.23.4", "2.26.2", "2.27.3",
                                     "2.29.2", "2.30.7"])
def test_nccl_logs_parse_and_name_every_tier(tmp_path: Path, version: str) -> None:
    cfg = SynthConfig(nodes=2, gpus_per_node=4, sizes={"tp": 4, "dp": 2}, steps=1, micro_batches=1, layers=1,
                      nccl_version=parse_version(version), network="roce" if version > "2.25" else "ib")
    truth = generate(cfg, tmp_path / "run", compresslevel=1)
    out = CliRunner().invoke(main, ["topology", str(tmp_path / "run"), "--format", "json"])
    assert out.exit_code == 0, out.output
    summary = json.loads(out.output)
    assert summary["parse_stats"]["skipped"].get("malformed", 0) == 0
    assert summary["warnings_total"] == 0
    assert summary["nccl_versions"] == [f"{version}+cuda12.4"]
    tiers = {tuple(sorted(r for rs in c["ranks_by_host"].values() for r in rs)): c["tier"]
             for c in summary["communicators"]}
    assert len(summary["communicators"]) == len(truth["process_groups"])
    assert all(c["tier"] in ("nvlink", "roce", "ib") for c in summary["communicators"]), tiers
    want = {g["tier"] for g in truth["process_groups"]}
    assert {c["tier"] for c in summary["communicators"]} == want


def test_cli_bad_options_exit_2(tmp_path: Path) -> None:
    for args in (["--layout", "tp=3"], ["--layout", "tp=8,zz=2"], ["--straggler", "99"], ["--straggler", "x"],
                 ["--slow-link", "nohost"], ["--nccl-version", "2.10"], ["--clock-offset-us", "1,2,3"]):
        out = CliRunner().invoke(main, ["synth", str(tmp_path / "bad"), *args])
        assert out.exit_code == 2, (args, out.output)
        assert "Traceback" not in out.output and out.output.count("\n") <= 2, out.output


def test_same_seed_same_run(tmp_path: Path) -> None:
    args = ["--nodes", "1", "--gpus-per-node", "4", "--layout", "tp=2,pp=2", "--steps", "2", "--seed", "7"]
    for name in ("a", "b"):
        assert CliRunner().invoke(main, ["synth", str(tmp_path / name), *args]).exit_code == 0
    for f in sorted((tmp_path / "a").rglob("*.*")):
        assert f.read_bytes() == (tmp_path / "b" / f.relative_to(tmp_path / "a")).read_bytes(), f
    other = CliRunner().invoke(main, ["synth", str(tmp_path / "c"), *args[:-1], "8"])
    assert other.exit_code == 0
    assert (tmp_path / "c" / "truth.json").read_text() != (tmp_path / "a" / "truth.json").read_text()


def test_sample_is_small_labelled_and_current() -> None:
    size = sum(f.stat().st_size for f in SAMPLE.rglob("*") if f.is_file() and "tables" not in f.parts)
    assert size < 5_000_000
    manifest = json.loads((SAMPLE / "manifest.json").read_text())
    assert manifest["synthetic"] is True and manifest["world_size"] == 16 and len(manifest["hosts"]) == 2
    truth = json.loads((SAMPLE / "truth.json").read_text())
    assert {(g["dimension"], g["tier"]) for g in truth["process_groups"]} == {("world", "ib"), ("tp", "nvlink"),
                                                                               ("dp", "ib")}
