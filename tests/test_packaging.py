"""Packaging (DESIGN §3): analyzers/ and dashboard/ install as commprof.analyzers and
commprof.dashboard, every package is listed, torch stays optional, and ``import commprof`` is light."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # requires-python is 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[1]
INSTALLED_AS = {"commprof": "commprof", "analyzers": "commprof.analyzers", "dashboard": "commprof.dashboard"}
HEAVY = ("polars", "plotly", "dash", "torch")


@pytest.fixture(scope="module")
def pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def source_packages() -> dict[str, Path]:
    """Installed package name -> its folder, for every folder with an __init__.py."""
    found = {}
    for top, installed in INSTALLED_AS.items():
        for init in sorted((ROOT / top).rglob("__init__.py")):
            rel = init.parent.relative_to(ROOT / top)
            if any(part.startswith(".") or part == "__pycache__" for part in rel.parts):
                continue
            found[".".join([installed, *rel.parts])] = init.parent
    return found


def requirement_name(spec: str) -> str:
    name = spec.split(";")[0].strip()
    for stop in "[<>=!~ ":
        name = name.split(stop)[0]
    return name.lower().replace("_", "-")


def test_every_package_is_listed(pyproject: dict[str, Any]) -> None:
    listed = set(pyproject["tool"]["setuptools"]["packages"])
    found = source_packages()
    assert {"commprof", "commprof.analyzers", "commprof.dashboard"} <= found.keys()
    missing = sorted(set(found) - listed)
    assert not missing, f"folders with an __init__.py missing from [tool.setuptools] packages: {missing}"


def test_every_listed_package_exists(pyproject: dict[str, Any]) -> None:
    tool = pyproject["tool"]["setuptools"]
    package_dir = tool.get("package-dir", {})
    for package in tool["packages"]:
        # the longest package-dir prefix decides where the package's folder is
        prefix = max((p for p in package_dir if package == p or package.startswith(p + ".")), key=len,
                     default="")
        base = package_dir.get(prefix, "") if prefix else ""
        rest = package[len(prefix) :].lstrip(".")
        folder = ROOT / base / rest.replace(".", "/")
        assert (folder / "__init__.py").is_file(), (package, folder)


def test_analyzers_and_dashboard_install_under_commprof(pyproject: dict[str, Any]) -> None:
    package_dir = pyproject["tool"]["setuptools"]["package-dir"]
    assert package_dir.get("commprof.analyzers") == "analyzers"
    assert package_dir.get("commprof.dashboard") == "dashboard"
    assert not {"analyzers", "dashboard"} & set(pyproject["tool"]["setuptools"]["packages"])


def test_torch_is_only_an_extra(pyproject: dict[str, Any]) -> None:
    runtime = {requirement_name(d) for d in pyproject["project"]["dependencies"]}
    assert "polars" in runtime  # the parser works
    assert "torch" not in runtime
    extras = pyproject["project"]["optional-dependencies"]
    assert "torch" in {requirement_name(d) for d in extras["record"]}


def imported_after(code: str) -> set[str]:
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                          cwd=ROOT, env=os.environ.copy())
    assert proc.returncode == 0, proc.stderr
    return set(json.loads(proc.stdout.strip().splitlines()[-1]))


def heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in HEAVY)


def test_import_commprof_is_light() -> None:
    modules = imported_after("import commprof")
    assert "commprof" in modules
    assert heavy(modules) == []


def test_cli_help_is_light() -> None:
    """``commprof --help`` lists every command without importing polars, plotly, dash or torch."""
    modules = imported_after(
        "from click.testing import CliRunner\n"
        "from commprof.cli import main\n"
        "result = CliRunner().invoke(main, ['--help'])\n"
        "assert result.exit_code == 0 and 'analyze' in result.output, (result.output, repr(result.exception))"
    )
    assert heavy(modules) == []
