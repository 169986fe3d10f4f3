"""A non-editable install (the wheel, as `pip install commprof` gives it) works from the repository root,
where ``./commprof`` shadows the installed package, and from anywhere else; without torch, `commprof record`
says which extra to install.

The wheel goes into a fresh venv without pip; its dependencies come from this interpreter's site-packages
through a folder of links that leaves out torch and the editable install of commprof."""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SKIP_LINKS = ("torch", "functorch", "torchgen", "commprof", "__editable__", "_commprof", "nvidia", "triton")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        ".git", ".venv", ".bench-venv", "runs", "tables", "__pycache__", "*.egg-info", "build", "dist",
        ".mypy_cache", ".ruff_cache", ".pytest_cache", "artifacts"))
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
                            "-w", str(tmp / "dist"), str(src)], capture_output=True, text=True, timeout=300)
    if built.returncode != 0:
        pytest.skip(f"cannot build the wheel here: {built.stderr[-500:]}")
    wheel = next((tmp / "dist").glob("commprof-*.whl"))
    env_dir = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True, timeout=120)
    python = env_dir / "bin" / "python"
    installed = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
                                "--no-index", "--quiet", str(wheel)], capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stderr
    deps = tmp / "deps"
    deps.mkdir()
    for entry in Path(site.getsitepackages()[0]).iterdir():
        if not entry.name.startswith(SKIP_LINKS) and not entry.name.endswith(".pth"):
            (deps / entry.name).symlink_to(entry)
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    Path(purelib, "zz_deps.pth").write_text(f"{deps}\n")
    return python


def run(python: Path, *args: str, cwd: Path = ROOT, tmp: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(COMMPROF_CACHE_DIR=str(tmp / "cache"), PATH=f"{python.parent}:/usr/bin:/bin")
    return subprocess.run([str(python), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_python_m_commprof_from_the_repository_root(wheel_python: Path, tmp_path: Path) -> None:
    done = run(wheel_python, "-m", "commprof", "analyze", "sample_traces/tp2_dp2", tmp=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Step time per rank" in done.stdout and "mesh_dp" in done.stdout


def test_python_api_from_the_repository_root(wheel_python: Path, tmp_path: Path) -> None:
    code = ("import commprof, commprof.analyzers, commprof.dashboard\n"
            "a = commprof.analyze('sample_traces/tp2_dp2')\n"
            "print(commprof.__file__, commprof.analyzers.__file__, sorted(a.group_summary['dimension'].unique()))\n"
            "print(commprof.analyze_run('sample_traces/tp2_dp2')['schema_version'])")
    done = run(wheel_python, "-c", code, tmp=tmp_path)
    assert done.returncode == 0, done.stderr
    first = done.stdout.splitlines()[0]
    assert "'dp'" in first and "'tp'" in first, first
    # from the root, ./commprof is imported (it shadows the wheel) and its analyzers/ sibling is used
    assert str(ROOT / "commprof") in first and str(ROOT / "analyzers") in first, first


def test_installed_package_elsewhere(wheel_python: Path, tmp_path: Path) -> None:
    code = ("import commprof, commprof.analyzers\n"
            "print(commprof.__file__); print(commprof.analyzers.__file__)\n"
            f"print(len(commprof.analyze({str(ROOT / 'sample_traces' / 'tp2_dp2')!r}).rank_summary))")
    done = run(wheel_python, "-c", code, cwd=tmp_path, tmp=tmp_path)
    assert done.returncode == 0, done.stderr
    package, analyzers, ranks = done.stdout.splitlines()
    assert "site-packages" in package and "site-packages" in analyzers and str(ROOT) not in analyzers
    assert ranks == "4"


def test_record_without_torch_names_the_extra(wheel_python: Path, tmp_path: Path) -> None:
    script = wheel_python.parent / "commprof"
    done = subprocess.run([str(script), "record", "-o", str(tmp_path / "run"), "--", "torchrun",
                           "--nproc-per-node", "2", "train.py"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PATH": f"{wheel_python.parent}:/usr/bin:/bin"})
    assert done.returncode == 127, (done.returncode, done.stderr)
    assert "pip install 'commprof[record]'" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().count("\n") == 0, done.stderr
