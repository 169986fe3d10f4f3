"""Imports point one way (DESIGN §3): rank code -> stdlib + torch; ingest never imports analyzers, views,
record or the CLI; analyzers never import views or the CLI; views never import the CLI. Every import
statement counts, the ones inside functions too."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
VIEWS = ("commprof.report", "commprof.check", "commprof.export", "commprof.dashboard", "commprof.nccl",
         "commprof.figures")
INGEST = ("commprof.ingest", "commprof.run", "commprof.errors", "commprof.vocab")
FORBIDDEN = {
    "ingest": ("commprof.analyzers", *VIEWS, "commprof.record", "commprof.cli", "commprof.synth"),
    "analyzers": (*VIEWS, "commprof.cli", "commprof.record", "commprof.synth"),
    "views": ("commprof.cli", "commprof.record"),
}


def _module(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[0] in ("analyzers", "dashboard"):
        parts = ["commprof", *parts]
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out += [(node.lineno, node.module)] + [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
    return out


def _layer(module: str) -> str | None:
    if module.startswith("commprof.record.rank"):
        return "rank"
    if module.startswith(INGEST):
        return "ingest"
    if module.startswith("commprof.analyzers"):
        return "analyzers"
    if module.startswith(VIEWS):
        return "views"
    return None


def _sources() -> list[Path]:
    return sorted(p for folder in ("commprof", "analyzers", "dashboard") for p in (ROOT / folder).rglob("*.py"))


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_point_downwards(path: Path) -> None:
    module = _module(path)
    layer = _layer(module)
    bad = []
    for line, name in _imports(path):
        if layer == "rank":
            top = name.split(".")[0]
            if top != "torch" and top not in sys.stdlib_module_names and not name.startswith(
                    "commprof.record.rank"):
                bad.append((line, name))
        elif layer in FORBIDDEN and name.startswith(FORBIDDEN[layer]):
            bad.append((line, name))
    assert not bad, f"{module} ({layer}) imports upwards: " + ", ".join(f"line {n}: {m}" for n, m in bad)


def test_the_layers_are_not_empty() -> None:
    layers = {_layer(_module(p)) for p in _sources()}
    assert {"rank", "ingest", "analyzers", "views"} <= layers
