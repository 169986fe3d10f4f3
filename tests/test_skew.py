"""analyzers/skew.py: matching, waits, host clock alignment, and exposed comm split into wait and transfer.

Oracles are synthetic runs (labelled synthetic in their manifests) whose answers are known by
construction: the fixed-step template of commprof.synth_run (a straggler late by a known delay) and the
generator with per-host clock offsets injected.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

import commprof
from commprof.analyzers.pipeline import Analysis
from commprof.synth import SynthConfig, generate
from commprof.synth_run import make_run

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = [ROOT / "sample_traces" / name for name in ("gloo_4rank_profiler", "tp2_dp2", "tp2_pp2_dp2")]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Analysis, Analysis]:
    """The same 64-rank template with and without a straggler (rank 37, 50 µs late at every call)."""
    folder = tmp_path_factory.mktemp("skew")
    late = make_run(folder / "late", ranks=64, straggler_rank=37, straggler_delay_us=50)
    clean = make_run(folder / "clean", ranks=64, straggler_rank=37, straggler_delay_us=0)
    return commprof.analyze(late), commprof.analyze(clean)


@pytest.fixture(scope="module")
def straggler_run(runs: tuple[Analysis, Analysis]) -> Analysis:
    return runs[0]


def _split_adds_up(analysis: Analysis) -> None:
    steps = analysis.steps
    assert steps.height > 0
    assert (steps["exposed_wait_ns"] + steps["exposed_transfer_ns"] == steps["exposed_comm_ns"]).all()
    assert (steps["exposed_wait_ns"] >= 0).all() and (steps["exposed_transfer_ns"] >= 0).all()
    ranks = analysis.rank_summary
    assert (ranks["exposed_wait_ns"] + ranks["exposed_transfer_ns"] - ranks["exposed_comm_ns"]).abs().max() <= 1


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: p.name)
def test_wait_and_transfer_add_up_on_samples(sample: Path) -> None:
    _split_adds_up(commprof.analyze(sample))


def test_wait_and_transfer_add_up_on_64_ranks(straggler_run: Analysis) -> None:
    _split_adds_up(straggler_run)


def test_straggler_peers_extra_exposed_time_is_all_wait(runs: tuple[Analysis, Analysis]) -> None:
    late, clean = ({r["rank"]: r for r in a.rank_summary.iter_rows(named=True)} for a in runs)
    assert all(clean[r]["exposed_wait_ns"] == 0 for r in clean)  # nobody waits in the clean run
    groups = runs[0].process_groups.filter((pl.col("dimension") != "world") & pl.col("ranks").list.contains(37))
    peers = {r for members in groups["ranks"].to_list() for r in members} - {37}
    tp_peers = set(groups.filter(pl.col("dimension") == "tp")["ranks"][0]) - {37}
    for rank in peers:
        extra = late[rank]["exposed_comm_ns"] - clean[rank]["exposed_comm_ns"]
        extra_wait = late[rank]["exposed_wait_ns"] - clean[rank]["exposed_wait_ns"]
        assert extra == extra_wait, rank  # what the straggler costs the ranks it talks to is all waiting
        assert extra == (50_000 if rank in tp_peers else extra), rank
    assert late[37]["exposed_wait_ns"] == 0
    # further away (a peer's peer, through a call partly hidden behind compute) the delay arrives as a
    # later start: the call then transfers after the last arrival, which is transfer, not wait
    a = runs[0]
    top = a.stragglers.sort("caused_wait_ns_per_step", descending=True).row(0, named=True)
    assert top["rank"] == 37 and top["wait_ns_per_step"] == 0 and top["times_last"] > 0


def test_matching_says_how(straggler_run: Analysis) -> None:
    assert straggler_run.match_by in ("seq", "seq and order")  # the generator writes Seq on every call
    sample = commprof.analyze(SAMPLES[0])  # a plain torch.profiler Gloo run: no seq
    assert sample.match_by == "order"
    assert sample.collectives.filter(pl.col("match_key").is_not_null())["match_key"].str.contains("#").all()


@pytest.mark.parametrize(("offsets", "seed"), [((0.0, 137.0), 0), ((0.0, -2500.0, 910.5, 44.0), 3)])
def test_host_clocks_recovered_within_5us(tmp_path: Path, offsets: tuple[float, ...], seed: int) -> None:
    nodes = len(offsets)
    cfg = SynthConfig(nodes=nodes, gpus_per_node=4, sizes={"tp": 4, "dp": nodes}, steps=3, layers=2,
                      clock_offsets_us=offsets, seed=seed)
    generate(cfg, tmp_path / "clocks")
    a = commprof.analyze(tmp_path / "clocks")
    fitted = {r["host"]: r["offset_ns"] for r in a.host_clocks.iter_rows(named=True)}
    assert len(fitted) == nodes
    reference = offsets[0]
    for i, host in enumerate(cfg.hosts):
        assert abs(fitted[host] - (offsets[i] - reference) * 1000) <= 5_000, (host, fitted[host], offsets[i])
    assert set(a.host_clocks["fit"].to_list()) == {"reference", "aligned"}
    # waits measured on aligned clocks: a clean run has (almost) no wait across hosts
    dp = a.collectives.filter(pl.col("dimension") == "dp")
    assert dp["wait_ns"].max() < 5_000 + 0.05 * (dp["end_ns"] - dp["start_ns"]).max()


def test_cached_reopen_does_not_reparse_nccl_logs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = SynthConfig(nodes=2, gpus_per_node=2, sizes={"tp": 2, "dp": 2}, steps=2, layers=1)
    generate(cfg, tmp_path / "run")
    first = commprof.analyze(tmp_path / "run")
    assert first.tables.sidecars.nccl_comms.height > 0

    import commprof.ingest.nccl_logs as nccl

    def refuse(*_: object, **__: object) -> None:
        raise AssertionError("NCCL logs parsed again on a cached re-open")

    monkeypatch.setattr(nccl, "load_nccl", refuse)
    again = commprof.analyze(tmp_path / "run")
    assert_tiers = first.process_groups.select("pg", "tier", "tier_source").sort("pg")
    assert again.process_groups.select("pg", "tier", "tier_source").sort("pg").equals(assert_tiers)
