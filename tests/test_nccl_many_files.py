"""NCCL logs of many processes (issue 39: 16,384 per-process logs of a 2,048-node job): each file is looked
for and sniffed once, and the short cuts taken for small files decide exactly as the general paths do."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import polars as pl
import pytest

from commprof.ingest import sidecar_tables
from commprof.ingest.nccl_logs import load as nccl_load
from commprof.ingest.nccl_logs import scan
from commprof.ingest.nccl_ras import find_reports, is_ras_report

HERE = Path(__file__).parent
RAS = HERE / "data" / "nccl_ras"
LOGS = HERE / "fixtures" / "nccl"

PREFIXED = "node01:1234:1240 [0] NCCL INFO Channel 00/02 : 0 1 2 3\n"
BARE = ["Channel 00/02 : 0 1 2 3", "Ring 00 : 3 -> 0 -> 1", "comm 0x55d0 rank 0 nRanks 4 nNodes 1 localRanks 4",
        "Connected all rings", "NET/IB : Using [0]mlx5_0:1/IB ; OOB eth0:10.0.0.1<0>"]


def _texts() -> dict[str, str]:
    bare = "\n".join(BARE)
    return {
        "prefixed": PREFIXED * 20,
        "paste": bare + "\n",
        "paste, no last newline": bare,
        "paste, CRLF": bare.replace("\n", "\r\n") + "\r\n",
        "paste, lone CR": bare.replace("\n", "\r"),
        "paste with a few whole lines": bare + "\n" + PREFIXED * 2,
        "whole lines with a few bare": PREFIXED * 6 + bare + "\n",
        "two bare lines only": "\n".join(BARE[:2]) + "\n",
        "non-ASCII and form feeds": "Fortschritt █▌ 12%\x0c\n" + bare + "\n\u2028" + "Ring 01 : 0 -> 1\n",
        "blank lines": "\n\n" + "\n\n".join(BARE) + "\n\n",
        "empty": "",
        "a long head": "x" * 70 + "\n" + (bare + "\n") * 3000,  # over the 1 MB sniff: the text path
    }


@pytest.mark.parametrize("case", list(_texts()))
def test_is_paste_reads_a_small_file_as_the_line_loop_does(tmp_path: Path, case: str) -> None:
    text = _texts()[case]
    if case == "a long head":
        text = text * 4
    path = tmp_path / "log.txt"
    path.write_bytes(text.encode("utf-8"))
    with scan.open_text(path) as f:
        expected = scan._paste_lines(f)
    assert scan.is_paste(path) is expected
    gz = tmp_path / "log.txt.gz"
    gz.write_bytes(gzip.compress(text.encode("utf-8")))
    assert scan.is_paste(gz) is expected
    if text:  # UTF-16 (PowerShell's ``>``): the text path, the same answer
        wide = tmp_path / "wide.txt"
        wide.write_bytes(text.encode("utf-16"))
        assert scan.is_paste(wide) is expected


def test_the_paste_cases_cover_both_answers(tmp_path: Path) -> None:
    answers = set()
    for case, text in _texts().items():
        path = tmp_path / f"{len(answers)}-{case}.txt"
        path.write_text(text, encoding="utf-8", newline="")
        answers.add(scan.is_paste(path))
    assert answers == {True, False}


def test_text_lines_split_as_a_text_file_does() -> None:
    import io

    for text in ("", "a", "a\n", "a\nb", "\n\n", "x\x0cy\n\u2028z\x85w\n"):
        assert list(scan._text_lines(text)) == list(io.StringIO(text, newline=None))


def test_a_ras_report_is_told_from_the_head_the_log_search_read(tmp_path: Path) -> None:
    files = sorted(RAS.glob("*.txt")) + sorted(RAS.glob("*.json"))
    files += [p for p in sorted(LOGS.rglob("*")) if p.is_file() and p.suffix not in (".py", ".json")][:40]
    assert any(is_ras_report(p) for p in files) and not all(is_ras_report(p) for p in files)
    for path in files:
        head = path.read_bytes()
        assert is_ras_report(path, head) is is_ras_report(path), path
        big = head + b"\n" + b"x" * (1 << 20)  # the log search's head: more than a report shows itself in
        copy = tmp_path / path.name
        copy.write_bytes(big)
        assert is_ras_report(copy, big[: nccl_load.SNIFF_BYTES]) is is_ras_report(copy), path
    # a report whose words sit only past the head is no report, by either path
    late = tmp_path / "late.txt"
    late.write_bytes(b"x\n" * (200 << 10) + (RAS / "collective_2.24.txt").read_bytes())
    assert is_ras_report(late) is False and is_ras_report(late, late.read_bytes()[: nccl_load.SNIFF_BYTES]) is False


def test_a_report_in_a_log_folder_is_found_and_kept_out_of_the_logs(tmp_path: Path) -> None:
    nccl = tmp_path / "raw" / "nccl"
    nccl.mkdir(parents=True)
    shutil.copy(RAS / "stuck_allreduce_2.26.txt", nccl / "status")
    for i in range(3):
        (nccl / f"nccl.node01.{i}").write_text(PREFIXED * 4)
    found = nccl_load.find_nccl_inputs(tmp_path)
    assert [p.name for p in found.logs] == ["nccl.node01.0", "nccl.node01.1", "nccl.node01.2"]
    assert find_reports(tmp_path) == [nccl / "status"]
    assert find_reports(tmp_path, frozenset(found.logs)) == [nccl / "status"]
    # what is known to be something else is not opened again
    assert find_reports(tmp_path, frozenset([*found.logs, nccl / "status"])) == []


def test_a_run_s_nccl_logs_are_looked_for_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sidecar tables found the logs for their cache key and parsed them with a second search (16,384 logs
    walked and sniffed twice); now once, and the tables are what they were."""
    run = tmp_path / "run"
    shutil.copytree(LOGS / "ib_gdr_pxn_2.23", run / "raw" / "nccl")
    calls: list[Path] = []
    real = nccl_load.find_nccl_inputs

    def counting(path: str | Path) -> nccl_load.NcclInputs:
        calls.append(Path(path))
        return real(path)

    monkeypatch.setattr(nccl_load, "find_nccl_inputs", counting)
    ranks = pl.DataFrame(schema={"rank": pl.Int32, "host": pl.String, "pid": pl.Int64, "device": pl.Int32,
                                 "local_rank": pl.Int32})
    tables = sidecar_tables.load_sidecars([run], ranks, None, tmp_path / "cache")
    assert calls == [run]
    assert tables.nccl_setup.height > 0  # the logs were read
    expected = nccl_load.load_nccl(run)
    assert sorted(tables.nccl_setup["host"].to_list()) == sorted({p.host for p in expected.logs.processes if p.host})
