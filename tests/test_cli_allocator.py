"""The program hands polars' freed pages back at once (commprof.cli._allocator_defaults, issue 39): unless the user
set jemalloc's options, including when polars' own defaults were inherited from a parent that imported polars."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from commprof.cli import JEMALLOC_CONF, JEMALLOC_ENV, POLARS_JEMALLOC

PROBE = "import os; from commprof.cli import _allocator_defaults; _allocator_defaults(); print(os.environ.get({!r}))"


@pytest.mark.parametrize(("inherited", "expected"), [
    (None, JEMALLOC_CONF),
    (POLARS_JEMALLOC[0], f"{POLARS_JEMALLOC[0]},{JEMALLOC_CONF}"),  # a parent's polars wrote it, not the user
    ("dirty_decay_ms:100", "dirty_decay_ms:100"),  # the user's: kept
])
def test_the_allocator_setting(inherited: str | None, expected: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != JEMALLOC_ENV}
    if inherited is not None:
        env[JEMALLOC_ENV] = inherited
    done = subprocess.run([sys.executable, "-c", PROBE.format(JEMALLOC_ENV)], capture_output=True, text=True,
                          env=env, check=True, timeout=60)
    assert done.stdout.strip() == expected


def test_record_leaves_the_trainings_environment_alone() -> None:
    """``commprof record``'s environment is its ranks': the setting is not made there."""
    env = {k: v for k, v in os.environ.items() if k != JEMALLOC_ENV}
    probe = ("import os, sys; sys.argv = ['commprof', 'record', '--', 'true']; from commprof.cli import "
             f"_allocator_defaults; _allocator_defaults(); print(os.environ.get({JEMALLOC_ENV!r}))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True,
                          timeout=60)
    assert done.stdout.strip() == "None"
