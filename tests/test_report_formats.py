"""Every check/analyze/diff output format against its published contract: JSON against
docs/schema/*.json (draft 2020-12), JUnit XML against tests/fixtures/junit.xsd, Markdown's shape."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result
from test_check_synth import synthetic_run

ROOT = Path(__file__).resolve().parents[1]
SCHEMAS = ROOT / "docs" / "schema"
RULES = ("--max-exposed-comm-pct", "24", "--max-exposed-ms-per-step", "1", "--max-straggler-wait-ms", "0.25",
         "--fail-on-findings", "info", "-r", "dimension.tp.max_exposed_comm_pct=5")


def _validator(name: str) -> Any:
    jsonschema = pytest.importorskip("jsonschema")
    referencing = pytest.importorskip("referencing")
    schemas = {p.name: json.loads(p.read_text()) for p in SCHEMAS.glob("*.schema.json")}
    registry = referencing.Registry().with_resources(
        (s["$id"], referencing.Resource.from_contents(s)) for s in schemas.values())
    jsonschema.Draft202012Validator.check_schema(schemas[name])
    return jsonschema.Draft202012Validator(schemas[name], registry=registry,
                                           format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)


@pytest.fixture
def synth(tmp_path: Path) -> Path:
    return synthetic_run(tmp_path / "synth")


def test_analyze_json_matches_schema(cli: Callable[..., Result], sample_run: Path, synth: Path) -> None:
    validator = _validator("analyze.schema.json")
    for run in (sample_run, synth):
        result = cli("analyze", str(run), "--format", "json")
        assert result.exit_code == 0
        validator.validate(json.loads(result.stdout))


def test_check_json_matches_schema(cli: Callable[..., Result], synth: Path, sample_run: Path, tmp_path: Path) -> None:
    validator = _validator("check.schema.json")
    baseline = tmp_path / "base.json"
    cli("check", str(synth), "--json", str(baseline))
    for args in ((str(synth), *RULES, "--baseline", str(baseline)), (str(sample_run), *RULES), (str(synth),)):
        result = cli("check", *args, "--format", "json")
        assert result.exit_code in (0, 1)
        doc = json.loads(result.stdout)
        validator.validate(doc)
        assert doc["report"]["schema_version"] == 3


def test_diff_json_matches_schema(cli: Callable[..., Result], synth: Path, sample_run: Path) -> None:
    result = cli("diff", str(synth), str(sample_run), "--format", "json")
    assert result.exit_code == 0
    _validator("diff.schema.json").validate(json.loads(result.stdout))


def _junit(cli: Callable[..., Result], *args: str) -> bytes:
    result = cli("check", *args, "--format", "junit")
    assert result.exit_code in (0, 1)
    return result.stdout.encode()


def test_junit_validates_against_xsd(cli: Callable[..., Result], synth: Path) -> None:
    etree = pytest.importorskip("lxml.etree")
    schema = etree.XMLSchema(etree.parse(str(ROOT / "tests" / "fixtures" / "junit.xsd")))
    for args in ((str(synth), *RULES), (str(synth),), (str(synth), "--max-exposed-comm-pct", "90")):
        xml = etree.fromstring(_junit(cli, *args))
        schema.assertValid(xml)


def test_junit_one_testcase_per_rule(cli: Callable[..., Result], synth: Path) -> None:
    import xml.etree.ElementTree as ET

    root = ET.fromstring(_junit(cli, str(synth), *RULES))
    suite = root.find("testsuite")
    assert suite is not None
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert set(cases) == {"max_exposed_comm_pct", "max_exposed_ms_per_step", "max_straggler_wait_ms",
                          "fail_on_findings", "dimension.tp.max_exposed_comm_pct"}
    # failures: exposed share, the straggler wait and the finding naming that straggler (rank 1, info: 3 steps)
    assert suite.get("tests") == "5" and suite.get("failures") == "3" and suite.get("skipped") == "1"
    assert "straggler" in (cases["fail_on_findings"].find("failure").get("message") or "")  # type: ignore[union-attr]
    failure = cases["max_exposed_comm_pct"].find("failure")
    assert failure is not None and "rank" in (failure.get("message") or "") and "25.0% > 24.0%" in failure.get(
        "message", "")
    assert cases["dimension.tp.max_exposed_comm_pct"].find("skipped") is not None
    assert cases["max_exposed_ms_per_step"].find("failure") is None


def test_markdown_summary(cli: Callable[..., Result], synth: Path, tmp_path: Path) -> None:
    summary = tmp_path / "summary.md"
    result = cli("check", str(synth), *RULES, "--markdown", str(summary))
    assert result.exit_code == 1
    text = summary.read_text()
    assert text.startswith("## ❌ commprof check FAILED")
    assert "| result | rule | measured | allowed | detail |" in text
    assert "| ❌ fail | `max_exposed_comm_pct` | 25.0% | 24.0% |" in text
    assert "### Failures" in text and "- rank 0: 25.0% > 24.0% allowed" in text
    ok = cli("check", str(synth), "--max-exposed-comm-pct", "90", "--format", "markdown")
    assert ok.exit_code == 0 and ok.stdout.startswith("## ✅ commprof check passed")
