"""NCCL logs as people paste them: every line's ``host:pid:tid [dev] NCCL INFO`` prefix stripped. They are
read (one process per file, hosts and ranks unknown) and said to be pastes; a log with its prefixes, or a
file that is not an NCCL log, is never taken for one."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from click.testing import Result

from commprof.ingest.nccl_logs import parse_nccl_logs

Cli = Callable[..., Result]
LOG = Path(__file__).parent / "fixtures" / "nccl" / "cumem_nvls_2.22" / "nccl.h100a.2001.log"
PREFIX = re.compile(r"^\S+:\d+:\d+ \[\d+\] NCCL INFO ")


def _paste(tmp_path: Path) -> Path:
    pasted = tmp_path / "paste.txt"
    pasted.write_text("".join(PREFIX.sub("", line) for line in LOG.read_text().splitlines(keepends=True)))
    return pasted


def test_a_paste_reads_like_the_log_it_came_from(tmp_path: Path) -> None:
    whole, paste = parse_nccl_logs([LOG]), parse_nccl_logs([_paste(tmp_path)])
    assert paste.stats.pasted_files == [str(tmp_path / "paste.txt")] and whole.stats.pasted_files == []
    assert [(c.rank, c.nranks, c.comm_id) for c in paste.comms] == [(c.rank, c.nranks, c.comm_id) for c in whole.comms]
    assert len(paste.links) == len(whole.links) > 0
    assert {p.host for p in paste.processes} == {None} and {p.host for p in whole.processes} == {"h100a"}


def test_a_prefixed_log_or_other_text_is_not_a_paste(tmp_path: Path) -> None:
    other = tmp_path / "notes.txt"
    other.write_text("Channel 5 on TV\nRing 3 : the bell\nsome text\n")
    assert parse_nccl_logs([LOG, other]).stats.pasted_files == []


def test_topology_says_hosts_and_ranks_are_unknown(tmp_path: Path, cli: Cli) -> None:
    folder = tmp_path / "logs"
    folder.mkdir()
    _paste(tmp_path).rename(folder / "nccl.log")
    result = cli("topology", str(folder), env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "pasted without their host:pid:tid [dev] NCCL INFO prefixes" in " ".join(result.output.split())
