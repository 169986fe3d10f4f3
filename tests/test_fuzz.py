"""The fuzzers of tests/fuzzlib.py on a small budget (``make fuzz`` runs thousands of cases): mutated
traces through ``commprof analyze``, mutated NCCL logs and topology dumps through the NCCL readers,
mutated reports through ``check`` and ``diff``, mutated TOML configs and threshold flags through
``check``. Every case must exit 0, 1 or 2, without a traceback, within a small multiple of a clean case
of the same size, and exit 0 only with a report that says what was lost."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import fuzzlib  # noqa: E402

BUDGET = {"traces": 40, "logs": 60, "reports": 60, "configs": 60, "others": 60}
RUNNERS: dict[str, Callable[[Path, int, int | None], fuzzlib.Tally]] = {
    "traces": fuzzlib.fuzz_traces, "logs": fuzzlib.fuzz_logs, "reports": fuzzlib.fuzz_reports,
    "configs": fuzzlib.fuzz_configs, "others": fuzzlib.fuzz_other_inputs,
}


@pytest.mark.parametrize("kind", list(BUDGET))
def test_fuzzed_inputs_keep_the_promise(kind: str, tmp_path: Path) -> None:
    tally = RUNNERS[kind](tmp_path, BUDGET[kind], None)
    print(tally.summary(kind))
    assert tally.cases >= BUDGET[kind] // 2  # hypothesis may stop early on a small space, never at none
    assert not tally.failures, "\n\n".join(tally.failures[:3])


@pytest.mark.slow
def test_operator_faults_keep_the_promise(tmp_path: Path) -> None:
    """Issue 22: a kill -9 of a pool, concurrent commands on one folder, a full disk; then a clean re-run."""
    from fuzz_operator import fuzz_operator

    tally = fuzz_operator(tmp_path, 3, None)  # one of each kind
    print(tally.summary())
    assert tally.cases == 3
    assert not tally.failures, "\n".join(tally.failures[:5])
