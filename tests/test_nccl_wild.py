"""NCCL logs as people post them (tests/fixtures/nccl/wild, see its README): partial, interleaved,
prefix-stripped or launcher-prefixed, NCCL 2.18 - 2.30. Each parses to the communicators (inferred
or named), link tiers and host tiers written by hand in ``<fixture>.expected.json``, and the text
view runs on each without error."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from commprof.ingest.nccl_logs import build_tables, load_nccl
from commprof.nccl import summarize

WILD = Path(__file__).parent / "fixtures" / "nccl" / "wild"
NAMES = sorted(p.name.removesuffix(".expected.json") for p in WILD.glob("*.expected.json"))
COMM_KEYS = ("comm_id", "inferred", "nranks", "ranks_seen", "nnodes", "tier", "tier_source")


def _summary(name: str) -> tuple[dict[str, Any], dict[str, Any], dict[str, str]]:
    run = load_nccl(WILD / name)
    tables = build_tables(run.logs, run.topologies, run.graphs)
    links = tables.nccl_links.select("transport", "detail", "tier").unique().rows()
    labels = {(t if t in ("shm", "nvls") else f"{t}/{d}"): tier for t, d, tier in links}
    return summarize(run, tables), json.loads((WILD / f"{name}.expected.json").read_text()), labels


def test_every_wild_fixture_has_expectations_and_a_readme_entry() -> None:
    folders = sorted(p.name for p in WILD.iterdir() if p.is_dir() and p.name != "__pycache__")
    assert folders == NAMES and len(NAMES) >= 10
    readme = (WILD / "README.md").read_text()
    assert all(f"`{name}`" in readme for name in NAMES)
    versions = {name.rsplit("_", 1)[1] for name in NAMES}
    assert {"2.18", "2.30"} <= versions and len(versions) >= 8


@pytest.mark.parametrize("name", NAMES)
def test_wild_fixture(name: str) -> None:
    summary, want, labels = _summary(name)
    assert summary["nccl_versions"] == want["nccl_versions"]
    got = [{k: c[k] for k in COMM_KEYS} | {"transports": sorted(c["transports"])} for c in summary["communicators"]]
    assert got == want["communicators"]
    hosts = {h["host"]: {"intra": [h["intra_host"]["tier"], h["intra_host"]["source"]],
                         "inter": [h["inter_host"]["tier"], h["inter_host"]["source"]]} for h in summary["hosts"]}
    assert hosts == want["hosts"]
    assert labels == want["link_tiers"]
    stats = summary["parse_stats"]
    assert stats["skipped"] == want["skipped"]
    assert stats["unattributed_links"] == want["unattributed_links"]
    assert stats["inferred_links"] == want["inferred_links"]
    assert sum(stats["parsed"].values()) + sum(stats["skipped"].values()) == stats["messages_total"]
    for comm in summary["communicators"]:  # a user always sees why a tier is what it is
        assert comm["tier"] == "unknown" or comm["tier_reason"], comm["comm_id"]


@pytest.mark.parametrize("name", NAMES)
def test_wild_fixture_text_view(name: str, cli: Callable[..., Result]) -> None:
    result = cli("topology", str(WILD / name))
    assert result.exit_code == 0, result.output
    _, want, _ = _summary(name)
    out = result.stdout
    assert ("inferred" in out) == any(c["inferred"] for c in want["communicators"])
    for host in want["hosts"]:
        assert host in out
