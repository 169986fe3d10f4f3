"""``commprof analyze PATH``: the step-time breakdown, process groups and top collectives."""

from __future__ import annotations

import io
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from commprof.cli.comm_kernel_option import comm_kernel_option, with_configured
from commprof.cli.common import (
    allow_partial_option,
    output_options,
    parse_ranks,
    runner_options,
    step_range_option,
    work_session,
    write_output,
)
from commprof.cli.opening import RunRequest, analyzed_report, open_request, paths_argument, quick_key, start_prefetch

# What the analysis and the report import lazily, after the parse: imported while the prefetch's child
# reads the trace (an idle wait otherwise; ~45 ms of commprof's modules, ~60 ms of the libraries' parts).
# The findings' rules were ~10 ms after the parse.
LATE_IMPORTS = (
    "commprof.analyzers.pipeline", "commprof.analyzers.findings", "commprof.analyzers.whatif", "commprof.ingest.tables",
    "commprof.ingest.topology", "commprof.ingest.sidecar_tables", "commprof.ingest.group_union", "numpy.ma",
    "polars._utils.parquet", "rich._emoji_codes", "commprof.analyzers.findings_rules", "commprof.analyzers.exposed",
    "commprof.analyzers.findings_latency", "commprof.analyzers.findings_layout", "commprof.analyzers.findings_setup",
    "commprof.analyzers.findings_traffic",
)



def _first_use() -> None:
    """What polars, numpy and rich pay the first time a process uses them (polars' thread pool and each kind
    of operator, rich's style and text caches: ~10-15 ms of a cold analyze after the parse), paid on a tiny
    frame and a throwaway table while the prefetch child still reads the trace. Its results are dropped."""
    import numpy as np
    import polars as pl
    from rich.console import Console
    from rich.table import Table

    frame = pl.DataFrame({"rank": np.zeros(3, np.int32), "pg": ["0", "1", None], "ns": np.arange(3, dtype=np.int64),
                          "x": [0.5, 1.5, 2.5]})
    (frame.lazy().with_columns(pl.col("pg").rank("dense").alias("code"), pl.col("pg").str.starts_with("0").alias("gpu"))
     .group_by("rank", "pg").agg(pl.len(), pl.col("ns").sum(), pl.col("x").mean(), pl.col("code").n_unique())
     .join(frame.lazy(), on=["rank", "pg"], how="full", coalesce=True).filter(pl.col("ns").is_not_null())
     .sort("ns", "pg", descending=[True, False]).collect())
    frame.write_parquet(io.BytesIO(), compression="zstd", statistics=False)
    pl.Series(["a", "b"], dtype=pl.String).gather(np.array([0, 1, 1]))
    np.quantile(np.arange(8), [0.05, 0.5], method="nearest")
    table = Table(title="t", title_justify="left", header_style="bold")
    table.add_column("a")
    table.add_column("b", justify="right")
    table.add_row("x", "1.0")
    console = Console(file=io.StringIO(), width=160, no_color=True)
    console.print(table)
    console.print("w", style="yellow", highlight=False, soft_wrap=True)


def _key_parts() -> None:
    from commprof.report import report_cache

    report_cache.prepare()


# run while waiting for the prefetch child, after LATE_IMPORTS
WHILE_WAITING: tuple[str | Callable[[], object], ...] = (*LATE_IMPORTS, _first_use, _key_parts)


@click.command()
@paths_argument
@click.option("--hta-compat", is_flag=True,
              help="Apply Holistic Trace Analysis 0.5.0's rules so that overlap % can be compared with HTA's: "
                   "drop the last step (a GPU kernel is kept when its launching CPU call started before the "
                   "last ProfilerStep; kernels whose launch is not in the trace are dropped) and, on traces "
                   "with fractional-µs times, round kernel times inward to whole µs.")
@click.option("--top", type=click.IntRange(1), default=10, show_default=True,
              help="How many collectives to list by exposed time.")
@click.option("--layout", default=None, metavar="DIM=N,...",
              help="The parallel layout, e.g. tp=8,pp=4,dp=16 (dims tp, cp, ep, dp, pp; add order=tp-cp-ep-dp-pp "
                   "to change Megatron's rank order, first dimension fastest). Groups equal to one of its groups "
                   "get that dimension, before names and structure.")
@click.option("--network", type=click.Choice(["ib", "roce", "ethernet"]), default=None,
              help="What links groups that span nodes, when no NCCL log or topology capture says.")
@click.option("--gpus-per-node", type=click.IntRange(1), default=None,
              help="Place rank r on node r // N when the traces carry no host names.")
@click.option("--switches", "switches_path", type=click.Path(dir_okay=False, path_type=str), default=None,
              metavar="TOPOLOGY.CONF",
              help="Which switch each host hangs on, in SLURM's topology.conf form (SwitchName=leaf0 "
                   "Nodes=gpu[001-016]): a group whose hosts sit under different leaf switches crosses the spine, "
                   "tier spine. Default: raw/topology/topology.conf in the run, when commprof record found one.")
@click.option("--peak", "peaks", default=None, metavar="TIER=GB/s,...",
              help="Peak bandwidth per tier for efficiency = busbw / peak, e.g. nvlink=450,ib=50 "
                   "(defaults follow the GPU and the NIC speed in the NCCL log).")
@click.option("--what-if", "what_if", multiple=True, metavar="CHANGE",
              help="Estimate step time after a change, keeping compute as measured: TIER=GB/s (ib=25), "
                   "DIM:TIER (tp:nvlink), overlap:DIM (overlap:dp) or straggler:off; repeat to combine. "
                   "layout:DIM=N,... (layout:tp=4,dp=2, alone) lays the run out anew at the same world size: "
                   "each dimension's bytes re-derived from the measured calls (activations per rank for "
                   "tp/pp/cp/ep, parameters per rank for dp), groups placed Megatron-style on the nodes, "
                   "compute per rank kept; an ep folded into the dense ranks (Megatron MoE) keeps its size and "
                   "groups. A change that cannot happen (a group larger than a node onto "
                   "NVLink) or cannot be estimated from the run is refused (exit 2).")
@runner_options
@allow_partial_option
@step_range_option
@comm_kernel_option
@output_options
def analyze(paths: tuple[str, ...], hta_compat: bool, top: int, workers: int | None, scheduler: str | None,
            ranks: str | None, layout: str | None, network: str | None, gpus_per_node: int | None,
            switches_path: str | None, peaks: str | None, what_if: tuple[str, ...], allow_partial: bool,
            step_range: str | None, comm_kernels: tuple[Any, ...], fmt: str, output: Path | None) -> None:
    """Analyze a run directory, a folder of traces (Kineto JSON, nsys SQLite exports) or one trace file.

    A job recorded into one folder per node (local disks): give the node folders, or their parent folder;
    they are one run. A folder of Flight Recorder dumps or NCCL Inspector logs alone gives the hang report
    and the bandwidth per communicator."""
    request = RunRequest(paths, parse_ranks(ranks), allow_partial, step_range, with_configured(comm_kernels))
    if scheduler is None:  # one big trace not cached yet: read in a second process while this one imports
        start_prefetch(request, WHILE_WAITING)
    from commprof.report import report_cache

    # unchanged since a run answered with a kept report: that report, before any heavy import (report_cache.py)
    quick = quick_key(request, {
        "hta_compat": hta_compat, "top": top, "layout": layout, "network": network, "gpus_per_node": gpus_per_node,
        "switches": _file_stamp(switches_path),
        "peaks": peaks, "what_if": list(what_if), "ranks": ranks, "allow_partial": allow_partial,
        "step_range": step_range, "comm_kernels": [repr(d) for d in request.declared]})
    # html draws pictures from the run's analysis: it is analyzed, never answered from a kept report
    known = report_cache.quick_load(quick) if fmt != "html" else None
    if known is not None:
        from commprof.report import analysis_text

        _write(known, fmt, output, render=analysis_text.render_text, markdown=analysis_text.render_markdown)
        return
    from commprof.analyzers.classify import parse_layout
    from commprof.analyzers.efficiency import parse_peaks
    from commprof.analyzers.settings import AnalysisSettings
    from commprof.report import analysis_text

    if what_if:  # bad values end here, as one line, before the run is read
        from commprof.analyzers.whatif import parse_change

        for change in what_if:
            parse_change(change)

    settings = AnalysisSettings(
        hta_compat=hta_compat, top=top, layout=parse_layout(layout) if layout else None, network=network,
        gpus_per_node=gpus_per_node, peaks=parse_peaks(peaks), what_if=tuple(what_if),
        switches=read_switches(switches_path),
    )
    untraced = report_without_traces(paths[0]) if len(paths) == 1 else None
    if untraced is not None:
        _write(untraced, fmt, output, render=_render_untraced)
        return
    with work_session(workers, scheduler) as (runner, progress):
        run = open_request(request, runner=runner, progress=progress)
        if fmt == "html":
            analysis, report = _analyzed(run, settings, {"ranks": request.ranks, "allow_partial": allow_partial,
                                                          "step_range": step_range}, runner, progress)
            write_output(_html(report, analysis), output)
            return
        # unchanged inputs, options and code: the report of the last such run (commprof/report/report_cache.py)
        report = analyzed_report(run, settings, {"ranks": request.ranks, "allow_partial": allow_partial,
                                                 "step_range": step_range}, quick, runner, progress)
    _write(report, fmt, output, render=analysis_text.render_text, markdown=analysis_text.render_markdown)


def _analyzed(run: Any, settings: Any, cache_options: dict[str, Any], runner: Any, progress: Any
              ) -> tuple[Any, dict[str, Any]]:
    """The run's analysis and its report (the same dict --format json writes, windows' trend included)."""
    import commprof
    from commprof.report import analysis_json
    from commprof.report.analyzed import window_trend

    analysis = commprof.analyze(run, settings, runner=runner, progress=progress)
    report = analysis_json.build(analysis)
    if run.source.windows:
        report["windows"] = window_trend(run, report, settings, cache_options, runner, progress)
    return analysis, report


def _html(report: dict[str, Any], analysis: Any = None) -> str:
    from commprof.report import html_report

    return html_report.render_analysis(report, html_report.pictures_for(report, analysis))


def read_switches(path: str | None) -> tuple[tuple[str, str], ...]:
    """``--switches FILE`` as (host, leaf switch) pairs (commprof.ingest.switches)."""
    if path is None:
        return ()
    from commprof.ingest.switches import read_topology_conf

    return tuple(sorted(read_topology_conf(Path(path)).items()))


def _file_stamp(path: str | None) -> list[Any] | None:
    """A file option in the report cache's key: its path, size and mtime (an edit makes another key)."""
    if path is None:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return [path]
    return [os.path.abspath(path), st.st_size, st.st_mtime_ns]


def _write(report: dict[str, Any], fmt: str, output: Path | None, render: Callable[[dict[str, Any], Any], None],
           markdown: Callable[[dict[str, Any]], str] | None = None) -> None:
    if fmt == "json":
        write_output(json.dumps(report, indent=2), output)
    elif fmt == "html":
        write_output(_html(report), output)
    elif fmt == "markdown":
        if markdown is None:
            buffer = io.StringIO()
            render(report, _console(buffer))
            write_output(buffer.getvalue(), output)
        else:
            write_output(markdown(report), output)
    elif output is None:
        import sys

        from rich.console import Console

        # piped output is not cut to 80 columns: keep the tables readable in logs and CI
        render(report, Console(width=None if sys.stdout.isatty() else 160))
    else:
        buffer = io.StringIO()
        render(report, _console(buffer))
        write_output(buffer.getvalue(), output)


def _console(buffer: io.StringIO) -> Any:
    from rich.console import Console

    return Console(file=buffer, width=160, no_color=True)


def report_without_traces(path: str) -> dict[str, Any] | None:
    """The report of a folder (or file) that holds Flight Recorder dumps, NCCL RAS reports and/or NCCL Inspector
    logs and no trace; None when there are traces (the dumps are then read beside them) or none of these."""
    from commprof.errors import InputError
    from commprof.ingest.discover import discover, manifest_warnings
    from commprof.ingest.nccl_profiler import find_traces, read_traces
    from commprof.ingest.nccl_ras import find_reports

    where = Path(path)
    if not where.exists():
        return None
    plugin = find_traces(where)
    ras_files = find_reports(where)
    try:
        # the plugin's traces (and a RAS report saved as JSON) are .json too: a folder of nothing else is untraced
        if not set(discover(where).traces) <= set(plugin) | set(ras_files):
            return None
    except InputError:
        pass
    # imported only now: a run with traces (the common case) does without them, ~10 ms of a cold analyze
    from commprof.analyzers.hang import ENTRY_COLUMNS, hang_report
    from commprof.analyzers.inspector import inspector_summary
    from commprof.analyzers.nccl_profiler import algorithm_summary
    from commprof.ingest.flight_recorder import find_dumps, read_dumps
    from commprof.ingest.inspector import find_logs, read_logs
    from commprof.report.other_sources import untraced_report

    dumps = find_dumps(where) if where.is_dir() else []
    logs = find_logs(where)
    if not dumps and not logs and not plugin and not ras_files:
        return None
    # a recorded run killed while hung: the manifest says where each rank was (record's SIGTERM flush)
    warnings: list[str] = manifest_warnings(_manifest(where)) if where.is_dir() else []
    hang = hang_report(*read_dumps(dumps, warnings, ENTRY_COLUMNS)) if dumps else None
    records = read_logs(logs, warnings) if logs else None
    colls = read_traces(plugin, warnings) if plugin else None
    ras = _ras(ras_files, warnings)
    if hang is None and ras is None and (records is None or records.height == 0) and (colls is None or
                                                                                      colls.height == 0):
        raise InputError("no readable Flight Recorder dump, NCCL RAS report, NCCL Inspector record or "
                         "profiler-plugin collective" + (f"; {warnings[0]}" if warnings else ""), where)
    summary = inspector_summary(records) if records is not None else None
    algorithms = algorithm_summary(colls) if colls is not None else None
    return untraced_report(str(where), hang, summary, records.height if records is not None else 0, warnings,
                           algorithms, colls.height if colls is not None else 0, ras)


def _ras(files: list[Path], warnings: list[str]) -> Any:
    """The hang report of NCCL RAS status reports (analyzers/ras.py), or None without any."""
    if not files:
        return None
    from commprof.analyzers.ras import ras_report
    from commprof.ingest.nccl_ras.tables import read_reports

    tables = read_reports(files, warnings)
    return ras_report(tables.groups, tables.counts, tables.notes, tables.versions)


def _manifest(run_dir: Path) -> dict[str, Any] | None:
    """The run directory's manifest.json, or None when there is none or it cannot be read."""
    try:
        doc = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _render_untraced(report: dict[str, Any], console: Any) -> None:
    from rich.table import Table

    from commprof.report.other_sources import (
        hang_lines,
        hang_section,
        inspector_section,
        plugin_section,
        ras_lines,
        ras_section,
    )

    for line in (*hang_lines(report), *ras_lines(report)):
        console.print(line, style="bold", highlight=False, soft_wrap=True, markup=False)
    for title, columns, rows in (hang_section(report), ras_section(report), inspector_section(report),
                                 plugin_section(report)):
        if not rows:
            continue
        table = Table(title=title, title_justify="left", header_style="bold")
        for i, col in enumerate(columns):
            table.add_column(col, justify="left" if i < 6 else "right")
        for row in rows:
            table.add_row(*row)
        console.print(table)
    for what in report["not_available"]:
        console.print(f"not available from these sources: {what}", style="dim", highlight=False,
                      soft_wrap=True, markup=False)
    for warning in report["warnings"]:
        console.print(f"warning: {warning}", style="yellow", highlight=False, soft_wrap=True)
