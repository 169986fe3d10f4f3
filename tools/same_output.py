"""Every table, report and warning the same in two versions of commprof (issue 24: speed work must not
change a result). For each input, both versions run ``commprof analyze --format json`` in a fresh
interpreter with an empty table cache; the exit status, the JSON report, stderr (the warnings) and every
table of the cache must be equal (each trace's tables read through the cache's index, whatever files hold
them; other Parquet files by path).

    python tools/same_output.py --base e5e1b56 [--corpus DIR --cases 40 --seed 24] [PATH ...]

The inputs are PATHs, else sample_traces/*, every run and trace under ../shared/real_traces and a fuzz
corpus: ``--cases`` mutated traces from the fuzzers' own mutator (tests/fuzz_mutators.py, seeded, so the
same corpus each time), written under ``--corpus`` once. The base version is extracted with
``git archive`` into a temporary folder. Exit status 1 when any input differs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "real_traces"


def extract_base(rev: str, into: Path) -> Path:
    archive = into / "base.tar"
    subprocess.run(["git", "-C", str(REPO), "archive", "-o", str(archive), rev], check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into / "base", filter="data")
    return into / "base"


def make_corpus(folder: Path, cases: int, seed: int) -> list[Path]:
    """``cases`` mutated traces (each a folder of its files), made once with a fixed seed."""
    done = folder / ".complete"
    if not done.is_file():
        sys.path.insert(0, str(REPO / "tests"))
        from fuzz_mutators import Mutant, trace_mutant
        from hypothesis import HealthCheck, given, settings
        from hypothesis import seed as fixed_seed

        count = [0]

        @fixed_seed(seed)
        @settings(max_examples=cases, database=None, deadline=None, suppress_health_check=list(HealthCheck))
        @given(trace_mutant())
        def one(mutant: Mutant) -> None:
            case = folder / f"case-{count[0]:03d}"
            count[0] += 1
            case.mkdir(parents=True, exist_ok=True)
            for name, blob in mutant.files.items():
                (case / name).write_bytes(blob)

        one()
        done.touch()
    return sorted(p for p in folder.iterdir() if p.is_dir())


def default_inputs(corpus: Path, cases: int, seed: int) -> list[Path]:
    samples = sorted(p for p in (REPO / "sample_traces").iterdir() if p.is_dir())
    real = sorted(p for p in SHARED.rglob("*") if p.is_dir() and any(f.suffix in (".json", ".gz") for f in p.iterdir()))
    return samples + real + (make_corpus(corpus, cases, seed) if cases else [])


def run(tree: Path, path: Path, scratch: Path) -> dict[str, Any]:
    """One ``analyze --format json`` of ``path`` by the commprof in ``tree``: what it printed and its tables."""
    cache = Path(tempfile.mkdtemp(prefix="cache-", dir=scratch))
    env = {**os.environ, "PYTHONPATH": str(tree), "COMMPROF_CACHE_DIR": str(cache)}
    env.pop("COMMPROF_SCHEDULER", None)
    done = subprocess.run([sys.executable, "-m", "commprof", "analyze", "--format", "json", str(path)],
                          capture_output=True, text=True, env=env, cwd=scratch, timeout=600)
    try:
        report: Any = json.loads(done.stdout)
        report.pop("generated_at", None)  # the clock, not a result
    except (ValueError, AttributeError):
        report = done.stdout
    return {"rc": done.returncode, "report": report, "stderr": done.stderr, "tables": cache_tables(cache)}


def cache_tables(cache: Path) -> dict[str, Any]:
    """Every table of the cache: each trace's four tables read through the store's index (small traces share
    a batch's files, named by what the batch holds, so file names are no key), and every other Parquet file
    (the sidecar tables) by its path. This checkout's store reads either layout, so both versions' caches
    are read the same way."""
    import polars as pl

    sys.path.insert(0, str(REPO))
    from commprof.ingest import store

    tables: dict[str, Any] = {}
    per_trace: set[Path] = set()
    for index in sorted(cache.rglob(store.INDEX)):
        folder = index.parent
        tables.update({f"{folder.relative_to(cache)}/{key}": frame
                       for key, frame in store.cached_tables(folder).items()})
        per_trace.update(folder / table for table in store.TABLES)
    tables.update({str(p.relative_to(cache)): pl.read_parquet(p) for p in sorted(cache.rglob("*.parquet"))
                   if p.parent not in per_trace})
    return tables


def added_keys(old: Any, new: Any, where: str = "") -> tuple[Any, list[str]]:
    """``new`` without the dict keys ``old`` does not have (a field the new version adds is not a changed
    result; it is listed instead), and their dotted names."""
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):  # rows of a table: row by row
        rows, added = [], []
        for a, b in zip(old, new, strict=True):
            row, more = added_keys(a, b, f"{where}[].")
            rows.append(row)
            added += [m for m in more if m not in added]
        return rows, added
    if not isinstance(old, dict) or not isinstance(new, dict):
        return new, []
    kept, added = {}, []
    for key, value in new.items():
        if key not in old:
            added.append(f"{where}{key}")
            continue
        kept[key], more = added_keys(old[key], value, f"{where}{key}.")
        added += more
    return kept, added


def differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    report, added = added_keys(a["report"], b["report"])
    b = {**b, "report": report}
    out = [f"{key} differs" for key in ("rc", "report", "stderr") if a[key] != b[key]]
    out += [f"(new field {name}: not compared)" for name in added]
    if a["tables"].keys() != b["tables"].keys():
        out.append(f"table files differ: {sorted(a['tables'].keys() ^ b['tables'].keys())[:4]}")
    old, new = a["tables"], b["tables"]
    out += [f"table {name} differs" for name in sorted(old.keys() & new.keys())
            if old[name].schema != new[name].schema or not old[name].equals(new[name], null_equal=True)]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="e5e1b56", help="the version to compare with (a git revision)")
    parser.add_argument("--corpus", type=Path, default=Path(tempfile.gettempdir()) / "commprof-same-output-corpus")
    parser.add_argument("--cases", type=int, default=40, help="mutated traces in the fuzz corpus (0: none)")
    parser.add_argument("--seed", type=int, default=24)
    parser.add_argument("paths", nargs="*", type=Path)
    args = parser.parse_args(argv)
    inputs = [p.resolve() for p in args.paths] or default_inputs(args.corpus, args.cases, args.seed)
    failed = 0
    with tempfile.TemporaryDirectory(prefix="same-output-") as tmp:
        scratch = Path(tmp)
        base = extract_base(args.base, scratch)
        for path in inputs:
            old, new = run(base, path, scratch), run(REPO, path, scratch)
            found = differences(old, new)
            differ = [d for d in found if not d.startswith("(new field")]  # a field added is noted, not a change
            failed += bool(differ)
            print(f"{'DIFFERS' if differ else 'same   '} rc={new['rc']} tables={len(new['tables'])} {path}"
                  + "".join(f"\n    {d}" for d in found), flush=True)
    print(f"{len(inputs) - failed} of {len(inputs)} inputs give the same tables, report and warnings as {args.base}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
