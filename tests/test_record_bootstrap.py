"""The rank bootstrap without torchrun: who counts as a rank, the after-import hook, the
``sitecustomize`` shim (chaining, failing open). Subprocesses here never import torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from commprof.record import environment
from commprof.record.rank.config import WindowSettings, read_config
from commprof.record.rank.hook import call_after_import
from commprof.record.rank.identity import detect_identity

TORCHRUN_ENV = {"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1"}


def test_identity_from_torchrun_environment() -> None:
    ident = detect_identity(TORCHRUN_ENV, argv=["python", "train.py"], pid=10)
    assert ident is not None
    assert (ident.rank, ident.local_rank, ident.world_size, ident.local_world_size, ident.node_rank) == (3, 1, 4, 2, 1)
    assert not ident.single_process


@pytest.mark.parametrize(("env", "argv"), [
    ({}, ["python", "train.py"]),  # no RANK: torchrun itself, a tool, a shell
    ({**TORCHRUN_ENV, "COMMPROF_RANK_PID": "99"}, ["python", "train.py"]),  # child of rank pid 99
    (TORCHRUN_ENV, ["python", "-c", "from multiprocessing.spawn import spawn_main; spawn_main()",
                    "--multiprocessing-fork"]),
    (TORCHRUN_ENV, ["python", "-c", "from multiprocessing.forkserver import main; main()"]),
])
def test_not_a_rank(env: dict[str, str], argv: list[str]) -> None:
    assert detect_identity(env, argv=argv, pid=10) is None


def test_single_process_and_own_claim() -> None:
    ident = detect_identity({"COMMPROF_SINGLE_PROCESS": "1"}, argv=["python", "x.py"], pid=10)
    assert ident is not None and ident.single_process and ident.rank == 0 and ident.world_size == 1
    assert detect_identity({**TORCHRUN_ENV, "COMMPROF_RANK_PID": "10"}, argv=["python"], pid=10) is not None


def test_window_settings_travel_through_the_environment() -> None:
    window = WindowSettings(wait=2, warmup=0, active=5, flight_recorder=False)
    config = read_config({"COMMPROF_RUN_DIR": "/r", "COMMPROF_SETTINGS": window.to_json()})
    assert config is not None and config.window == window and config.run_dir == "/r"
    assert WindowSettings(start_after_s=1.0).mode == "time"
    assert read_config({}) is None


def test_after_import_hook_fires_once_after_the_module_ran(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = tmp_path / "fakepkg_cp"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("import fakepkg_cp.sub\nDONE = True\n")
    (pkg / "sub.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen: list[types.ModuleType] = []
    finder = call_after_import("fakepkg_cp", seen.append)
    assert finder in sys.meta_path
    try:
        import fakepkg_cp

        assert [m.__name__ for m in seen] == ["fakepkg_cp"]
        assert seen[0].DONE is True  # the whole __init__ ran before the callback
        assert finder not in sys.meta_path
        assert "exec_module" not in vars(fakepkg_cp.__spec__.loader)  # the loader is as it was
        assert call_after_import("fakepkg_cp", seen.append) is None and len(seen) == 2  # already imported
    finally:
        for name in ("fakepkg_cp", "fakepkg_cp.sub"):
            sys.modules.pop(name, None)
        if finder in sys.meta_path:
            sys.meta_path.remove(finder)


def _python(code: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], env=env, cwd=cwd, capture_output=True, text=True, timeout=60)


@pytest.fixture
def shim_env(tmp_path: Path) -> dict[str, str]:
    shim = environment.install_shim(tmp_path / "shim")
    user = tmp_path / "user"
    user.mkdir()
    (user / "sitecustomize.py").write_text("import os\nos.environ['USER_SITE_RAN'] = str(os.getpid())\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMMPROF_") and k != "RANK"}
    env["PYTHONPATH"] = os.pathsep.join([str(shim), str(user)])
    return env


REPORT = ("import json, os, sys, sitecustomize; print(json.dumps({'user': os.environ.get('USER_SITE_RAN'),"
          " 'pid': str(os.getpid()), 'site_file': sitecustomize.__file__,"
          " 'claim': os.environ.get('COMMPROF_RANK_PID'), 'shim_on_path': any(p.endswith('shim') for p in sys.path)}))")


def test_shim_chains_to_the_shadowed_sitecustomize(shim_env: dict[str, str], tmp_path: Path) -> None:
    done = _python(REPORT, shim_env, tmp_path)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["user"] == seen["pid"]
    assert seen["site_file"].endswith(os.path.join("user", "sitecustomize.py"))
    assert not seen["shim_on_path"] and seen["claim"] is None


def test_rank_claims_itself_and_fails_open_on_a_broken_torch(shim_env: dict[str, str], tmp_path: Path) -> None:
    """A rank whose ``torch`` is not what commprof expects trains on after one warning."""
    fake = tmp_path / "fake_torch"
    (fake / "torch").mkdir(parents=True)
    (fake / "torch" / "__init__.py").write_text("VALUE = 42\n")
    env = dict(shim_env, RANK="0", WORLD_SIZE="1", COMMPROF_RUN_DIR=str(tmp_path / "run"),
               COMMPROF_RANK_PACKAGE=str(environment.RANK_PACKAGE))
    env["PYTHONPATH"] += os.pathsep + str(fake)
    code = REPORT.replace("import json,", "import torch; assert torch.VALUE == 42; import json,")
    done = _python(code, env, tmp_path)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["claim"] == seen["pid"] and seen["user"] == seen["pid"]
    warnings = [line for line in done.stderr.splitlines() if line.startswith("commprof: warning")]
    assert len(warnings) == 1 and "rank 0: profiling disabled" in warnings[0]


def test_rank_package_imports_only_the_standard_library(tmp_path: Path) -> None:
    """Loaded the way the shim loads it, every rank-side module together pulls in nothing but the
    standard library - not torch (that waits for the script), not commprof's dependencies."""
    code = f"""
import importlib, importlib.util, json, pkgutil, sys
before = set(sys.modules)
package = {str(environment.RANK_PACKAGE)!r}
spec = importlib.util.spec_from_file_location("_commprof_rank", package + "/__init__.py",
                                              submodule_search_locations=[package])
module = importlib.util.module_from_spec(spec)
sys.modules["_commprof_rank"] = module
spec.loader.exec_module(module)
for info in pkgutil.iter_modules([package]):
    if info.name != "shim":
        importlib.import_module("_commprof_rank." + info.name)
new = sorted(m for m in set(sys.modules) - before if not m.startswith("_commprof_rank"))
print(json.dumps([m for m in new if m.split(".")[0] not in sys.stdlib_module_names]))
"""
    done = _python(code, {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []
