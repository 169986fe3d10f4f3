"""A run opened for analysis: its traces ingested (or read from the cache) and its tables."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from commprof.errors import InputError, printable
from commprof.ingest import store
from commprof.ingest.discover import Source, discover_paths, manifest_warnings
from commprof.ingest.job_parts import ranges as _ranges
from commprof.ingest.runner import ProgressFn, Runner
from commprof.ingest.schema import COLLECTIVES, PROCESS_GROUPS, RANKS
from commprof.stages import timed

if TYPE_CHECKING:
    from commprof.ingest.common.comm_kernels import Declared
    from commprof.ingest.group_union import GroupUnion
    from commprof.ingest.tables import RowSlice, RunTables


@dataclass
class RankFile:
    """One rank's trace and where its cached tables are."""

    rank: int
    entry: store.FileEntry
    meta: dict[str, Any]


@dataclass
class Run:
    source: Source
    ingested: store.Ingested
    rank_files: list[RankFile]
    warnings: list[str] = field(default_factory=list)
    _tables: RunTables | None = field(default=None, repr=False)
    declared: tuple[Declared, ...] = ()  # kernel families the user declared communication (--comm-kernel)

    @property
    def path(self) -> Path:
        return self.source.path

    @property
    def manifest(self) -> dict[str, Any] | None:
        return self.source.manifest

    def _repr_html_(self) -> str:
        """In a notebook: where the run is, its ranks, hosts and process groups (commprof/notebook.py)."""
        from commprof.notebook import run_html

        return run_html(self)

    @property
    def world_size(self) -> int | None:
        sizes = {int(m.meta["world_size"]) for m in self.rank_files if m.meta.get("world_size") is not None}
        return sizes.pop() if sizes else None

    def rank_tables(self, table: str) -> Iterator[tuple[RankFile, pl.DataFrame]]:
        """One rank at a time, so analyses of huge runs hold one rank in memory."""
        for rf in self.rank_files:
            frame = store.read_table(self.ingested, table, rf.entry, rf.meta)
            if frame.height and "rank" in frame.columns and frame["rank"][0] != rf.rank:
                frame = frame.with_columns(pl.lit(rf.rank, pl.Int32).alias("rank"))
            yield rf, self._united(frame.lazy(), table).collect()

    def table(self, name: str) -> pl.DataFrame:
        """A whole table over all ranks: ``intervals``, ``collectives``, ``step_marks``,
        ``process_groups`` or ``ranks``."""
        if name == "ranks":
            return self.ranks
        if name == "process_groups":
            return self.process_groups
        if name not in store.TABLES:
            raise KeyError(f"unknown table {name!r}; known: ranks, {', '.join(store.TABLES)}")
        return self._scan(name).collect()

    def _scan(self, name: str, *, as_read: bool = False) -> pl.LazyFrame:
        """One lazy scan over the ranks' Parquet files (read in parallel by polars). Ranks that were
        assumed from file order get their rank written over the file's. Unless ``as_read``, a group named by
        two sources has one name (see ``group_union``)."""
        # each file once (small traces share a batch's file), each rank its rows of it
        traces = [(rf.entry, rf.meta) for rf in self.rank_files]
        if traces and not as_read and (name == "process_groups"
                                       or all(rf.meta.get("rank") == rf.rank for rf in self.rank_files)):
            return self._united(store.read_rows(self.ingested.cache, name, traces).lazy(), name)
        frames = store.read_tables(self.ingested.cache, name, traces)
        scans = []
        for rf, scan in zip(self.rank_files, frames, strict=True):
            if rf.meta.get("rank") != rf.rank and name != "process_groups":
                scan = scan.with_columns(pl.lit(rf.rank, pl.Int32).alias("rank"))
            if as_read and name == "process_groups":
                scan = scan.with_columns(pl.lit(rf.rank, pl.Int32).alias("lister"),
                                         pl.lit(rf.meta.get("source", "kineto")).alias("source"))
            scans.append(scan)
        frame = pl.concat(scans, how="vertical_relaxed").lazy() if scans else pl.LazyFrame()
        return frame if as_read else self._united(frame, name)

    def _united(self, frame: pl.LazyFrame, name: str) -> pl.LazyFrame:
        """A group named by two sources under its one name (and its calls matched by order)."""
        if name not in ("collectives", "process_groups") or not self.group_union.alias:
            return frame
        union = self.group_union
        frame = frame.with_columns(pl.col("pg").replace(union.alias))
        if name == "collectives":  # the two sources' seq count differently: such a group is matched by order
            frame = frame.with_columns(pl.when(pl.col("pg").is_in(list(union.united))).then(None)
                                       .otherwise(pl.col("seq")).alias("seq"))
        return frame

    @cached_property
    def group_union(self) -> GroupUnion:
        """The groups that Kineto and another source name differently, as one (commprof.ingest.group_union)."""
        from commprof.ingest.group_union import GroupUnion, unite

        if len({rf.meta.get("source", "kineto") for rf in self.rank_files}) < 2:
            return GroupUnion()
        calls = self._scan("collectives", as_read=True).select("rank", "pg", "op", "bytes", "start_ns").collect()
        return unite(self._scan("process_groups", as_read=True).collect(), calls)

    @property
    def intervals(self) -> pl.DataFrame:
        return self.table("intervals")

    @property
    def collectives(self) -> pl.DataFrame:
        return self.table("collectives")

    @property
    def step_marks(self) -> pl.DataFrame:
        return self.table("step_marks")

    @cached_property
    def ranks(self) -> pl.DataFrame:
        manifest_ranks = {}
        for info in (self.manifest or {}).get("ranks", []) or []:
            if isinstance(info, dict) and isinstance(info.get("rank"), int):
                manifest_ranks[info["rank"]] = info
        rows = []
        for rf in self.rank_files:
            info = manifest_ranks.get(rf.rank, {})
            rows.append({
                "rank": rf.rank,
                "host": info.get("host") or rf.meta.get("host"),
                "node": None,
                "local_rank": info.get("local_rank"),
                "pid": info.get("pid") or rf.meta.get("pid"),
                "device": str(info.get("device") or rf.meta.get("device") or ""),
                "gpu_name": rf.meta.get("gpu_name") or info.get("gpu_name"),
                "world_size": rf.meta.get("world_size"),
                "backend": rf.meta.get("backend"),
                "mode": rf.meta.get("mode"),
                "file": rf.entry.rel,
                "rank_source": rf.meta.get("rank_source"),
                "source": rf.meta.get("source", "kineto"),
            })
        frame = pl.DataFrame(rows, schema=RANKS)
        hosts = frame["host"].fill_null("?").unique(maintain_order=True).to_list()
        return frame.with_columns(
            pl.col("host").fill_null("?").replace_strict(hosts, list(range(len(hosts))), return_dtype=pl.Int32)
            .alias("node")
        ).sort("rank")

    @cached_property
    def process_groups(self) -> pl.DataFrame:
        """Groups seen by any rank, merged by name (each rank lists only the groups it is in). A reader that
        knows only the rank's own place in a group (nsys: a communicator's size and this rank) lists that
        rank alone: the group's ranks are then the union of what every rank says."""
        if not self.rank_files:
            return pl.DataFrame(schema=PROCESS_GROUPS)
        traces = [(rf.entry, rf.meta) for rf in self.rank_files]
        merged = (
            # a row listed alike by many ranks once, read file by file (every trace lists the default group's
            # every rank: 16,384 ranks make 268M items); the first of each stays, in order
            store.distinct_rows(self.ingested.cache, "process_groups", traces,
                                lambda frame: self._united(frame.lazy(), "process_groups").collect())
            .with_columns(pl.col("ranks").list.len().alias("_n"))
            .sort("_n", descending=True, maintain_order=True)  # ties in rank order: the same page every time
            .group_by("pg", maintain_order=True)
            .agg(
                pl.col("desc").drop_nulls().first(),
                pl.col("ranks").first(),
                pl.col("ranks").explode().unique().sort().alias("_union"),
                pl.col("size").max(),
                pl.col("backend").drop_nulls().first(),
            )
        )
        merged = merged.with_columns(  # the union where no rank listed the whole group
            pl.when(pl.col("ranks").list.len() < pl.col("size").fill_null(0)).then("_union").otherwise("ranks")
            .alias("ranks"))
        return merged.select(list(PROCESS_GROUPS)).sort(
            pl.col("pg").str.to_integer(strict=False), "pg", nulls_last=True
        )

    def tables(self) -> RunTables:
        """The frozen bundle every analyzer receives (built once per Run)."""
        if self._tables is None:
            self._tables = self._build_tables()
        return self._tables

    def _build_tables(self) -> RunTables:
        from commprof.ingest.sidecar_tables import load_sidecars
        from commprof.ingest.tables import RunFacts, RunTables

        with timed("run.collectives"):
            collectives = self.collectives
        if collectives.height:
            collectives = collectives.with_columns(pl.int_range(pl.len(), dtype=pl.Int64).over("rank").alias("call"))
        else:
            collectives = collectives.with_columns(pl.lit(None, pl.Int64).alias("call")) if collectives.width \
                else pl.DataFrame(schema={**COLLECTIVES, "call": pl.Int64})
        with timed("run.ranks"):
            ranks = self.ranks
        world = self.world_size
        with timed("run.sidecar_tables"):  # NCCL logs, Flight Recorder dumps, topology
            sidecars = load_sidecars(self.source.input_folders, ranks, world, self.ingested.cache)
        manifest = self.manifest or {}
        facts = RunFacts(
            path=self.source.label, kind=self.source.kind, world_size=world or manifest.get("world_size"),
            synthetic=bool(manifest.get("synthetic", False)),
            hosts=tuple(sorted({h for h in ranks["host"].to_list() if h})),
            modes=tuple(sorted(set(ranks["mode"].drop_nulls().to_list()))),
            manifest=self.manifest, rank_ends=_rank_ends(self.ingested.sidecars),
        )
        shared = Counter(store.part_file(rf.meta, rf.entry.stem) for rf in self.rank_files)
        files = tuple((rf.rank, _interval_source(self.ingested.cache, rf, shared)) for rf in self.rank_files)
        with timed("run.process_groups"):
            groups = self.process_groups
        with timed("run.step_marks"):
            marks = self.step_marks
        return RunTables(facts, ranks, groups, collectives, marks, files, sidecars,
                         tuple(self.warnings) + self.group_union.warnings + sidecars.warnings, self.declared,
                         _uncounted(self.rank_files))


def _uncounted(rank_files: list[RankFile]) -> tuple[tuple[int, str, int, int, int], ...]:
    """What each rank's reader kept of the kernels that read like communication but no rule counts (meta)."""
    return tuple((rf.rank, row[0], row[1], row[2], row[3])
                 for rf in rank_files for row in rf.meta.get("uncounted") or []
                 if isinstance(row, list) and len(row) == 4 and isinstance(row[0], str)
                 and all(type(v) is int for v in row[1:]))


def _rank_ends(sidecars: Iterable[dict[str, Any]]) -> tuple[tuple[int, str], ...]:
    """How each rank's process ended, as its sidecar says (RunFacts.rank_ends)."""
    ends = {}
    for sc in sidecars:
        if type(sc.get("rank")) is not int:
            continue
        window = sc.get("window")
        killed = isinstance(window, dict) and window.get("killed_by")
        ends[sc["rank"]] = "exited" if sc.get("ended_at") else "signalled" if killed else "died"
    return tuple(sorted(ends.items()))


def _interval_source(cache: Path, rf: RankFile, shared: Counter[str]) -> Path | RowSlice:
    """Where a rank's intervals are: its own file, or its rows of its batch's file (weighed as its share)."""
    from commprof.ingest.tables import RowSlice

    path = store.table_file(cache, "intervals", rf.entry, rf.meta)
    rows = store.part_rows(rf.meta, "intervals")
    if rows is None:
        return path
    return RowSlice(path, rows[0], rows[1], shared[store.part_file(rf.meta, rf.entry.stem)])


def _corrupt_traces(ingested: store.Ingested, allow_partial: bool) -> list[str]:
    """Damage inside a complete trace is an error (the numbers would silently miss a part of the run)
    unless a partial result is asked for; then it is a warning."""
    corrupt = [(entry, meta) for entry, meta in zip(ingested.entries, ingested.metas, strict=True)
               if meta.get("corrupt")]
    if not corrupt:
        return []
    if not allow_partial:
        entry, meta = corrupt[0]
        more = f" (and {len(corrupt) - 1} other traces)" if len(corrupt) > 1 else ""
        raise InputError(f"{meta['corrupt']}{more}; pass --allow-partial to analyze what is readable",
                         entry.label or entry.path)
    return [f"{entry.label or entry.path}: {meta['corrupt']} (--allow-partial)" for entry, meta in corrupt]


def _assign_ranks(ingested: store.Ingested, wanted: frozenset[int] | None = None, allow_partial: bool = False,
                  manifest: dict[str, Any] | None = None) -> tuple[list[RankFile], list[str]]:
    if wanted is not None and not ingested.entries:
        raise InputError(f"none of the ranks asked for ({_ranges(sorted(wanted))}) has a trace in this run")
    warnings: list[str] = _corrupt_traces(ingested, allow_partial)
    for meta in ingested.metas:
        warnings.extend(meta.get("warnings") or [])
    sizes: dict[int, list[str]] = {}
    for entry, meta in zip(ingested.entries, ingested.metas, strict=True):
        if meta.get("world_size") is not None:
            sizes.setdefault(int(meta["world_size"]), []).append(entry.rel)
    if len(sizes) > 1:
        detail = "; ".join(f"world size {ws}: {', '.join(files[:3])}" for ws, files in sorted(sizes.items()))
        raise InputError(f"traces come from runs of different world sizes ({detail})", ingested.entries[0].path.parent)
    taken: dict[int, str] = {}
    left_out = ingested.left_out_ranks  # not opened (--ranks): file order still skips their ranks
    pending: list[tuple[store.FileEntry, dict[str, Any]]] = []
    out: list[RankFile] = []
    for entry, meta in zip(ingested.entries, ingested.metas, strict=True):
        if meta.get("skipped"):
            continue
        rank = meta.get("rank")
        if rank is None:
            pending.append((entry, meta))
            continue
        if rank in taken:
            raise InputError(
                f"two traces claim rank {rank}: {taken[rank]} and {entry.rel} (profiled twice? keep one)",
                entry.path,
            )
        if meta.get("rank_source") == "file name" and meta.get("source", "kineto") == "kineto":
            warnings.append(f"{entry.rel}: no distributedInfo in the trace; rank {rank} taken from the file name")
        taken[rank] = entry.rel
        out.append(RankFile(int(rank), entry, meta))
    next_free = 0
    for entry, meta in pending:
        while next_free in taken or next_free in left_out:
            next_free += 1
        taken[next_free] = entry.rel
        meta["rank_source"] = "file order"
        said = "no distributedInfo" if meta.get("source", "kineto") == "kineto" else "no rank in the file"
        warnings.append(f"{entry.rel}: {said} and no rank in the file name; assumed rank {next_free}")
        out.append(RankFile(next_free, entry, meta))
    if not out:
        skipped = [m for m in ingested.metas if m.get("skipped")]
        if len(skipped) == 1:
            raise InputError(str(skipped[0]["skipped"]))
        if any(m.get("failed") for m in skipped):
            raise InputError(f"none of the {len(skipped)} traces could be read; the first: {skipped[0]['skipped']}")
        raise InputError(f"no trace with events: {len(skipped)} traces are cut short before their first event",
                         ingested.entries[0].path.parent)
    if all(rf.meta.get("n_intervals", 1) == 0 for rf in out):
        listed = ", ".join(rf.entry.rel for rf in out[:3]) + (", ..." if len(out) > 3 else "")
        raise InputError(f"nothing to analyze: no trace holds a usable event ({listed})"
                         + (f"; {warnings[0]}" if warnings else ""), ingested.entries[0].path.parent)
    out.sort(key=lambda rf: rf.rank)
    world = next(iter(sizes), None)
    failed = ingested.failures
    if failed:
        warnings.append(f"{len(failed)} of {len(ingested.entries)} trace files could not be read and were skipped "
                        f"({', '.join(m['rel'] for m in failed[:4])}{', ...' if len(failed) > 4 else ''})")
    if wanted is not None:
        return _subset(out, wanted, world, warnings)
    if world is not None and len(out) < world:
        warnings.append(_missing_ranks(out, world, manifest))
    return out, warnings


def _missing_ranks(found: list[RankFile], world: int, manifest: dict[str, Any] | None) -> str:
    from commprof.ingest.job_parts import missing_ranks_text

    have = {rf.rank for rf in found}
    per_node = {r.get("local_world_size") for r in (manifest or {}).get("ranks") or []} - {None}
    if not per_node:  # the ranks' hosts: as many ranks a host as the fullest one holds
        hosts = Counter(rf.meta.get("host") for rf in found if rf.meta.get("host"))
        per_node = {max(hosts.values())} if len(hosts) > 1 else set()
    return missing_ranks_text(sorted(set(range(world)) - have), world, manifest,
                              per_node.pop() if len(per_node) == 1 else None)


def _subset(out: list[RankFile], wanted: frozenset[int], world: int | None,
            warnings: list[str]) -> tuple[list[RankFile], list[str]]:
    """Keep the ranks asked for (``--ranks``); say what that leaves out."""
    kept = [rf for rf in out if rf.rank in wanted]
    missing = sorted(wanted - {rf.rank for rf in kept})
    if not kept:
        raise InputError(f"none of the ranks asked for ({_ranges(sorted(wanted))}) has a trace in this run")
    if missing:
        warnings.append(f"no trace for {len(missing)} of the {len(wanted)} ranks asked for ({_ranges(missing)})")
    total = f" of {world}" if world else ""
    warnings.append(f"analyzing {len(kept)}{total} ranks (--ranks {_ranges([rf.rank for rf in kept])}): waits and "
                    "skew compare these ranks only, group totals cover only them")
    return kept, warnings


def open_run(
    path: str | Path | Sequence[str | Path], *, cache_dir: str | Path | None = None, jobs: int | None = None,
    progress: ProgressFn | None = None, runner: Runner | None = None, ranks: Iterable[int] | None = None,
    allow_partial: bool = False, step_range: str | None = None, declared: tuple[Declared, ...] = (),
) -> Run:
    """Open a commprof run directory, a folder of Kineto traces or one trace file; or one job recorded into
    several (a parent folder of node folders, or a list of paths: each node's folder).

    Traces are parsed once (on ``runner``: by default a local process pool sized to the machine, or
    ``jobs`` processes) and cached as Parquet; later opens read the cache. ``ranks``: open only these
    ranks' traces (a quick look at a big run). A trace damaged inside (not just cut short at its end) is
    an error unless ``allow_partial``. ``step_range``: the NVTX range that marks a step in Nsight Systems
    exports (default: ProfilerStep#N and common training-loop names). ``declared``: kernel families the user
    declares communication (``--comm-kernel``; commprof.ingest.common.comm_kernels.Declared).
    """
    source = discover_paths([path] if isinstance(path, (str, Path)) else path)
    wanted = None if ranks is None else frozenset(ranks)
    ingested = store.ingest(source, Path(cache_dir) if cache_dir else None, jobs, progress, runner, wanted,
                            step_range, declared)
    rank_files, warnings = _assign_ranks(ingested, wanted, allow_partial, source.manifest)
    warnings += _step_range_warnings(ingested, rank_files, step_range)
    # one line each, whatever the file names in them hold (the one place Run warnings are made printable)
    warnings = [printable(w) for w in (*source.problems, *ingested.problems, *manifest_warnings(source.manifest),
                                       *warnings)]
    return Run(source, ingested, rank_files, warnings, declared=declared)


def _step_range_warnings(ingested: store.Ingested, rank_files: list[RankFile], step_range: str | None) -> list[str]:
    """Steps of nsys exports are NVTX ranges: say when ``--step-range`` applies to no file or matched nothing,
    and, without it, when no default name matched (the user's loop names its steps otherwise)."""
    exports = [rf for rf in rank_files if rf.meta.get("source") == "nsys"]
    if not exports:
        return [] if step_range is None else [
            f"--step-range {step_range!r} applies to Nsight Systems exports and this run has none "
            "(Kineto traces mark steps with ProfilerStep#N): ignored"]
    unmatched = [rf.rank for rf in exports if store.read_table(ingested, "step_marks", rf.entry, rf.meta).height == 0]
    if not unmatched:
        return []
    which = "any export" if len(unmatched) == len(exports) else \
        f"the exports of ranks {_ranges(unmatched)} (of {len(exports)})"
    if step_range is None:
        return [f"no NVTX step range (ProfilerStep#N, step, iteration, train_step ...) in {which}: the whole "
                "export is one step; name your loop's range with --step-range NAME"]
    return [f"--step-range {step_range!r}: no NVTX range of that name (alone or followed by a step number) in "
            f"{which}: the whole export is one step (names are matched whole: see the NVTX rows in nsys)"]
