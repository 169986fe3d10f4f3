"""``commprof synth OUT``: write a synthetic multi-node GPU run with known answers (truth.json)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import click


def _rewrite(out: Path, write_as: str, step_range: str | None = None) -> None:
    """The generated run's traces replaced by the same run in another format (read back from its tables)."""
    from commprof.run import open_run

    tables = open_run(out).tables()
    if write_as == "inspector":
        from commprof.synth.inspector import write_logs

        write_logs(tables, out / "raw" / "inspector")
    else:
        from commprof.synth.nsys import write_exports

        write_exports(tables, out / "raw" / "nsys", generation=2 if write_as == "nsys-2" else 3,
                      step_name=step_range or "ProfilerStep")
    shutil.rmtree(out / "raw" / "traces")
    shutil.rmtree(out / "tables", ignore_errors=True)


def _straggler(text: str | None) -> tuple[int | None, float]:
    from commprof.errors import UsageError

    if not text:
        return None, 1000.0
    rank, _, delay = text.partition(":")
    try:
        return int(rank), float(delay.lstrip("+")) if delay else 1000.0
    except ValueError:
        raise UsageError(f"--straggler: {text!r} is not RANK or RANK:+US (e.g. 5:+300)") from None


def _offsets(text: str | None) -> tuple[float, ...]:
    from commprof.errors import UsageError

    if not text:
        return ()
    try:
        return tuple(float(v) for v in text.split(","))
    except ValueError:
        raise UsageError(f"--clock-offset-us: {text!r} is not a number or a comma-separated list") from None


@click.command("synth")
@click.argument("out", type=click.Path(file_okay=False, path_type=Path))
@click.option("--nodes", default=2, show_default=True, help="hosts")
@click.option("--gpus-per-node", default=8, show_default=True, help="GPUs (ranks) per host")
@click.option("--layout", default="tp=8,dp=2", show_default=True,
              help="dim=size,... over tp, cp, ep, dp, pp (Megatron order tp-cp-ep-dp-pp; order= changes it)")
@click.option("--steps", default=4, show_default=True, help="profiled steps (ProfilerStep#0..N-1)")
@click.option("--micro-batches", default=4, show_default=True, help="micro-batches per step (1F1B when pp > 1)")
@click.option("--layers", default=4, show_default=True, help="transformer layers per pipeline stage")
@click.option("--model-size", default=7.0, show_default=True,
              help="parameters in billions (sets compute and message sizes)")
@click.option("--tokens", default=4096, show_default=True, help="tokens per micro-batch")
@click.option("--gpu-tflops", default=400.0, show_default=True, help="achieved TFLOP/s per GPU")
@click.option("--intra", type=click.Choice(["nvlink", "pcie"]), default="nvlink", show_default=True,
              help="link between GPUs of a host")
@click.option("--network", type=click.Choice(["ib", "roce", "ethernet"]), default="ib", show_default=True,
              help="link between hosts (ethernet: NCCL falls back to TCP sockets)")
@click.option("--nccl-version", default="2.21.5", show_default=True,
              help="NCCL 2.18-2.30: log line formats and kernel names (ncclDevKernel_* from 2.19)")
@click.option("--dp-overlap", type=click.Choice(["on", "off"]), default="on", show_default=True,
              help="on: bucketed DP gradient sync hidden behind the last backward; off: after it, exposed")
@click.option("--dp-buckets", default=4, show_default=True, help="gradient buckets per step")
@click.option("--fsdp/--no-fsdp", default=False, show_default=True,
              help="FSDP-style: per-layer parameter all-gather prefetched one layer ahead, reduce-scatter of grads")
@click.option("--straggler", metavar="RANK[:+US]", help="this rank's GPU is US µs (default 1000) slower every step")
@click.option("--slow-link", metavar="HOST", help="this host's NICs run at a quarter of their speed")
@click.option("--tp-across-nodes", is_flag=True, help="bad placement: ranks dealt round-robin over hosts")
@click.option("--socket-fallback", is_flag=True,
              help="IB/RoCE NICs present, but NCCL uses TCP sockets (NCCL_IB_DISABLE=1): network at Ethernet speed")
@click.option("--alltoall-imbalance", default=1.0, show_default=True, metavar="X",
              help="EP: each group's first member (a hot expert) gets X times the mean tokens per all-to-all")
@click.option("--desync", type=int, metavar="RANK",
              help="this rank calls all_gather where its innermost group calls all_reduce (last step)")
@click.option("--nccl-fault", "nccl_faults", multiple=True, type=click.Choice(["gdr-off", "p2p-off", "nvls-off"]),
              help="NCCL set-up faults in the logs only: GPUDirect RDMA disabled, P2P disabled (SHM), NVLS unavailable")
@click.option("--flight-recorder", is_flag=True, help="also write Flight Recorder dumps (raw/flight_recorder/)")
@click.option("--clock-offset-us", metavar="US[,US...]",
              help="host clocks: one value (host h is off by h×US) or one per host")
@click.option("--group-names", type=click.Choice(["megatron", "mesh"]), default="megatron", show_default=True,
              help="process group descriptions: Megatron-Core *_GROUP or DeviceMesh mesh_<dim>")
@click.option("--jitter", default=0.005, show_default=True, help="compute kernels vary by up to ± this fraction")
@click.option("--kernels-per-phase", default=1, show_default=True,
              help="split each compute phase into N kernels (bigger traces)")
@click.option("--seed", default=0, show_default=True, help="same seed, same run")
@click.option("--write-as", "write_as", type=click.Choice(["kineto", "nsys", "nsys-2", "inspector"]),
              default="kineto", show_default=True,
              help="the per-rank files: Kineto traces, Nsight Systems SQLite exports (schema 3.x, or 2.x's older "
                   "names with nsys-2) in raw/nsys/, or NCCL Inspector logs in raw/inspector/ (no timeline)")
@click.option("--step-range", "step_range", metavar="NAME",
              help="with --write-as nsys: steps are the NVTX ranges NAME#N instead of ProfilerStep#N (read them back "
                   "with analyze --step-range NAME)")
@click.option("--force", is_flag=True, help="replace OUT if it exists")
def synth(out: Path, nodes: int, gpus_per_node: int, layout: str, steps: int, micro_batches: int, layers: int,
          model_size: float, tokens: int, gpu_tflops: float, intra: str, network: str, nccl_version: str,
          dp_overlap: str, dp_buckets: int, fsdp: bool, straggler: str | None, slow_link: str | None,
          tp_across_nodes: bool, socket_fallback: bool, alltoall_imbalance: float, desync: int | None,
          nccl_faults: tuple[str, ...], flight_recorder: bool, clock_offset_us: str | None, group_names: str,
          jitter: float,
          kernels_per_phase: int, seed: int, write_as: str, step_range: str | None, force: bool) -> None:
    """Write a synthetic run directory to OUT that reads like one `commprof record` made on a GPU
    cluster (Kineto traces, NCCL logs, topology, manifest marked synthetic) and truth.json beside the
    manifest with the answers a correct analysis must give."""
    from commprof.errors import UsageError
    from commprof.synth import SynthConfig
    from commprof.synth.config import parse_layout_text, parse_version

    if step_range is not None and (not write_as.startswith("nsys") or not step_range.strip()):
        raise UsageError("--step-range names the NVTX step ranges of nsys exports: give a name, with --write-as nsys")
    sizes, order = parse_layout_text(layout)
    rank, delay = _straggler(straggler)
    cfg = SynthConfig(nodes=nodes, gpus_per_node=gpus_per_node, sizes=sizes, order=order, steps=steps,
                      micro_batches=micro_batches, layers=layers, model_size_b=model_size, tokens=tokens,
                      gpu_tflops=gpu_tflops, intra=intra, network=network, nccl_version=parse_version(nccl_version),
                      dp_overlap=dp_overlap == "on", dp_buckets=dp_buckets, fsdp=fsdp, straggler=rank,
                      straggler_us=delay, slow_link=slow_link, tp_across_nodes=tp_across_nodes,
                      socket_fallback=socket_fallback, alltoall_imbalance=alltoall_imbalance, desync=desync,
                      nccl_faults=tuple(nccl_faults), flight_recorder=flight_recorder,
                      clock_offsets_us=_offsets(clock_offset_us), group_names=group_names, jitter=jitter,
                      kernels_per_phase=kernels_per_phase, seed=seed)
    if out.exists() and any(out.iterdir()):
        if not force:
            raise UsageError(f"{out} exists and is not empty (pass --force to replace it)")
        shutil.rmtree(out)
    truth = _generate_whole(cfg, out)
    if write_as != "kineto":
        _rewrite(out, write_as, step_range)
    click.echo(f"wrote {out}: {cfg.world_size} ranks on {nodes} hosts, {steps} steps (synthetic); "
               f"answers in {out / 'truth.json'}")
    if truth["findings"]["expected"]:
        click.echo("expected findings: " + ", ".join(f["id"] for f in truth["findings"]["expected"]))


BIG_RUN_RANKS = 1024


def _generate_whole(cfg: Any, out: Path) -> dict[str, Any]:
    """Generate into a hidden sibling folder renamed to OUT at the end: a full disk or a kill mid-way
    leaves no half run that a later analyze would read as a whole one."""
    from commprof.ingest.runner import usable_cpus
    from commprof.safe_write import WriteError, remove_quietly, temporary_name
    from commprof.synth import generate

    out = out.absolute()
    staging = temporary_name(out)
    try:
        # big runs: the ranks' files written by one forked process per core, gzip at its fastest level (at
        # 16,384 ranks level 6 and one process took over an hour; the contents are the same)
        big = cfg.world_size >= BIG_RUN_RANKS
        truth = generate(cfg, staging, ["commprof", "synth", *sys.argv[2:]], compresslevel=1 if big else 6,
                         jobs=usable_cpus() if big else 1)
        if out.exists():
            out.rmdir()  # empty (checked above): a folder is only renamed over an empty one
        staging.rename(out)
    except OSError as err:
        remove_quietly(staging)
        raise WriteError("the synthetic run", out, err) from None
    except BaseException:
        remove_quietly(staging)
        raise
    return truth
