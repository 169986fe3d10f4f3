"""Issue 37, item 5: an NCCL log pasted without its ``host:pid:tid [dev] NCCL INFO`` prefixes says what the same
lines say with them: NICs, network, NVLS, rings and trees, communicators, versions; only the hosts are gone
(and said to be). The prefixed logs are tests/data/nccl_pasted (README there); each is stripped here the
ways people strip them: the whole prefix, the prefix indented under a Markdown list, WARN lines that keep
``file.cc:123 NCCL WARN``, the paste below the job's own output. And prefixes met in recent threads (vLLM's
worker tags, a collector's ``host >> :pid:tid``, NCCL 2.26+'s timestamps on WARN lines) give host and pid."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from commprof.ingest.nccl_logs import build_tables, load_nccl, parse_nccl_logs
from commprof.nccl import summarize

DATA = Path(__file__).parent / "data" / "nccl_pasted"
LOGS = sorted(DATA.glob("*.log"))
# what people cut: an optional NCCL timestamp, host:pid:tid [dev], and the INFO marker (WARN keeps file:line)
PREFIX = re.compile(r"^(?:\[[^\]]*\] )?\S+:\d+:\d+ \[\d+\] (?:NCCL INFO )?")


def _strip(text: str) -> list[str]:
    return [PREFIX.sub("", line) for line in text.splitlines()]


PASTES: dict[str, Callable[[str], str]] = {
    "stripped": lambda text: "\n".join(_strip(text)) + "\n",
    "indented": lambda text: "\n".join("    " + line if line else line for line in _strip(text)) + "\n",
    "below the job's output": lambda text: "".join(f"[train] step {i} loss {2.5 - i / 500:.3f}\n" for i in range(450))
    + "\n".join(_strip(text)) + "\n",
    "crlf": lambda text: "\r\n".join(_strip(text)) + "\r\n",
}


def _facts(path: Path) -> dict[str, Any]:
    run = load_nccl(path)
    tables = build_tables(run.logs, run.topologies, run.graphs)
    s = summarize(run, tables)
    hosts, comms = s["hosts"], tables.nccl_comms
    return {
        "versions": s["nccl_versions"],
        "nics": sorted({(n["net"], n["name"], n.get("link_layer"), n["network"], n.get("speed_mbps"))
                        for h in hosts for n in h["nics"]}),
        "network": sorted({n for h in hosts for n in h["network"]}),
        "network_types": sorted({n for h in hosts for n in h["network_types"]}),
        "nvls_available": sorted({str(h["nvls_available"]) for h in hosts}),
        "inter_host": sorted({(h["inter_host"]["tier"], h["inter_host"]["source"]) for h in hosts}),
        "intra_host": sorted({(h["intra_host"]["tier"], h["intra_host"]["source"]) for h in hosts}),
        "communicators": [(c["comm_id"], c["nranks"], c["ranks_seen"], c["nnodes"], c["tier"], sorted(c["transports"]),
                           c["nvls"]) for c in s["communicators"]],
        "rings": sorted(comms["ring_channels"].drop_nulls().to_list()),
        # the channel-count line names no rank: in a paste of many processes it may land on a neighbour's rank,
        # so the counts said are compared, not which rank said them
        "channels": sorted(comms.select("coll_channels", "nvls_channels", "p2p_channels").drop_nulls().unique().rows()),
        "parsed": s["parse_stats"]["parsed"],
    }


@pytest.mark.parametrize("how", sorted(PASTES))
@pytest.mark.parametrize("log", LOGS, ids=lambda p: p.stem)
def test_a_paste_gives_the_facts_of_its_prefixed_log(log: Path, how: str, tmp_path: Path) -> None:
    paste = tmp_path / "paste.txt"
    paste.write_bytes(PASTES[how](log.read_text()).encode())
    whole, pasted = _facts(log), _facts(paste)
    assert pasted == whole
    assert whole["nics"] and whole["network"] and whole["communicators"]
    logs = parse_nccl_logs([paste])
    assert logs.stats.pasted_files == [str(paste)]
    assert {p.host for p in logs.processes} == {None}  # no host invented
    assert sum(logs.stats.parsed.values()) == sum(parse_nccl_logs([log]).stats.parsed.values())


def test_the_h100_paste_reports_its_ib_sharp_nics_and_nvlink(tmp_path: Path) -> None:
    paste = tmp_path / "h100.txt"
    paste.write_text(PASTES["stripped"]((DATA / "h100_ib_sharp_2.23.log").read_text()))
    facts = _facts(paste)
    assert facts["network"] == ["IBext_v8"] and facts["network_types"] == ["ib"]
    assert [n[1] for n in facts["nics"]][:2] == ["ibp156s0", "ibp188s0"] and len(facts["nics"]) == 8
    assert facts["nvls_available"] == ["True"] and facts["intra_host"] == [("nvlink", "nvls")]
    assert facts["inter_host"] == [("ib", "network")]


def test_topology_shows_the_paste_under_an_unknown_host(tmp_path: Path, cli: Callable[..., Result]) -> None:
    paste = tmp_path / "paste.txt"
    paste.write_text(PASTES["indented"]((DATA / "h100_ib_sharp_2.23.log").read_text()))
    result = cli("topology", str(paste), env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    out = " ".join(result.output.split())
    assert "? (pasted: host unknown)" in out and "IBext_v8" in out and "nvlink nvls" in out
    assert "pasted without their host:pid:tid [dev] NCCL INFO prefixes: hosts and ranks unknown" in out


def test_a_paste_without_the_version_line_is_still_found_in_a_folder(tmp_path: Path) -> None:
    lines = [line for line in _strip((DATA / "roce_two_nodes_2.27.log").read_text()) if "NCCL version" not in line]
    (tmp_path / "issue-comment.txt").write_text("\n".join(lines) + "\n")
    run = load_nccl(tmp_path)
    assert [Path(p).name for p in run.logs.stats.pasted_files] == ["issue-comment.txt"]
    assert {n.link_layer for p in run.logs.processes for nics in p.nics.values() for n in nics.values()} == {"RoCE"}


def test_a_prefixed_log_with_bare_version_lines_is_not_a_paste(tmp_path: Path) -> None:
    """NCCL before 2.22 prints its version bare, once per communicator: those lines make no paste."""
    log = tmp_path / "warn_only.log"
    log.write_text("NCCL version 2.19.3+cuda12.3\n" * 5 + "node1:11:12 [0] misc/socket.cc:50 NCCL WARN a failure\n")
    assert parse_nccl_logs([log]).stats.pasted_files == []


def _retag(line: str, how: str) -> str:
    m = re.match(r"^(\S+):(\d+):(\d+) \[(\d+)\] (.*)$", line)
    if m is None:
        return line
    host, pid, tid, dev, rest = m.groups()
    return {
        "vllm": f"(VllmWorker rank={dev} pid={pid}) {line}",
        "vllm_worker": f"(Worker_TP{dev} pid={pid}) {line}",
        "vllm_stripped": f"(VllmWorker rank={dev} pid={pid}) {rest}",
        "arrow": f"2025-11-04 09:12:55 {host} >> :{pid}:{tid} [{dev}] {rest}",
    }[how]


@pytest.mark.parametrize("how", ["vllm", "vllm_worker", "arrow"])
def test_recent_prefixes_give_host_and_pid(how: str, tmp_path: Path) -> None:
    log = DATA / "roce_two_nodes_2.27.log"
    tagged = tmp_path / "job.log"
    tagged.write_text("\n".join(_retag(line, how) for line in log.read_text().splitlines()) + "\n")
    plain, got = parse_nccl_logs([log]), parse_nccl_logs([tagged])
    assert sorted((p.host, p.pid) for p in got.processes) == sorted((p.host, p.pid) for p in plain.processes)
    assert _facts(tagged) == _facts(log)


def test_vllm_tag_without_nccls_prefix_keeps_the_processes_apart(tmp_path: Path) -> None:
    log = DATA / "roce_two_nodes_2.27.log"
    tagged = tmp_path / "job.log"
    tagged.write_text("\n".join(_retag(line, "vllm_stripped") for line in log.read_text().splitlines()) + "\n")
    got = parse_nccl_logs([tagged])
    assert sorted(p.pid for p in got.processes) == [6180, 6181, 7721, 7722]
    assert len(got.comms) == 4 and {c.comm_id for c in got.comms} == {"0x81aa7c2e90d3f115"}


def test_warn_lines_with_nccls_timestamps_keep_their_host() -> None:
    logs = parse_nccl_logs([DATA / "socket_warn_2.30.log"])
    assert [(w.host, w.pid) for w in logs.warns] == [("cpu-box2", 4410)]
    assert logs.warns[0].message.startswith("socketProgress: Connection closed")
