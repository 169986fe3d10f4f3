"""Late ranks judged over steps (analyzers/lateness.py, the ``straggler`` finding) and the ``exposed_comm``
finding, on runs whose answer is known by construction: ``commprof synth`` runs with their group metadata
stripped (record_param_comms, the collective args on kernels, distributedInfo's pg_config: groups and
sizes unknown, calls matched by order, as in traces from an older PyTorch) and hand-built call tables."""

from __future__ import annotations

import gzip
import itertools
import json
import math
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import commprof
from commprof.analyzers import calibration, findings_rules, lateness
from commprof.analyzers.pipeline import Analysis
from commprof.report.analysis_json import build
from commprof.report.findings_text import finding_lines
from commprof.synth import SynthConfig, generate

ONE_NODE: dict[str, Any] = dict(nodes=1, gpus_per_node=8, sizes={"tp": 8}, steps=3, micro_batches=1, layers=2, seed=5)
COMM_HEAVY: dict[str, Any] = dict(nodes=2, gpus_per_node=4, sizes={"tp": 4, "dp": 2}, steps=3, micro_batches=4,
                                  layers=4, model_size_b=1.0, network="ethernet", seed=6)
COLLECTIVE_ARGS = {"Collective name", "In msg nelems", "Out msg nelems", "Group size", "dtype", "In split size",
                   "Out split size", "Process Group Name", "Process Group Description", "Process Group Ranks", "Seq",
                   "Global rank start", "Global rank stride", "Rank", "Is asynchronized op"}


def strip_groups(run: Path, out: Path) -> Path:
    """A plain folder of the run's traces without any group metadata (labelled synthetic)."""
    out.mkdir(parents=True)
    for trace in sorted((run / "raw" / "traces").glob("rank-*.json.gz")):
        with gzip.open(trace, "rt") as fh:
            doc = json.load(fh)
        doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("name") != "record_param_comms"]
        for event in doc["traceEvents"]:
            for key in COLLECTIVE_ARGS & set(event.get("args", {})):
                del event["args"][key]
        doc["distributedInfo"] = {k: doc["distributedInfo"][k] for k in ("backend", "rank", "world_size")}
        doc["traceName"] = "synthetic (commprof synth), group metadata stripped"
        with gzip.open(out / trace.name, "wt", compresslevel=1) as fh:
            json.dump(doc, fh)
    return out


def _analyze(tmp: Path, cfg: dict[str, Any], stripped: bool = True) -> Analysis:
    run = tmp / "run"
    generate(SynthConfig(**cfg), run, compresslevel=1)
    return commprof.analyze(str(strip_groups(run, tmp / "bare") if stripped else run))


def test_a_straggler_in_unknown_groups_is_named_with_its_lateness(tmp_path: Path) -> None:
    a = _analyze(tmp_path, {**ONE_NODE, "steps": 8, "straggler": 5, "straggler_us": 3000})
    assert set(a.collectives["pg"].unique().to_list()) == {"unknown"} and a.match_by == "order"
    # before: every rule needed a classified dimension or a known group size, and this run read "Findings: none"
    (f,) = [f for f in a.finding_list if f.id == "straggler"]
    assert f.ranks == (5,) and f.severity != "info"
    assert f.numbers["late_ns_per_step"] == pytest.approx(3e6, rel=0.05)
    assert (f.numbers["steps_last"], f.numbers["steps_judged"], f.numbers["stretch_steps"]) == (8, 8, 1)
    # 8 ranks, 8 steps, the 8 highest rank-steps all its own: chance 8 / C(64, 8); its work is 3 ms more in every
    # step (8 ranks compared: 8 / 2^8), and the title states the less sure of the two
    assert f.numbers["confidence"] == pytest.approx(1 - 8 / math.comb(64, 8))
    assert f.numbers["work_confidence"] == pytest.approx(1 - 8 / 2 ** 8)
    assert "last in 8 of 8 steps, with " in f.title and "more work of its own per step, more in 8 of 8 (96.9 % sure)" \
        in f.title
    assert "calls of unknown groups (no group metadata), matched by call order across all 8 ranks" in f.detail


def test_three_steps_are_too_few_to_name_a_rank_and_it_says_what_to_do(tmp_path: Path) -> None:
    # record's default window: 3 profiled steps. A rank last in 3 of 3 was called "90 % sure" and [high] on clean
    # jobs beside a busy process (issue 36); now it is info, says why, and names the step count that can tell
    a = _analyze(tmp_path, {**ONE_NODE, "straggler": 5, "straggler_us": 3000})
    (f,) = [f for f in a.finding_list if f.id == "straggler"]
    assert f.ranks == (5,) and f.severity == "info"
    assert "sure" not in f.title
    assert f"3 steps are too few to tell a straggler from a rank a busy host held back: record --active " \
           f"{calibration.advised_steps()}" in f.title


def test_no_straggler_in_unknown_groups_of_a_clean_run(tmp_path: Path) -> None:
    a = _analyze(tmp_path, ONE_NODE)
    assert not [f for f in a.finding_list if f.id == "straggler"]


def _calls(late: list[list[float]]) -> pl.DataFrame:
    """One call per step on 4 ranks; ``late[step]`` the per-rank lateness (the rank with the largest is last,
    the others wait for it that long)."""
    rows = []
    for step, values in enumerate(late):
        last = max(range(4), key=lambda r: values[r])
        rows += [{"match_key": f"g #{step}", "pg": "g", "rank": rank, "late_rank": last, "step": step,
                  "wait_ns": 0 if rank == last else int(values[last] * 1e6)} for rank in range(4)]
    return pl.DataFrame(rows, schema={"match_key": pl.String, "pg": pl.String, "rank": pl.Int32,
                                      "late_rank": pl.Int32, "step": pl.Int64, "wait_ns": pl.Int64})


def test_one_long_hiccup_is_not_a_straggler() -> None:
    # the old rule summed a rank's lateness over steps: one 200 ms stall in 8 steps read as 25 ms per step
    late = [[0.0, 0.0, 0.0, 0.0] for _ in range(8)]
    for step in range(8):
        late[step][step % 4] = 2.0  # everyone last now and then, by 2 ms
    late[3][1] = 200.0
    (x,) = lateness.late_ranks(_calls(late), "test")
    assert not lateness.is_straggler(x, step_ns=100e6)


def test_a_rank_late_every_step_is_a_straggler_and_its_chance_is_stated() -> None:
    late = [[1.0 if r == (step % 3) else 0.0 for r in range(4)] for step in range(8)]
    for step in range(8):
        late[step][2] = 30.0 + step % 3  # rank 2: about 30 ms every step
    (x,) = lateness.late_ranks(_calls(late), "test")
    assert (x.rank, x.steps_last, x.steps, x.top_share) == (2, 8, 8, 8)
    # the 8 highest values are one a step: by luck one rank holds each with 1/4, any of 4 ranks
    assert x.chance == pytest.approx(4 * 0.25 ** 8)
    assert x.late_ns == pytest.approx(31e6)
    assert lateness.is_straggler(x, step_ns=100e6)
    # last in only half of the steps: not "most"
    for step in range(0, 8, 2):
        late[step][2] = 0.0
    (y,) = lateness.late_ranks(_calls(late), "test")
    assert not lateness.is_straggler(y, step_ns=100e6)


def test_no_silent_report_when_exposed_comm_is_large_and_no_rule_names_a_cause(tmp_path: Path) -> None:
    a = _analyze(tmp_path, COMM_HEAVY, stripped=False)
    share = a.totals["exposed_comm_ns"] / a.totals["step_ns"]
    assert share > 0.2 and a.finding_list == ()
    note = a.exposed_note
    assert note is not None
    assert (note.dimension, note.tier, note.op) == ("dp", "ethernet", "all_reduce")
    assert note.share == pytest.approx(share)
    assert note.wait_ns == a.totals["exposed_wait_ns"]
    top = a.dimension_tier.row(0, named=True)
    assert note.place_ns == pytest.approx(top["exposed_ns_per_step"])
    assert f"exposed communication is {100 * share:.1f} % of the step" in note.headline
    assert "most in dp on ethernet, all_reduce" in note.headline and "waiting for late ranks" in note.headline
    # one truth: the text and Markdown views print the note the JSON carries, right under the findings
    report = build(a)
    assert report["exposed_note"]["headline"] == note.headline
    lines = finding_lines(report)
    assert lines[0].startswith("Findings: none")
    assert lines[1] == f"Where the exposed time goes: {note.headline}"
    assert lines[3].strip().startswith("look at: the transfer itself: busbw against the ethernet peak")
    assert f"**Where the exposed time goes: {note.headline}**" in finding_lines(report, markdown=True)


def test_a_wait_dominated_run_of_unknown_groups_names_its_straggler_not_a_note(tmp_path: Path) -> None:
    # the case: groups unknown, most of the exposed time waiting for one late rank
    a = _analyze(tmp_path, {**ONE_NODE, "steps": 8, "straggler": 2, "straggler_us": 60_000})
    assert a.totals["exposed_comm_ns"] / a.totals["step_ns"] > 0.2
    assert a.totals["exposed_wait_ns"] > 0.5 * a.totals["exposed_comm_ns"]
    (f,) = [f for f in a.finding_list if f.id == "straggler"]
    assert f.ranks == (2,) and f.numbers["late_ns_per_step"] == pytest.approx(60e6, rel=0.02)
    assert a.exposed_note is None


def test_no_note_when_a_rule_names_a_cause(tmp_path: Path) -> None:
    a = _analyze(tmp_path, {**COMM_HEAVY, "network": "ib", "dp_overlap": False}, stripped=False)
    assert a.totals["exposed_comm_ns"] / a.totals["step_ns"] > 0.2
    assert a.finding_list[0].id == "dp_sync_exposed" and a.finding_list[0].severity != "info"
    assert a.exposed_note is None


def _work(per_rank_ms: dict[int, list[float]]) -> pl.DataFrame:
    """rank, step, work_ns as lateness.rank_work gives it (hand-built)."""
    rows = [{"rank": r, "step": s, "work_ns": v * 1e6} for r, vs in per_rank_ms.items() for s, v in enumerate(vs)]
    return pl.DataFrame(rows, schema={"rank": pl.Int64, "step": pl.Int64, "work_ns": pl.Float64})


@pytest.mark.parametrize("per_step", [(1, 1, 1, 1), (2, 1, 0, 3), (3, 0, 1, 2), (1, 2, 2, 1)])
def test_the_lateness_chance_is_the_within_step_shuffle(per_step: tuple[int, ...]) -> None:
    # every way of shuffling each step's 3 values over 3 ranks (6 ** 4), the step holding ``t`` top values: how often
    # rank 0 holds ``top`` of them or more, times the 3 ranks any of which could have been the candidate
    m = 3
    for top in range(1, sum(per_step) + 1):
        hits = total = 0
        for perms in itertools.product(itertools.permutations(range(m)), repeat=len(per_step)):
            held = sum(1 for perm, t in zip(perms, per_step, strict=True) if perm.index(0) < t)
            hits += held >= top
            total += 1
        assert lateness._chance(top, list(per_step), m) == pytest.approx(min(1.0, m * hits / total), abs=1e-12)
    assert lateness._chance(0, list(per_step), m) == 1.0


def test_signed_rank_test_is_exact() -> None:
    assert lateness._signed_rank([1.0] * 10) == pytest.approx(2.0 ** -10)
    # |d| ranks 1..4, W+ = 2 + 3 + 4 = 9: the sign assignments reaching 9 are {2,3,4} and {1,2,3,4}
    assert lateness._signed_rank([1.0, 2.0, 3.0, -0.5]) == pytest.approx(2 / 16)
    assert lateness._signed_rank([-1.0] * 5) == 1.0 and lateness._signed_rank([0.0, 0.0]) == 1.0


def test_late_beside_a_faster_partner_but_doing_less_work_is_not_a_straggler() -> None:
    # recorded tp=2 x dp=2 on 2 cores: rank 3 last at every TP call of its pair (78 ms/step, "separated"),
    # yet its work per step was 62 ms under the world's median: its partner was fast, nobody slow
    late = [[0.0, 0.0, 0.0, 30.0 + (step * 5) % 3] for step in range(8)]
    work = _work({0: [130.0] * 8, 1: [124.0] * 8, 2: [21.0] * 8, 3: [77.0] * 8})
    (x,) = lateness.late_ranks(_calls(late), "test", work)
    assert x.rank == 3 and x.separated and x.work_excess_ns is not None and x.work_excess_ns < 0
    assert not lateness.is_straggler(x, step_ns=200e6)
    (y,) = lateness.late_ranks(_calls(late), "test")  # lateness alone: found, but nothing explains it: info
    assert lateness.is_straggler(y, step_ns=200e6) and lateness.max_severity(y) == "info"


def test_a_rank_late_with_little_work_of_its_own_is_at_most_info() -> None:
    # recorded clean tp=2 jobs beside a busy process: a rank 65 ms late in every step of its pair with 9-25 ms more
    # work of its own (the OS held it back inside its calls); the zoo's slow rank: 30 ms more work, 31-56 ms late
    late = [[0.0, 0.0, 0.0, 65.0 + step % 3] for step in range(10)]
    held = _work({r: [50.0 + (15.0 if r == 3 else 0.0) + step % 2 for step in range(10)] for r in range(4)})
    (x,) = lateness.late_ranks(_calls(late), "test", held)
    assert lateness.is_straggler(x, step_ns=200e6) and not lateness.explained(x)
    assert lateness.max_severity(x) == "info"
    slow = _work({r: [50.0 + (40.0 if r == 3 else 0.0) + step % 2 for step in range(10)] for r in range(4)})
    (y,) = lateness.late_ranks(_calls(late), "test", slow)
    assert lateness.explained(y) and lateness.max_severity(y) == "high"


def test_stretches_of_lateness_count_as_fewer_observations() -> None:
    # every rank behind for 4 steps at a time, in turn (a busy host moving its victim): lag-1 autocorrelation
    # high, so 20 steps are judged as a few stretches, not 20 independent steps
    late = [[8.0 if r == (step // 4) % 4 else 0.0 for r in range(4)] for step in range(20)]
    grid = lateness.step_lateness(_calls(late))
    assert lateness.stretch(grid, None) >= 3
    steady = [[8.0 if r == 2 else (step * 7 + r * 3) % 5 * 0.1 for r in range(4)] for step in range(20)]
    assert lateness.stretch(lateness.step_lateness(_calls(steady)), None) == 1
    assert lateness._stretches([1.0, 2.0, 3.0, 4.0, 5.0], 2) == [3.0, 7.0, 5.0]  # half a stretch stands alone
    # a last stretch shorter than half joins the one before
    assert lateness._stretches([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0], 3) == [6.0, 22.0]


def test_consistent_extra_work_names_the_rank_even_where_lateness_is_noisy() -> None:
    # everyone last now and then by ~10-20 ms (a crowded host); rank 2 does 25 ms more work in every step
    late = [[10.0 if r == (step % 4) else 0.0 for r in range(4)] for step in range(10)]
    for step in range(0, 10, 2):
        late[step][2] = 12.0
    work = _work({r: [50.0 + (25.0 if r == 2 else 0.0) + (step % 3) for step in range(10)] for r in range(4)})
    xs = {x.rank: x for x in lateness.late_ranks(_calls(late), "test", work)}
    x = xs[2]
    assert (x.work_steps_above, x.work_steps) == (10, 10)
    assert x.work_chance == pytest.approx(4 * 2.0 ** -10)
    assert x.work_excess_ns == pytest.approx(25e6)
    assert not (2 * x.steps_last > x.steps and x.chance <= lateness.MAX_CHANCE)  # lateness alone: not found
    assert lateness.is_straggler(x, step_ns=200e6)
    # work sure, lateness not even plausible: named, but no louder than info (its peers barely wait for it)
    assert lateness.max_severity(x) == "info"


def test_too_few_steps_give_no_work_witness() -> None:
    # 4 ranks, 3 steps: even 3 of 3 above could be luck (4 / 8): no work witness, and the window is too short
    late = [[0.0, 0.0, 30.0, 0.0] for _ in range(3)]
    work = _work({r: [50.0 + (30.0 if r == 2 else 0.0)] * 3 for r in range(4)})
    (x,) = lateness.late_ranks(_calls(late), "test", work)
    assert x.work_chance is None and x.work_excess_ns == pytest.approx(30e6)
    assert lateness.is_straggler(x, step_ns=200e6) and lateness.too_short(x) and lateness.max_severity(x) == "info"


def test_work_is_compared_within_the_group_so_a_heavier_pipeline_stage_is_not_a_straggler() -> None:
    # ranks 0-3 are one TP group of a heavier pipeline stage (80 ms of work), ranks 4-7 the lighter stage (50);
    # rank 1 is last at the group's calls now and then by a little: within its group its work is not above
    late = [[0.5 if r == (1 if step % 2 else step % 4) else 0.0 for r in range(4)] for step in range(10)]
    work = _work({r: [(80.0 if r < 4 else 50.0) + (step % 3) * (1 if r != 1 else -1) for step in range(10)]
                  for r in range(8)})
    xs = {x.rank: x for x in lateness.late_ranks(_calls(late), "test", work)}
    x = xs[1]
    assert x.work_excess_ns is not None and x.work_excess_ns <= 0  # against the world it would be +30 ms
    assert not lateness.is_straggler(x, step_ns=200e6)


def _pair_calls(late: list[list[float]], ranks: tuple[int, int]) -> pl.DataFrame:
    """One call per step of a 2-member group (a DP pair of one pipeline stage); ``late[step]`` per member."""
    rows = []
    for step, values in enumerate(late):
        last = max(range(2), key=lambda i: values[i])
        rows += [{"match_key": f"p #{step}", "pg": "p", "rank": ranks[i], "late_rank": ranks[last], "step": step,
                  "wait_ns": 0 if i == last else int(values[last] * 1e6)} for i in range(2)]
    return pl.DataFrame(rows, schema={"match_key": pl.String, "pg": pl.String, "rank": pl.Int32,
                                      "late_rank": pl.Int32, "step": pl.Int64, "wait_ns": pl.Int64})


def test_pipeline_stages_are_the_ranks_place_in_their_pp_group() -> None:
    groups = pl.DataFrame({"pg": ["1", "2", "3"], "dimension": ["pp", "pp", "dp"],
                           "ranks": [[0, 2], [3, 1], [0, 1]]})
    assert lateness.pipeline_stages(groups) == {0: 0, 2: 1, 1: 0, 3: 1}
    assert lateness.pipeline_stages(groups.filter(pl.col("dimension") == "dp")) == {}


def test_a_dp_pair_of_the_heavier_pipeline_stage_is_compared_within_its_stage() -> None:
    # recorded pp=2 x dp=2 (tests/zoo pp_uneven): stage 1 (ranks 2, 3) holds 5 of 8 blocks; rank 3 is last at
    # its DP pair's calls in most steps by a little. Against every traced rank its work was 29 ms above the
    # median in 9 of 10 steps (99 % sure: a named straggler); within its stage it is rank 2's equal.
    late = [[0.0, 2.6] if step % 2 else [1.0, 0.0] for step in range(10)]  # last in 5 of 10, as recorded
    heavy, light = 110.0, 70.0
    work = _work({r: [(heavy if r >= 2 else light) + (1 if (step + r) % 2 else -1) for step in range(10)]
                  for r in range(4)})
    calls = _pair_calls(late, (2, 3))
    (blind,) = [x for x in lateness.late_ranks(calls, "test", work) if x.rank == 3]
    assert blind.work_excess_ns is not None and blind.work_excess_ns > 20e6 and blind.work_chance is not None
    assert lateness.is_straggler(blind, step_ns=200e6)  # what the stage-blind comparison said
    stages = {0: 0, 1: 0, 2: 1, 3: 1}
    (x,) = [x for x in lateness.late_ranks(calls, "test", work, stages) if x.rank == 3]
    assert x.work_excess_ns is not None and abs(x.work_excess_ns) < 3e6
    assert not lateness.is_straggler(x, step_ns=200e6)
    # 30 ms more than its one stage peer: the figure is kept, but one partner cannot tell a slower rank from a faster
    # partner or from a host that kept it behind (recorded pp=2 x dp=2 beside a busy process, no fault: rank 1 did
    # 34-73 ms of work per step to rank 0's 10-18 for ten steps, named "high" at 100 %): no witness, at most info
    slow = _work({r: [(heavy if r >= 2 else light) + (30.0 if r == 3 else 0.0) + step % 2 for step in range(10)]
                  for r in range(4)})
    (y,) = [x for x in lateness.late_ranks(calls, "test", slow, stages) if x.rank == 3]
    assert y.work_excess_ns == pytest.approx(30e6, abs=1.5e6) and y.work_steps_above == 10
    assert y.work_chance is None and y.work_ranks == 2 and lateness.paired(y) and not lateness.too_short(y)
    assert lateness.max_severity(y) == "info"
    title, detail = findings_rules._straggler_text(y, "info", "dp", {})
    assert "beside one partner only" in title and "record --active" not in title
    assert "2 ranks, itself included" in detail
    # three ranks a stage (pp=2 x dp=3): two others agree that it does more; named
    stages3 = {0: 0, 1: 0, 4: 0, 2: 1, 3: 1, 5: 1}
    slow3 = _work({r: [(heavy if stages3[r] else light) + (30.0 if r == 3 else 0.0) + step % 2 for step in range(10)]
                   for r in range(6)})
    (z,) = [x for x in lateness.late_ranks(calls, "test", slow3, stages3) if x.rank == 3]
    assert z.work_ranks == 3 and z.work_chance == pytest.approx(3 * 2.0 ** -10)
    assert lateness.is_straggler(z, step_ns=200e6) and not lateness.paired(z)


@pytest.mark.parametrize("seed", range(12))
def test_group_evidence_equals_the_per_rank_witness(seed: int) -> None:
    # the whole group's work witness in a few queries equals the per-rank one: groups of 1 to 9 members
    # (pairs compare with every traced rank of their stage), stages given, partial or absent, ranks without
    # work, repeated (rank, step) rows (the last one counts), steps some ranks lack, ties
    import random

    rng = random.Random(seed)
    world = rng.choice([4, 9, 16])
    steps = list(range(rng.randint(1, 12)))
    rows = [(r, s, float(rng.choice([50, 60, 75, rng.uniform(0, 100)]))) for r in range(world) for s in steps
            if rng.random() < 0.85]
    rows += [rng.choice(rows) if rows else (0, 0, 1.0) for _ in range(rng.randint(0, 3))]
    rows = [(r, s, v + (rng.random() if i % 7 == 0 else 0.0)) for i, (r, s, v) in enumerate(rows)]
    work = pl.DataFrame(rows, schema={"rank": pl.Int64, "step": pl.Int64, "work_ns": pl.Float64}, orient="row")
    stagings: list[dict[int, int] | None] = [None, {}, {r: r % 2 for r in range(world)},
                                             {r: r // 3 for r in range(world) if r % 5}]
    for stage_of in stagings:
        for size in (1, 2, 3, min(world, 9)):
            members = sorted(rng.sample(range(world), size))
            judged = sorted(rng.sample(steps, rng.randint(1, len(steps))))
            want = [lateness._work_evidence(r, judged, work, members, stage_of, {}) for r in members]
            assert lateness._group_evidence(members, judged, work, stage_of) == want
            index = lateness.WorkIndex(work, stage_of)
            assert index.evidence(members, judged) == want
            assert index.evidence(members, judged) == want  # again, from its cache of every rank's work
            unique = work.unique(["rank", "step"], keep="last", maintain_order=True)
            assert lateness.WorkIndex(unique, stage_of).exact
            want = [lateness._work_evidence(r, judged, unique, members, stage_of, {}) for r in members]
            assert lateness.WorkIndex(unique, stage_of).evidence(members, judged) == want
    assert lateness._group_evidence([0, 1], [0], None) == [lateness.NO_EVIDENCE] * 2
    assert lateness._group_evidence([0, 1], [0], work.clear()) == [lateness.NO_EVIDENCE] * 2


def test_a_rank_its_work_explains_but_last_too_seldom_is_said_so() -> None:
    # the zoo's slow rank in one recording: 28 ms more work in 18 of 20 steps, but last in only 9 of 20 (86 %): info,
    # and the text says which witness fell short, not "a host holding it back"
    x = lateness.Late(rank=2, pg="0", late_ns=8.25e6, jitter_ns=15.2e6, steps_last=9, steps=20, top_share=9,
                      chance=0.141, members=4, scope="dp calls", separated=False, work_excess_ns=28.2e6,
                      work_steps_above=18, work_steps=20, work_chance=5e-5, work_ranks=4)
    assert lateness.explained(x) and lateness.max_severity(x) == "info"
    title, detail = findings_rules._straggler_text(x, "info", "dp", {})
    assert "but last in only 9 of 20 steps (85.9 % sure" in title and "host holding it back" not in title
    assert "record more steps to tell" in detail
