"""Findings and what-if as a user meets them: analyze's first lines, JSON, Markdown, check's gate (fails,
passes, skips), diff's new/gone, and bad --what-if values."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from commprof.report.findings_text import finding_lines
from commprof.synth import SynthConfig, generate

Cli = Callable[..., Result]
SMALL = dict(nodes=2, gpus_per_node=8, sizes={"tp": 8, "dp": 2}, steps=2, micro_batches=2, layers=2, seed=3)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("findings-cli")
    out = {"bad": root / "bad", "good": root / "good"}
    generate(SynthConfig(**SMALL, tp_across_nodes=True), out["bad"], compresslevel=1)
    generate(SynthConfig(**SMALL), out["good"], compresslevel=1)
    return out


def test_text_starts_with_the_top_findings_and_their_savings(cli: Cli, runs: dict[str, Path]) -> None:
    lines = cli("analyze", str(runs["bad"])).stdout.splitlines()
    assert lines[0].startswith("Findings (1; top 1, estimated saving per step)")
    assert lines[1].startswith("  1. [high] TP crosses nodes (ib) while DP stays inside them (nvlink) — saves ~")
    assert lines[2].strip().startswith("fix: place tp fastest")
    assert cli("analyze", str(runs["good"])).stdout.startswith("Findings: none")
    assert finding_lines({"findings_computed": False, "findings": []}) == [
        "Findings: not computed (no analyzed step in this run)"]


def test_json_and_markdown_carry_the_same_findings(cli: Cli, runs: dict[str, Path]) -> None:
    doc = json.loads(cli("analyze", str(runs["bad"]), "--format", "json").stdout)
    assert doc["findings_computed"] is True and doc["what_if"] is None
    (f,) = doc["findings"]
    assert (f["id"], f["key"], f["severity"], f["dimension"], f["tier"]) == (
        "tp_across_nodes", "tp_across_nodes:tp", "high", "tp", "ib")
    assert 0 < f["saving_ns_per_step"] <= f["numbers"]["exposed_ns_per_step"]
    md = cli("analyze", str(runs["bad"]), "--format", "markdown").stdout
    assert f"1. [high] {f['title']}" in md and f"{f['saving_ns_per_step'] / 1e6:.2f} ms/step" in md


def test_check_fails_on_a_finding_passes_without_and_skips_when_not_computed(cli: Cli, runs: dict[str, Path],
                                                                            tmp_path: Path) -> None:
    bad = cli("check", str(runs["bad"]), "--fail-on-findings", "high", "--format", "json")
    assert bad.exit_code == 1
    rule = next(r for r in json.loads(bad.stdout)["rules"] if r["name"] == "fail_on_findings")
    assert rule["status"] == "fail" and rule["violations"][0]["where"]["id"] == "tp_across_nodes"
    good = cli("check", str(runs["good"]), "--fail-on-findings", "info", "--format", "json")
    assert good.exit_code == 0
    assert next(r for r in json.loads(good.stdout)["rules"] if r["name"] == "fail_on_findings")["status"] == "pass"
    # a saved report without findings (another tool, or an older commprof) cannot pass the gate: skip
    report = json.loads(cli("analyze", str(runs["bad"]), "--format", "json").stdout)
    for key in ("findings", "findings_computed"):
        report.pop(key)
    saved = tmp_path / "no-findings.json"
    saved.write_text(json.dumps(report))
    empty = cli("check", str(saved), "--fail-on-findings", "high", "--format", "json")
    assert empty.exit_code == 0
    rule = next(r for r in json.loads(empty.stdout)["rules"] if r["name"] == "fail_on_findings")
    assert rule["status"] == "skip" and "holds no findings" in rule["detail"]


def test_diff_reports_new_and_gone_findings(cli: Cli, runs: dict[str, Path]) -> None:
    doc = json.loads(cli("diff", str(runs["good"]), str(runs["bad"]), "--format", "json").stdout)
    assert [f["key"] for f in doc["findings"]["new"]] == ["tp_across_nodes:tp"] and doc["findings"]["gone"] == []
    back = json.loads(cli("diff", str(runs["bad"]), str(runs["good"]), "--format", "json").stdout)
    assert [f["key"] for f in back["findings"]["gone"]] == ["tp_across_nodes:tp"]
    text = cli("diff", str(runs["good"]), str(runs["bad"])).stdout
    assert "new: [high] TP crosses nodes" in text


def test_what_if_says_it_is_an_estimate_and_how(cli: Cli, runs: dict[str, Path]) -> None:
    out = cli("analyze", str(runs["bad"]), "--what-if", "tp:nvlink", "--what-if", "dp:ib").stdout
    what = next(line for line in out.splitlines() if line.startswith("What-if"))
    assert "tp:nvlink + dp:ib (an ESTIMATE, not a measurement)" in what
    assert "how: alpha-beta transfer on measured bytes" in out
    doc = json.loads(cli("analyze", str(runs["bad"]), "--what-if", "ib=25", "--format", "json").stdout)
    assert doc["what_if"]["estimate"] is True and doc["what_if"]["changes"] == ["ib=25"]
    assert doc["what_if"]["totals"]["step_ns_after"] > doc["what_if"]["totals"]["step_ns"]  # a slower network


@pytest.mark.parametrize(("value", "message"), [
    ("ib=fast", "expected TIER=GB/s"), ("xyz:nvlink", "'xyz' is not a dimension"),
    ("tp:carrier-pigeon", "expected TIER=GB/s"), ("tp:fddi", "'fddi' is not a tier"), ("ib=0", "more than 0"),
    ("overlap:zz", "'zz' is not a dimension"), ("wormhole=5", "'wormhole' is not a tier"),
])
def test_bad_what_if_is_one_line_exit_2(cli: Cli, runs: dict[str, Path], value: str, message: str) -> None:
    result = cli("analyze", str(runs["good"]), "--what-if", value)
    assert result.exit_code == 2
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_a_what_if_that_cannot_happen_or_be_estimated_is_refused(cli: Cli, tmp_path: Path) -> None:
    """tp=8 on two nodes of 4: tp cannot move onto NVLink, and tp=4,dp=2 has no dp traffic to scale from;
    each refusal is one line, exit 2, with the reason."""
    run = tmp_path / "tp8"
    generate(SynthConfig(nodes=2, gpus_per_node=4, sizes={"tp": 8}, steps=2, micro_batches=2, layers=2, seed=1),
             run, compresslevel=1)
    for value, reason in (("tp:nvlink", "cannot happen: tp groups have 8 ranks and a node has 4"),
                          ("layout:tp=4,dp=2", "cannot be estimated from this run: it has no dp traffic"),
                          ("layout:tp=4", "tp=4 is 4 ranks, the run has 8")):
        result = cli("analyze", str(run), "--what-if", value)
        assert result.exit_code == 2, (value, result.output)
        assert reason in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert cli("analyze", str(run), "--what-if", "tp:ib").exit_code == 0  # onto the network: it can happen
    bad = cli("analyze", str(run), "--what-if", "layout:tp=4,xx=2")
    assert bad.exit_code == 2 and "unknown dimension 'xx'" in bad.stderr
    gate = cli("check", str(run), "--fail-on-findings", "medium", "--format", "json")
    assert gate.exit_code == 1 and "group_larger_than_node" in gate.stdout


def test_a_what_if_that_touches_nothing_says_so(cli: Cli, runs: dict[str, Path]) -> None:
    doc = json.loads(cli("analyze", str(runs["good"]), "--what-if", "cp:nvlink", "--what-if", "roce=10",
                         "--format", "json").stdout)
    w = doc["what_if"]
    assert w["totals"]["step_ns_after"] == w["totals"]["step_ns"]
    assert [x.split(":")[0] for x in w["warnings"]] == ["cp", "roce=10"]
    assert all("changes nothing" in x for x in w["warnings"])


def test_ci_docs_findings_gate_runs_as_written(cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/ci.md's "Findings gate" block: every command, as written, with the exit code it states."""
    import re
    import shlex

    text = (Path(__file__).resolve().parents[1] / "docs" / "ci.md").read_text()
    block = text.split("## Findings gate", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(tmp_path)
    ran = 0
    for line in block.strip().splitlines():
        command, _, comment = line.partition("#")
        args = shlex.split(command)
        assert args[0] == "commprof"
        result = cli(*args[1:])
        want = re.search(r"exit (\d)", comment)
        assert result.exit_code == (int(want.group(1)) if want else 0), (line, result.output)
        if want and '"' in comment:
            assert comment.split('"')[1] in result.output, (line, result.output)
        ran += 1
    assert ran == 4


@pytest.mark.parametrize(("args", "message"), [
    (("--socket-fallback", "--network", "ethernet"), "--socket-fallback needs --network ib or roce"),
    (("--alltoall-imbalance", "2"), "needs an ep dimension"),
    (("--layout", "ep=8,dp=2", "--alltoall-imbalance", "9"), "at most the EP size"),
    (("--alltoall-imbalance", "0.5"), "at least 1"),
    (("--desync", "16"), "--desync: rank 16 is not in 0..15"),
])
def test_synth_fault_options_refuse_what_cannot_be(cli: Cli, tmp_path: Path, args: tuple[str, ...],
                                                   message: str) -> None:
    result = cli("synth", str(tmp_path / "x"), *args)
    assert result.exit_code == 2 and message in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
