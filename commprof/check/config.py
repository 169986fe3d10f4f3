"""Check rules from a TOML file and from command-line overrides.

Where the rules come from, first match wins: ``--config FILE``; ``commprof.toml`` in the working
directory; the ``[tool.commprof]`` table of ``pyproject.toml`` there. Flags override the file::

    max_exposed_comm_pct = 20          # exposed comm share of step time, every rank
    max_exposed_ms_per_step = 5        # exposed comm per step, every rank
    max_straggler_wait_ms = 2          # how long a rank waits for the last one to arrive
    fail_on_findings = "high"          # any finding at or above this severity fails
    baseline = "baseline.json"         # an analyze or check JSON report to compare with
    max_regression_pct = 10
    noise_floor_ms = 0.5

    [dimension.tp]                     # per process group of that dimension
    max_exposed_comm_pct = 5
    max_exposed_ms_per_step = 1

    [tier.nvlink]                      # per (group, op) on that tier, calls of at least min_bytes
    min_busbw_efficiency = 0.6
    peak_gbps = 450                    # replaces the analysis' peak (as analyze --peak nvlink=450)
    min_bytes = 1048576
"""

from __future__ import annotations

import difflib
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from commprof.analyzers.efficiency import TIERS_WITHOUT_PEAK
from commprof.errors import CommprofError
from commprof.vocab import DIMENSIONS, SEVERITIES, TIERS

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    try:
        import tomli as tomllib
    except ImportError:
        tomllib = None

DEFAULT_MIN_BYTES = 1 << 20

# key -> value kind, per table
TOP_KEYS = {
    "max_exposed_comm_pct": "number", "max_exposed_ms_per_step": "number", "max_straggler_wait_ms": "number",
    "fail_on_findings": "severity", "baseline": "path", "max_regression_pct": "percent",
    "noise_floor_ms": "number", "dimension": "table", "tier": "table",
    "comm_kernel": "comm_kernels",  # kernel families declared communication (commprof/cli/comm_kernel_option.py)
}
DIMENSION_KEYS = {"max_exposed_comm_pct": "number", "max_exposed_ms_per_step": "number"}
TIER_KEYS = {"min_busbw_efficiency": "number", "peak_gbps": "number", "min_bytes": "number"}


class ConfigError(CommprofError):
    """A config file or rule flag that cannot be used."""


@dataclass
class DimensionLimits:
    max_exposed_comm_pct: float | None = None
    max_exposed_ms_per_step: float | None = None


@dataclass
class TierLimits:
    min_busbw_efficiency: float | None = None
    peak_gbps: float | None = None
    min_bytes: float = DEFAULT_MIN_BYTES


@dataclass
class CheckConfig:
    max_exposed_comm_pct: float | None = None
    max_exposed_ms_per_step: float | None = None
    max_straggler_wait_ms: float | None = None
    fail_on_findings: str | None = None
    baseline: str | None = None
    max_regression_pct: float = 10.0
    noise_floor_ms: float = 0.5
    dimension: dict[str, DimensionLimits] = field(default_factory=dict)
    tier: dict[str, TierLimits] = field(default_factory=dict)
    source: str | None = None  # the file the rules came from, if any

    def as_dict(self) -> dict[str, Any]:
        """The resolved rules, as the check JSON report shows them."""
        out: dict[str, Any] = {
            k: getattr(self, k) for k in TOP_KEYS
            if k not in ("dimension", "tier", "comm_kernel") and getattr(self, k) is not None
        }
        for key, table in (("dimension", self.dimension), ("tier", self.tier)):
            out[key] = {name: {k: v for k, v in vars(lim).items() if v is not None} for name, lim in table.items()}
        return out

    def peak_overrides(self) -> dict[str, float]:
        """[tier.X] peak_gbps values: they replace the analysis' peaks (analyze --peak) for those tiers."""
        return {name: lim.peak_gbps for name, lim in self.tier.items() if lim.peak_gbps is not None}


def _suggest(name: str, known: list[str] | tuple[str, ...]) -> str:
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return f"{hint}known: {', '.join(known)}"


class _Source:
    """Where values come from, to name the file and line in errors."""

    def __init__(self, path: Path | None, text: str | None = None) -> None:
        self.path, self.text = path, text

    def error(self, message: str, key: str | None = None) -> ConfigError:
        if self.path is None:
            return ConfigError(message)
        return ConfigError(message, self.path, self._line(key) if key else None)

    def _line(self, key: str) -> str | None:
        if not self.text:
            return None
        last = key.split(".")[-1]
        patterns = [rf"^\s*\[[^\]]*\b{re.escape(last)}\b[^\]]*\]", rf"^\s*{re.escape(last)}\s*=",
                    rf"^\s*[\w.]*\b{re.escape(last)}\b\s*="]
        for pattern in patterns:
            for number, line in enumerate(self.text.splitlines(), start=1):
                if re.search(pattern, line):
                    return f"line {number}"
        return None


def _value(kind: str, key: str, value: Any, source: _Source) -> Any:
    if kind == "percent" and isinstance(value, str) and value.strip().endswith("%"):
        value = value.strip()[:-1]
    if kind in ("number", "percent"):
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                raise source.error(f"{key} must be a number, not {value!r}", key) from None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise source.error(f"{key} must be a number, not {value!r}", key)
        if not math.isfinite(value):  # NaN compares false with everything: a NaN limit would pass any run
            raise source.error(f"{key} must be a finite number, not {value}", key)
        if value < 0:
            raise source.error(f"{key} must not be negative ({value})", key)
        return float(value)
    if kind == "severity":
        text = str(value).strip().lower()
        if text not in SEVERITIES:
            raise source.error(f"{key} = {value!r} is not a severity; {_suggest(text, SEVERITIES)}", key)
        return text
    if not isinstance(value, str):
        raise source.error(f"{key} must be a path (a string), not {value!r}", key)
    return value


def _apply(config: CheckConfig, data: dict[str, Any], source: _Source) -> None:
    for key, value in data.items():
        if key not in TOP_KEYS:
            raise source.error(f"unknown rule {key!r}; {_suggest(key, list(TOP_KEYS))}", key)
        if TOP_KEYS[key] == "comm_kernels":  # not a rule: how the run is read (checked where it is read)
            continue
        if TOP_KEYS[key] != "table":
            setattr(config, key, _value(TOP_KEYS[key], key, value, source))
            continue
        names, spec = (DIMENSIONS, DIMENSION_KEYS) if key == "dimension" else (TIERS, TIER_KEYS)
        if not isinstance(value, dict):
            raise source.error(f"{key} must be a table such as [{key}.{names[0]}]", key)
        for name, limits in value.items():
            if name not in names:
                raise source.error(f"unknown {key} {name!r} in [{key}.{name}]; {_suggest(name, names)}", name)
            if not isinstance(limits, dict):
                raise source.error(f"[{key}.{name}] must be a table of rules", name)
            entry: DimensionLimits | TierLimits
            if key == "dimension":
                entry = config.dimension.setdefault(name, DimensionLimits())
            else:
                entry = config.tier.setdefault(name, TierLimits())
            for rule, raw in limits.items():
                if rule not in spec:
                    raise source.error(f"unknown rule {rule!r} in [{key}.{name}]; {_suggest(rule, list(spec))}",
                                       rule)
                setattr(entry, rule, _value(spec[rule], f"{key}.{name}.{rule}", raw, source))


def _validate(config: CheckConfig, source: _Source) -> None:
    for name, limits in config.tier.items():
        if limits.min_busbw_efficiency is not None and name in TIERS_WITHOUT_PEAK and limits.peak_gbps is None:
            raise source.error(f"[tier.{name}] min_busbw_efficiency needs a peak: no default peak for tier "
                               f"{name!r}, set tier.{name}.peak_gbps", name)


def _read_toml(path: Path) -> tuple[dict[str, Any], str]:
    if tomllib is None:  # pragma: no cover - Python 3.10 without tomli
        raise ConfigError("reading TOML on Python 3.10 needs the 'tomli' package (pip install tomli)", path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"cannot read the config: {getattr(err, 'strerror', None) or err}", path) from None
    try:
        return tomllib.loads(text), text
    except (tomllib.TOMLDecodeError, RecursionError, ValueError) as err:
        raise ConfigError(f"not valid TOML: {err}", path) from None


def find_config(cwd: Path | None = None) -> tuple[Path, dict[str, Any], str] | None:
    """``commprof.toml`` in ``cwd``, else ``[tool.commprof]`` of its ``pyproject.toml``, else None."""
    cwd = cwd or Path.cwd()
    own = cwd / "commprof.toml"
    if own.is_file():
        data, text = _read_toml(own)
        return own, data, text
    pyproject = cwd / "pyproject.toml"
    if pyproject.is_file():
        data, text = _read_toml(pyproject)
        section = data.get("tool", {}).get("commprof")
        if isinstance(section, dict):
            return pyproject, section, text
    return None


def parse_override(item: str) -> tuple[str, Any]:
    """``dimension.tp.max_exposed_comm_pct=5`` -> (dotted name, value)."""
    name, sep, value = item.partition("=")
    if not sep or not name.strip():
        raise ConfigError(f"--rule {item!r}: expected NAME=VALUE, e.g. dimension.tp.max_exposed_comm_pct=5")
    return name.strip(), value.strip().strip("'\"")


def _nest(items: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in items:
        parts = name.split(".")
        node = out
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"--rule {name}: {part} is a rule, not a table")
            node = child
        node[parts[-1]] = value
    return out


def load_config(
    path: Path | None = None, overrides: list[tuple[str, Any]] | None = None, cwd: Path | None = None,
) -> CheckConfig:
    """Rules from ``path`` (or the discovered file), then the command-line overrides on top."""
    config = CheckConfig()
    if path is not None:
        if not path.is_file():
            raise ConfigError("config file not found", path)
        data, text = _read_toml(path)
        if path.name == "pyproject.toml":
            data = data.get("tool", {}).get("commprof", {})
        found: tuple[Path, dict[str, Any], str] | None = (path, data, text)
    else:
        found = find_config(cwd)
    if found is not None:
        file, data, text = found
        config.source = str(file)
        file_source = _Source(file, text)
        _apply(config, data, file_source)
        _validate(config, file_source)
        if config.baseline and not Path(config.baseline).is_absolute():
            # a baseline named in a config file is relative to that file
            config.baseline = str(file.parent / config.baseline)
    if overrides:
        _apply(config, _nest(overrides), _Source(None))
        _validate(config, _Source(None))
    return config
