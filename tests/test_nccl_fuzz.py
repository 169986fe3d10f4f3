"""Random mutations and truncations of real-format NCCL logs never raise, and every message is
accounted for: parsed by family or skipped by kind."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from commprof.ingest.nccl_logs import NcclInputs, NcclRun, build_tables, parse_nccl_text
from commprof.nccl import summarize

FIXTURES = Path(__file__).parent / "fixtures" / "nccl"
SOURCES = sorted(p for p in FIXTURES.rglob("*.log"))
LINES = {p.name + p.parent.name: p.read_text().splitlines() for p in SOURCES}
POOL = [line for lines in LINES.values() for line in lines]


@st.composite
def mutated_log(draw: st.DrawFn) -> list[str]:
    key = draw(st.sampled_from(sorted(LINES)))
    lines = list(LINES[key])
    start = draw(st.integers(0, max(0, len(lines) - 1)))
    lines = lines[start : start + draw(st.integers(1, 120))]
    for _ in range(draw(st.integers(0, 12))):
        i = draw(st.integers(0, len(lines) - 1))
        kind = draw(st.sampled_from(["cut", "glue", "drop", "noise", "dup", "foreign", "swap"]))
        line = lines[i]
        if kind == "cut":
            lines[i] = line[: draw(st.integers(0, len(line)))]
        elif kind == "glue" and i + 1 < len(lines):
            lines[i : i + 2] = [line[: draw(st.integers(0, len(line)))] + lines[i + 1]]
        elif kind == "drop" and line:
            j = draw(st.integers(0, len(line) - 1))
            lines[i] = line[:j] + line[j + 1 :]
        elif kind == "noise":
            j = draw(st.integers(0, len(line)))
            lines[i] = line[:j] + draw(st.text(max_size=12)) + line[j:]
        elif kind == "dup":
            lines.insert(i, draw(st.sampled_from(POOL)))
        elif kind == "foreign":
            lines[i] = draw(st.sampled_from(["[1,3]<stderr>:", "(RayTrainWorker pid=9, ip=1.2.3.4) ", "h: "])) + line
        elif kind == "swap" and i + 1 < len(lines):
            lines[i], lines[i + 1] = lines[i + 1], lines[i]
    return lines


def _check(lines: list[str]) -> None:
    text = "\n".join(lines)
    logs = parse_nccl_text(text)
    stats = logs.stats
    assert stats.lines_total == len(text.splitlines())
    assert sum(stats.parsed.values()) + sum(stats.skipped.values()) == stats.messages_total
    assert stats.messages_total >= stats.lines_total
    assert all(v >= 0 for v in stats.parsed.values())
    tables = build_tables(logs)
    summary = summarize(NcclRun(NcclInputs(Path("fuzz")), logs, [], []), tables)
    assert summary["parse_stats"]["lines_total"] == stats.lines_total


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_log())
def test_mutated_fixtures_never_raise(lines: list[str]) -> None:
    _check(lines)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(max_size=200), max_size=30))
def test_arbitrary_text_never_raises(lines: list[str]) -> None:
    _check(lines)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(POOL).flatmap(lambda s: st.integers(0, len(s)).map(lambda n: s[:n])), max_size=40))
def test_truncated_lines_are_counted(lines: list[str]) -> None:
    _check(lines)
