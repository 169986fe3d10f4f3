"""Every NCCL log fixture parses to the communicators, hosts, transports, NICs and tiers written by
hand in its ``<fixture>.expected.json`` (see tests/fixtures/nccl/make_fixtures.py for what each
fixture stands for)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from commprof.ingest.nccl_logs import build_tables, load_nccl
from commprof.nccl import summarize

FIXTURES = Path(__file__).parent / "fixtures" / "nccl"
NAMES = sorted(p.name.removesuffix(".expected.json") for p in FIXTURES.glob("*.expected.json"))
COMM_KEYS = ("nranks", "nnodes", "hosts", "networks", "nvls", "tier", "tier_source", "init_func", "parent_comm")


def _load(name: str) -> tuple[dict[str, Any], dict[str, Any], pl.DataFrame]:
    run = load_nccl(FIXTURES / name)
    tables = build_tables(run.logs, run.topologies, run.graphs)
    return summarize(run, tables), json.loads((FIXTURES / f"{name}.expected.json").read_text()), tables.nccl_links


def test_every_fixture_has_expectations() -> None:
    skip = ("topology_xml", "wild", "__pycache__")  # wild: tests/test_nccl_wild.py
    folders = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir() and p.name not in skip)
    assert folders == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_fixture_communicators(name: str) -> None:
    summary, expected, _ = _load(name)
    assert summary["nccl_versions"] == expected["nccl_versions"]
    assert {h["host"]: h["ranks"] for h in summary["hosts"]} == expected["hosts"]
    got = {c["comm_id"]: c for c in summary["communicators"]}
    assert sorted(got) == sorted(c["comm_id"] for c in expected["communicators"])
    for want in expected["communicators"]:
        comm = got[want["comm_id"]]
        assert comm["ranks_seen"] == comm["nranks"]
        for key in COMM_KEYS:
            if key in want:
                assert comm[key] == want[key], (want["comm_id"], key)
        assert sorted(comm["transports"]) == want["transports"]
        for label, flags in want.get("transport_flags", {}).items():
            assert comm["transports"][label] == flags
        for key in ("algorithms", "ranks_by_host", "colls"):
            if key in want:
                assert comm[key] == want[key], (want["comm_id"], key)


@pytest.mark.parametrize("name", NAMES)
def test_fixture_link_tiers_and_stats(name: str) -> None:
    summary, expected, links = _load(name)
    label = pl.when(pl.col("transport").is_in(["shm", "nvls"])).then("transport")
    per_label = (
        links.with_columns(label.otherwise(pl.concat_str("transport", pl.lit("/"), "detail")).alias("label"))
        .group_by("label")
        .agg(pl.col("tier").unique())
    )
    assert {row[0]: row[1] for row in per_label.iter_rows()} == {k: [v] for k, v in expected["link_tiers"].items()}
    stats = summary["parse_stats"]
    assert sum(stats["parsed"].values()) + sum(stats["skipped"].values()) == stats["messages_total"]
    assert stats["unattributed_links"] == expected["unattributed_links"]
    for kind, most in expected.get("skipped_max", {}).items():
        assert stats["skipped"].get(kind, 0) <= most, kind
    for kind, least in expected.get("skipped_min", {}).items():
        assert stats["skipped"].get(kind, 0) >= least, kind
    if "interleaved_lines" in expected:
        assert stats["interleaved_lines"] == expected["interleaved_lines"]
    if "warnings_total" in expected:
        assert summary["warnings_total"] == expected["warnings_total"]


WITH_NICS = [n for n in NAMES if "nics" in json.loads((FIXTURES / f"{n}.expected.json").read_text())]


@pytest.mark.parametrize("name", WITH_NICS)
def test_fixture_nics(name: str) -> None:
    summary, expected, _ = _load(name)
    hosts = {h["host"]: h for h in summary["hosts"]}
    for host, nics in expected["nics"].items():
        by_name = {n["name"]: n for n in hosts[host]["nics"]}
        for want in nics:
            got = by_name[want["name"]]
            assert {k: got.get(k) for k in want} == want


def test_nvls_availability_per_host() -> None:
    summary, expected, _ = _load("cumem_nvls_2.22")
    assert {h["host"]: h["nvls_available"] for h in summary["hosts"]} == expected["nvls_available"]


def test_comm_table_columns_and_identity() -> None:
    """commId is shared by all ranks of a communicator; the pointer is per process."""
    run = load_nccl(FIXTURES / "roce_2.27")
    comms = build_tables(run.logs).nccl_comms
    world = comms.filter(pl.col("comm_id") == "0x5e6f708192a3b4c5").sort("rank")
    assert world["rank"].to_list() == [0, 1, 2, 3]
    assert world["host"].to_list() == ["roce1", "roce1", "roce2", "roce2"]
    assert world["nnodes"].to_list() == [2, 2, 2, 2] and world["local_rank"].to_list() == [0, 1, 0, 1]
    assert world["comm_ptr"].n_unique() == 4
    split = comms.filter(pl.col("comm_id") == "0x5e6f708192a3b4c5/s1c1").sort("rank")
    assert split["comm_id_source"].to_list() == ["split", "split"]
    assert split["color"].to_list() == [1, 1] and split["split_count"].to_list() == [1, 1]
    assert split["host"].to_list() == ["roce1", "roce2"]
    assert set(comms["version"].to_list()) == {"2.27.3+cuda12.4"}
    assert comms["init_total_s"].min() == pytest.approx(0.84)


def test_colls_table_bytes_and_comm() -> None:
    run = load_nccl(FIXTURES / "cumem_nvls_2.22")
    colls = build_tables(run.logs).nccl_colls
    assert colls["comm_id"].null_count() == 0
    ag = colls.filter(pl.col("op") == "AllGather")
    assert ag.height == 8 and set(ag["datatype"]) == {"bfloat16"} and set(ag["bytes"]) == {2 << 20}
    ar = colls.filter(pl.col("op") == "AllReduce")
    assert set(ar["nranks"]) == {8} and set(ar["redop"]) == {"sum"} and set(ar["bytes"]) == {4 << 24}
    assert sorted(colls.filter(pl.col("comm_id") == "0x2b3c4d5e6f708193")["rank"].unique()) == [0, 1, 2, 3]
