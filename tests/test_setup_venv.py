"""tools/setup_venv.py picks torch so that `make demo` never pulls PyPI's multi-GB CUDA build on Linux."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("setup_venv", ROOT / "tools" / "setup_venv.py")
assert _spec is not None and _spec.loader is not None
setup_venv = importlib.util.module_from_spec(_spec)
sys.modules["setup_venv"] = setup_venv  # dataclasses look their module up there
_spec.loader.exec_module(setup_venv)


def _report(url: str, version: str) -> dict[str, object]:
    return {"install": [{"metadata": {"name": "torch", "version": version}, "download_info": {"url": url}}]}


def test_local_wheel_is_installed_from_disk() -> None:
    src = setup_venv.choose_source(_report("file:///opt/wheels/torch-2.13.0%2Bcpu-cp311.whl", "2.13.0+cpu"),
                                   "linux", None)
    assert src.pip_args == ("/opt/wheels/torch-2.13.0+cpu-cp311.whl",)
    assert "on this machine" in src.says


def test_pypi_on_linux_goes_to_the_cpu_index() -> None:
    src = setup_venv.choose_source(_report("https://files.example/torch-2.13.0-cp311-manylinux.whl", "2.13.0"),
                                   "linux", None)
    assert src.pip_args == (setup_venv.TORCH_PIN, "--index-url", setup_venv.CPU_INDEX)
    assert "CPU-only" in src.says


def test_unresolvable_on_linux_still_asks_the_cpu_index() -> None:
    assert setup_venv.choose_source(None, "linux", None).pip_args[-1] == setup_venv.CPU_INDEX


def test_a_configured_cpu_index_is_kept() -> None:
    src = setup_venv.choose_source(_report("https://mirror.example/cpu/torch-2.13.0%2Bcpu.whl", "2.13.0+cpu"),
                                   "linux", None)
    assert src.pip_args == ("torch==2.13.0+cpu",)


def test_pypi_elsewhere_is_cpu_already() -> None:
    src = setup_venv.choose_source(_report("https://files.example/torch-2.13.0-macosx.whl", "2.13.0"), "darwin", None)
    assert src.pip_args == ("torch==2.13.0",)


def test_torch_index_url_overrides() -> None:
    src = setup_venv.choose_source(None, "linux", "https://download.example/whl/cu126")
    assert src.pip_args == (setup_venv.TORCH_PIN, "--index-url", "https://download.example/whl/cu126")


@pytest.mark.slow
def test_this_machines_pip_resolves_the_pin_to_a_cpu_build(tmp_path: Path) -> None:
    """The path CI takes: the pin resolves through the configured sources; when that is a wheel on disk it
    must be a CPU build, and anything else must be sent to the CPU index (no CUDA download)."""
    step = setup_venv.Step(tmp_path / "log")
    report = setup_venv.dry_run_report(step, Path(sys.executable))
    if report is None:
        pytest.skip(f"pip cannot resolve {setup_venv.TORCH_PIN} here: {(tmp_path / 'log').read_text()[-300:]}")
    src = setup_venv.choose_source(report, sys.platform, None)
    assert "+cpu" in src.says or "CPU-only" in src.says or not sys.platform.startswith("linux"), src

