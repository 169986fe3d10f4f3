"""The table cache when the machine misbehaves (issue 22): edits that keep size and mtime, runs copied
with their tables/, read-only places, full disks, folders that are links."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from machine_faults import fill, fsize_limit_preexec, full_disk, read_only, temporaries

import commprof
from commprof.errors import CommprofError

REPO = Path(__file__).resolve().parents[1]


def plain_json_run(sample_run: Path) -> Path:
    """The sample run with uncompressed traces, so that a byte can be edited in place."""
    for gz in sorted(sample_run.glob("rank-*.json.gz")):
        gz.with_suffix("").write_bytes(gzip.decompress(gz.read_bytes()))
        gz.unlink()
    return sample_run


def same_size_edit(path: Path) -> None:
    """Make every all_reduce of the trace longer by changing the first digit of its duration (same byte
    count), in place (same inode), then restore the mtime (``touch -r``, an editor that keeps times)."""
    st = path.stat()
    text = path.read_text()
    parts = text.split('"name": "gloo:all_reduce"')
    assert len(parts) > 1
    for i in range(1, len(parts)):
        head, sep, rest = parts[i].partition('"dur": ')
        first = rest[0]
        parts[i] = head + sep + str(int(first) + 1 if first != "9" else 8) + rest[1:]
    edited = '"name": "gloo:all_reduce"'.join(parts)
    assert edited != text and len(edited) == len(text)
    with path.open("r+") as fh:
        fh.write(edited)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size and path.stat().st_mtime_ns == st.st_mtime_ns


def test_same_size_edit_with_mtime_restored_is_reparsed(sample_run: Path) -> None:
    run_dir = plain_json_run(sample_run)
    first = commprof.open_run(run_dir, jobs=1)
    before = first.collectives.filter(first.collectives["rank"] == 2)["end_ns"].to_list()
    same_size_edit(run_dir / "rank-2.json")
    second = commprof.open_run(run_dir, jobs=1)
    assert second.ingested.parsed == 1  # the old key (size, mtime) served the stale tables: 0
    after = second.collectives.filter(second.collectives["rank"] == 2)["end_ns"].to_list()
    assert after != before
    assert commprof.open_run(run_dir, jobs=1).ingested.parsed == 0


def test_a_copied_run_reuses_its_tables_by_content(sample_run: Path, tmp_path: Path) -> None:
    commprof.open_run(sample_run, jobs=1)
    copy = tmp_path / "copied"
    shutil.copytree(sample_run, copy)  # new inodes and ctimes, same bytes (copytree keeps mtimes)
    again = commprof.open_run(copy, jobs=1)
    assert again.ingested.parsed == 0 and again.ingested.cache == copy / "tables"
    index = json.loads((copy / "tables" / "_index.json").read_text())
    ino = {rel: rec["ino"] for rel, rec in index["files"].items()}
    assert ino == {p.name: p.stat().st_ino for p in copy.glob("rank-*.json.gz")}  # the index follows the copy


def test_a_copied_then_edited_trace_is_reparsed(sample_run: Path, tmp_path: Path) -> None:
    run_dir = plain_json_run(sample_run)
    commprof.open_run(run_dir, jobs=1)
    copy = tmp_path / "copied"
    shutil.copytree(run_dir, copy)
    same_size_edit(copy / "rank-1.json")
    assert commprof.open_run(copy, jobs=1).ingested.parsed == 1


def test_read_only_run_with_shipped_tables_and_read_only_home_uses_them(sample_run: Path,
                                                                          tmp_path: Path) -> None:
    commprof.open_run(sample_run, jobs=1)
    shipped = tmp_path / "shipped"
    shutil.copytree(sample_run, shipped)
    home = Path(os.environ["HOME"])
    home.mkdir(parents=True, exist_ok=True)
    with read_only(shipped), read_only(home):
        result = subprocess.run([sys.executable, "-m", "commprof", "ingest", str(shipped)], capture_output=True,
                                text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert result.returncode == 0, result.stderr
    assert "4 from cache" in result.stdout and f"tables in {shipped / 'tables'}" in result.stdout


def test_nowhere_writable_analyzes_in_a_temporary_folder_and_says_so(sample_run: Path) -> None:
    home = Path(os.environ["HOME"])
    home.mkdir(parents=True, exist_ok=True)
    with read_only(sample_run), read_only(home):
        result = subprocess.run([sys.executable, "-m", "commprof", "analyze", str(sample_run), "--format", "json"],
                                capture_output=True, text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert result.returncode == 0, result.stderr
    warnings = json.loads(result.stdout)["warnings"]
    said = [w for w in warnings if "no table cache can be written" in w]
    assert said and "read-only file system" in said[0] or "permission denied" in said[0]
    folder = said[0].split("temporary folder (", 1)[1].split(")", 1)[0]
    assert not Path(folder).exists()  # removed when the command ended


def test_full_disk_under_the_run_is_one_line_and_leaves_no_temporary(sample_run: Path, tmp_path: Path) -> None:
    with full_disk(tmp_path / "disk", size_kib=1024) as disk:
        run_dir = disk / "run"
        shutil.copytree(sample_run, run_dir)
        fill(disk, free_bytes=8 << 10)
        for command in ("ingest", "analyze"):
            result = subprocess.run([sys.executable, "-m", "commprof", command, str(run_dir)], capture_output=True,
                                    text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
            assert result.returncode == 2, result.stderr
            lines = result.stderr.strip().splitlines()
            assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
            assert lines[0].startswith(f"commprof: error: {run_dir / 'tables'}: cannot write the table cache: "
                                       "no space left on device; set COMMPROF_CACHE_DIR"), lines[0]
            assert temporaries(disk) == []
        (disk / "filler").unlink()  # space again: a clean re-run gives the answer of a fresh cache
        healed = commprof.open_run(run_dir, jobs=1)
        fresh = commprof.open_run(sample_run, jobs=1)
        assert healed.ingested.parsed == 4
        assert healed.collectives.equals(fresh.collectives)


def test_full_cache_dir_from_a_worker_pool_is_one_line(sample_run: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    with full_disk(tmp_path / "disk", size_kib=256) as disk:
        fill(disk, free_bytes=4 << 10)
        monkeypatch.setenv("COMMPROF_CACHE_DIR", str(disk))
        with pytest.raises(CommprofError, match="cannot write the table cache: no space left on device"):
            commprof.open_run(sample_run, jobs=2)
        assert temporaries(disk) == []


def test_a_folder_that_is_a_link_is_followed_and_a_loop_read_once(sample_run: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "linked"
    (run_dir / "raw").mkdir(parents=True)
    (run_dir / "manifest.json").write_text(json.dumps({"schema_version": 1, "ranks": [], "notes": []}))
    elsewhere = tmp_path / "other-disk" / "traces"
    shutil.copytree(sample_run, elsewhere)
    (run_dir / "raw" / "traces").symlink_to(elsewhere, target_is_directory=True)
    (elsewhere / "up").symlink_to(tmp_path, target_is_directory=True)  # a loop through an ancestor
    (elsewhere / "again").symlink_to(elsewhere, target_is_directory=True)
    run = commprof.open_run(run_dir, jobs=1)
    assert [rf.rank for rf in run.rank_files] == [0, 1, 2, 3]
    assert sum("a loop" in w for w in run.warnings) == 2


def test_a_file_name_with_a_newline_gives_a_one_line_error(tmp_path: Path) -> None:
    bad = tmp_path / "x\ncommprof: error: all good.json"
    bad.write_text("not json")
    result = subprocess.run([sys.executable, "-m", "commprof", "analyze", str(bad)], capture_output=True, text=True,
                            cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "x\\ncommprof: error: all good.json" in result.stderr


def test_a_crafted_file_name_cannot_fake_a_line_in_warnings(sample_run: Path) -> None:
    (sample_run / "zz\ncommprof: error: fake\x1b[2K.json").write_text('{"not": "a trace"}')
    for args in (["ingest"], ["analyze", "--format", "markdown"], ["analyze"]):
        result = subprocess.run([sys.executable, "-m", "commprof", *args, str(sample_run)], capture_output=True,
                                text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "400"})
        assert result.returncode == 0, result.stderr
        lines = (result.stdout + result.stderr).splitlines()
        assert not [line for line in lines if line.startswith("commprof: error: fake")], args
        assert "\x1b[2K" not in result.stdout + result.stderr
        assert [line for line in lines if "zz\\ncommprof: error: fake\\x1b[2K.json" in line], args


@pytest.mark.parametrize("command", ["analyze -o", "topology -o", "export --perfetto", "synth"])
def test_outputs_on_a_full_disk_are_one_line_and_leave_nothing(sample_run: Path, tmp_path: Path,
                                                               command: str) -> None:
    nccl_logs = REPO / "tests" / "fixtures" / "nccl" / "efa_2.22"
    with full_disk(tmp_path / "disk", size_kib=256) as disk:
        fill(disk)
        target = disk / "out"
        args = {"analyze -o": ["analyze", str(sample_run), "--format", "json", "-o", str(target)],
                "topology -o": ["topology", str(nccl_logs), "--format", "json", "-o", str(target)],
                "export --perfetto": ["export", str(sample_run), "--perfetto", str(target)],
                "synth": ["synth", str(target), "--nodes", "1", "--gpus-per-node", "8", "--layout", "tp=8"]}[command]
        result = subprocess.run([sys.executable, "-m", "commprof", *args], capture_output=True, text=True, cwd=REPO,
                                env={**os.environ, "PYTHONPATH": str(REPO)})
        assert result.returncode == 2, result.stderr[-2000:]
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and str(target) in lines[0] and "no space left on device" in lines[0], result.stderr
        assert sorted(p.name for p in disk.iterdir()) == ["filler"]  # no half file, no temporary


def test_a_file_size_limit_is_one_line_too_for_any_user(sample_run: Path) -> None:
    """Without root (no tmpfs): RLIMIT_FSIZE makes the cache's writes fail (EFBIG) the way a full disk does."""
    result = subprocess.run([sys.executable, "-m", "commprof", "analyze", str(sample_run)], capture_output=True,
                            text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                            preexec_fn=fsize_limit_preexec(4 << 10))
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"commprof: error: {sample_run / 'tables'}: cannot write the "
                                                   "table cache: file too large"), result.stderr
    assert temporaries(sample_run) == []
