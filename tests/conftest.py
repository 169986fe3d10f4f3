"""Fixtures shared by the test modules: tmp copies of the sample run and of the third-party traces,
an isolated per-user cache, a CLI runner and a helper to edit a trace's JSON.

Tests never write into ``sample_traces/`` or ``../shared``: ingest caches its tables beside the traces
when it can write there (and root can write anywhere), so every test works on a tmp copy.
"""

from __future__ import annotations

import gzip
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLE_RUN = REPO_ROOT / "sample_traces" / "gloo_4rank_profiler"


@pytest.fixture(autouse=True)
def user_cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The per-user cache (~/.cache/commprof) lies in the test's tmp folder (HOME points there), so that
    single-file inputs and unwritable folders never cache in the real one. COMMPROF_CACHE_DIR is unset:
    when set it takes every run's cache, also of writable folders (tests that want that set it)."""
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("COMMPROF_CACHE_DIR", raising=False)
    return home / ".cache" / "commprof"


@pytest.fixture
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture
def sample_run(tmp_path: Path) -> Path:
    """A fresh copy of sample_traces/gloo_4rank_profiler (4 gzipped Gloo CPU traces, ranks 0-3)."""
    target = tmp_path / "gloo_4rank_profiler"
    shutil.copytree(SAMPLE_RUN, target, ignore=shutil.ignore_patterns("tables", "__pycache__"))
    return target


@pytest.fixture
def shared_dir() -> Path:
    """The read-only ../shared folder beside the repository (skips when its traces are absent)."""
    shared = REPO_ROOT.parent / "shared"
    if not (shared / "real_traces").is_dir():
        pytest.skip(f"{shared}/real_traces not present: these tests need the third-party traces")
    return shared


@pytest.fixture
def real_trace_set(shared_dir: Path, tmp_path: Path) -> Callable[[str], Path]:
    """``real_trace_set("hta/nccl_parser_config")`` -> a tmp copy of that trace folder (its trace files
    only, no cached tables/), so that ingest writes its cache there and not into ../shared."""

    def copy(name: str) -> Path:
        source = shared_dir / "real_traces" / name
        if not source.is_dir():
            pytest.skip(f"{source} not present")
        target = tmp_path / "real_traces" / name
        target.mkdir(parents=True)
        for path in sorted(source.iterdir()):
            if path.is_file() and path.name.endswith((".json", ".json.gz")):
                shutil.copyfile(path, target / path.name)
        return target

    return copy


def read_trace(path: Path) -> dict[str, Any]:
    raw = path.read_bytes()
    data = gzip.decompress(raw) if path.name.endswith(".gz") else raw
    trace: dict[str, Any] = json.loads(data)
    return trace


def write_trace(path: Path, trace: dict[str, Any]) -> None:
    data = json.dumps(trace).encode()
    path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)


@pytest.fixture
def edit_trace() -> Callable[..., Path]:
    """``edit_trace(src, change, dest=None)``: load a trace (.json or .json.gz), let ``change(trace)``
    modify the dict in place, write it to ``dest`` (default: over ``src``) in dest's format."""

    def edit(src: Path, change: Callable[[dict[str, Any]], None], dest: Path | None = None) -> Path:
        trace = read_trace(src)
        change(trace)
        dest = dest or src
        write_trace(dest, trace)
        return dest

    return edit


@pytest.fixture
def cli() -> Callable[..., Result]:
    """``cli("analyze", str(path), "--format", "json")`` through click's test runner on commprof's real
    entry point; stdout and stderr are kept apart (``result.stdout`` / ``result.stderr``)."""
    from commprof.cli import main

    def invoke(*args: str, env: dict[str, str] | None = None) -> Result:
        return CliRunner().invoke(main, list(args), env=env)

    return invoke
