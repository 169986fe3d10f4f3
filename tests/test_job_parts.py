"""A job across nodes as one run, piece by piece (no namespaces needed; tests/test_multinode.py records the real
thing): which job a launcher belongs to, which rank a process launched by srun or mpirun is, how launchers claim
or join a folder, how their parts make one manifest, how node folders are found and joined, and how a rank that
died with its node is kept out of blame."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from commprof.errors import InputError, UsageError
from commprof.ingest import job_parts
from commprof.ingest.discover import discover_paths
from commprof.record import rundir
from commprof.record.job import JOIN_WINDOW_S, job_identity, torchrun_options
from commprof.record.rank.identity import detect_identity

# --- which job ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("command", "environ", "key"), [
    (["torchrun", "--nnodes", "2", "--nproc-per-node", "8", "--rdzv-backend", "c10d", "--rdzv-endpoint",
      "node0:29500", "--rdzv-id", "exp1", "train.py", "--rdzv-id", "not-torchrun's"], {}, "rdzv:node0:29500/exp1"),
    (["/venv/bin/torchrun", "--nnodes=2", "--rdzv_endpoint=n0:1", "--standalone", "t.py"], {}, "rdzv:n0:1/none"),
    (["python3", "-m", "torch.distributed.run", "--nnodes", "2", "--master-addr", "h", "--master-port", "7",
      "t.py"], {}, "master:h:7"),
    (["torchrun", "--nnodes", "2", "t.py"], {"PET_RDZV_ENDPOINT": "n0:5", "PET_RDZV_ID": "k"}, "rdzv:n0:5/k"),
    (["python", "train.py"], {"SLURM_JOB_ID": "812", "SLURM_STEP_ID": "3"}, "slurm:812.3"),
    (["python", "train.py"], {"PMIX_NAMESPACE": "prterun-x-1@1"}, "mpi:prterun-x-1@1"),
    (["python", "train.py"], {"MASTER_ADDR": "n0", "MASTER_PORT": "29500"}, "master:n0:29500"),
    (["torchrun", "--nproc-per-node", "8", "train.py"], {}, None),  # one node: its folder is its own
    (["torchrun", "--nnodes", "1", "--master-port", "1", "train.py"], {"MASTER_ADDR": "localhost"}, None),
    (["python", "train.py"], {}, None),
])
def test_the_job_a_launcher_belongs_to(command: list[str], environ: dict[str, str], key: str | None) -> None:
    found = job_identity(command, environ)
    assert (found.key if found else None) == key


def test_an_explicit_job_id_wins() -> None:
    found = job_identity(["torchrun", "--rdzv-endpoint", "x:1", "t.py"], {"SLURM_JOB_ID": "3"}, "mine")
    assert found is not None and (found.key, found.source) == ("user:mine", "--job-id mine")


def test_torchrun_options_stop_at_the_script() -> None:
    assert torchrun_options(["torchrun", "--nnodes", "2", "-m", "pkg.train", "--master-port", "9"]) == {"nnodes": "2"}
    assert torchrun_options(["deepspeed", "--master_port", "9"]) == {}


# --- which rank -----------------------------------------------------------------------------------------------

SRUN_TASK = {"COMMPROF_RUN_DIR": "x", "SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1",
             "SLURM_NTASKS_PER_NODE": "4", "SLURM_NODEID": "1", "SLURM_STEP_ID": "0"}


def test_a_rank_started_by_srun_or_mpirun() -> None:
    srun = detect_identity(SRUN_TASK, argv=["python", "t.py"], pid=10)
    assert srun is not None and (srun.rank, srun.world_size, srun.local_rank, srun.local_world_size,
                                 srun.node_rank, srun.source) == (5, 8, 1, 4, 1, "SLURM_PROCID")
    mpi = detect_identity({"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4",
                           "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"},
                          argv=["python", "t.py"], pid=10)
    assert mpi is not None and (mpi.rank, mpi.world_size, mpi.local_world_size) == (3, 4, 2)
    torchrun = detect_identity({**SRUN_TASK, "RANK": "2", "WORLD_SIZE": "4"}, argv=["python", "t.py"], pid=10)
    assert torchrun is not None and (torchrun.rank, torchrun.source) == (2, "RANK")  # torchrun inside srun


def test_an_sbatch_script_is_not_a_task() -> None:
    assert detect_identity({**SRUN_TASK, "SLURM_STEP_ID": "batch"}, argv=["python", "t.py"], pid=10) is None
    assert detect_identity({"SLURM_PROCID": "9", "SLURM_NTASKS": "4", "SLURM_STEP_ID": "0"}, argv=["p"], pid=1) is None


# --- claiming and joining a folder ------------------------------------------------------------------------------


def _doc(key: str | None, host: str = "node0", pid: int = 100, start: str | None = None) -> dict[str, Any]:
    job = {"key": key, "source": f"job {key}"} if key else None
    return {"schema_version": 1, "tool": "commprof record", "job": job,
            "launcher": {"host": host, "pid": pid, "id": f"{host}-{pid}"},
            "start": start or time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime()), "status": "running",
            "ranks": [], "notes": [], "versions": {}, "env": {}}


def _job(key: str) -> Any:
    from commprof.record.job import JobIdentity

    return JobIdentity(key, f"job {key}")


def test_launchers_of_one_job_join_and_another_job_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "run"
    first = rundir.claim(out, False, _job("a"), _doc("a"))
    assert not first.joined and json.loads((out / "manifest.json").read_text())["job"]["key"] == "a"
    second = rundir.claim(out, False, _job("a"), _doc("a", "node1"))
    assert second.joined and second.note and "joined the recording of job job a" in second.note
    with pytest.raises(UsageError, match="already holds job job a"):
        rundir.claim(out, False, _job("b"), _doc("b"))
    with pytest.raises(UsageError, match="this launcher names no job: pass --job-id to join"):
        rundir.claim(out, False, None, _doc(None))


def test_a_job_still_recording_is_never_cleared(tmp_path: Path) -> None:
    out = tmp_path / "run"
    rundir.claim(out, False, _job("a"), _doc("a"))
    part = out / "raw" / "launchers" / "elsewhere-1.json"
    part.write_text(json.dumps({**_doc("a", "elsewhere", 1), "status": "running"}))
    with pytest.raises(UsageError, match="another job .* is recording into this folder"):
        rundir.claim(out, True, _job("b"), _doc("b"))
    assert part.exists()


def test_an_earlier_run_of_the_same_job_is_refused_then_cleared_with_force(tmp_path: Path) -> None:
    out = tmp_path / "run"
    old = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(time.time() - JOIN_WINDOW_S - 60))
    rundir.claim(out, False, _job("a"), _doc("a", start=old))
    finished = {**_doc("a", start=old), "status": "finished"}
    (out / "raw" / "launchers" / "node0-100.json").write_text(json.dumps(finished))
    with pytest.raises(UsageError, match="holds an earlier run of this job"):
        rundir.claim(out, False, _job("a"), _doc("a"))
    fresh = rundir.claim(out, True, _job("a"), _doc("a"))
    assert not fresh.joined and not (out / "raw" / "launchers" / "node0-100.json").exists()


def test_launchers_starting_at_once_make_one_run(tmp_path: Path) -> None:
    out = tmp_path / "run"
    results: list[Any] = []
    barrier = threading.Barrier(6)

    def go(i: int) -> None:
        barrier.wait()
        try:
            results.append(rundir.claim(out, False, _job("a"), _doc("a", f"node{i}", i)))
        except Exception as err:  # noqa: BLE001 - the assertion below shows it
            results.append(err)

    threads = [threading.Thread(target=go, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(str(getattr(r, "joined", r)) for r in results) == ["False"] + ["True"] * 5, results
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temporary left


# --- one manifest from the parts ----------------------------------------------------------------------------------


def _part(host: str, ranks: list[int], status: str = "finished", **more: Any) -> dict[str, Any]:
    return {**_doc("a", host, 7), "status": status, "exit_code": 0 if status == "finished" else 1,
            "ranks": [{"rank": r, "host": host, "files": {"trace": f"raw/traces/rank-{r}.json.gz"}} for r in ranks],
            "world_size": 4, "hosts": [host], "notes": [f"note of {host}"], **more}


def test_the_union_of_parts() -> None:
    merged, warnings = job_parts.union([
        _part("node0", [0, 1], versions={"torch": "2.13.0", "python": "3.11.7"},
              env={"NCCL_ALGO": {"value": "Ring"}, "CUDA_VISIBLE_DEVICES": {"value": "0"}}),
        _part("node1", [2, 3], status="failed", versions={"torch": "2.12.1", "python": "3.11.7"},
              env={"CUDA_VISIBLE_DEVICES": {"value": "1"}}),
    ])
    assert [r["rank"] for r in merged["ranks"]] == [0, 1, 2, 3] and merged["hosts"] == ["node0", "node1"]
    assert (merged["status"], merged["exit_code"]) == ("failed", 1)
    assert merged["versions"] == {"python": "3.11.7", "torch": ["2.12.1", "2.13.0"]}
    assert merged["notes"] == ["node0: note of node0", "node1: note of node1"]
    assert [n["ranks"] for n in merged["nodes"]] == [[0, 1], [2, 3]]
    said = " ".join(warnings)
    assert "nodes run different torch versions: 2.12.1 on node1; 2.13.0 on node0" in said
    assert "nodes set NCCL_ALGO differently: 'Ring' on node0; (unset) on node1" in said
    assert "CUDA_VISIBLE_DEVICES" not in said  # each rank its own GPU, by design


def test_a_running_part_keeps_the_job_running() -> None:
    merged, _ = job_parts.union([_part("node0", [0, 1]), _part("node1", [], status="running")])
    assert merged["status"] == "running" and merged["end"] is None


# --- node folders found and joined ---------------------------------------------------------------------------------


def _node_folder(folder: Path, doc: dict[str, Any], ranks: list[int]) -> Path:
    (folder / "raw" / "traces").mkdir(parents=True)
    (folder / "manifest.json").write_text(json.dumps(doc))
    for r in ranks:
        (folder / "raw" / "traces" / f"rank-{r}.json").write_text("{}")
    return folder


def test_a_parent_of_node_folders_is_one_job(tmp_path: Path) -> None:
    now = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())
    _node_folder(tmp_path / "job" / "node0", {**_part("node0", [0, 1]), "start": now}, [0, 1])
    _node_folder(tmp_path / "job" / "node1", {**_part("node1", [2, 3]), "start": now}, [2, 3])
    source = discover_paths([tmp_path / "job"])
    assert source.kind == "job" and len(source.traces) == 4 and len(source.run_dirs) == 2
    assert source.manifest is not None and [r["rank"] for r in source.manifest["ranks"]] == [0, 1, 2, 3]
    apart = discover_paths([tmp_path / "job" / "node1", tmp_path / "job" / "node0"])
    assert apart.kind == "job" and apart.identity != source.identity and len(apart.traces) == 4


def test_folders_of_different_jobs_or_runs_are_refused(tmp_path: Path) -> None:
    _node_folder(tmp_path / "a", _part("node0", [0, 1]), [0, 1])
    _node_folder(tmp_path / "b", {**_part("node1", [2, 3]), "job": {"key": "other", "source": "job other"}}, [2, 3])
    with pytest.raises(InputError, match="different jobs"):
        discover_paths([tmp_path / "a", tmp_path / "b"])
    _node_folder(tmp_path / "c", {**_part("node1", [2, 3]), "start": "2020-01-01T00:00:00.000Z",
                                  "end": "2020-01-01T00:10:00.000Z"}, [2, 3])
    with pytest.raises(InputError, match="different jobs"):  # the same job's identity, a day apart: a rerun
        discover_paths([tmp_path / "a", tmp_path / "c"])
    with pytest.raises(InputError, match="the same trace is given twice"):
        discover_paths([tmp_path / "a", tmp_path / "a" / "raw" / "traces" / "rank-0.json"])


def test_the_runs_a_dashboard_or_diff_gets(tmp_path: Path) -> None:
    from commprof.cli.opening import group_by_job

    now = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())
    a = _node_folder(tmp_path / "n0", {**_part("node0", [0, 1]), "start": now}, [0, 1])
    b = _node_folder(tmp_path / "n1", {**_part("node1", [2, 3]), "start": now}, [2, 3])
    c = _node_folder(tmp_path / "other", {**_part("node0", [0]), "job": None}, [0])
    assert group_by_job([str(a), str(c), str(b)]) == [(str(a), str(b)), (str(c),)]
    assert group_by_job([str(a), str(a)]) == [(str(a),), (str(a),)]  # one run given twice: two runs


def test_a_missing_node_is_said_by_node() -> None:
    text = job_parts.missing_ranks_text([4, 5, 6, 7], 8, {"ranks": [{"rank": r} for r in range(4)],
                                                         "nodes": [{"host": "n0", "ranks": [0, 1, 2, 3]},
                                                                   {"host": "n1", "ranks": [], "status": "failed",
                                                                    "exit_code": 1}]}, 4)
    assert text.startswith("traces for 4 of 8 ranks; ranks 4-7 (node rank 1 of 2, 4 ranks a node) recorded nothing")
    assert "the launcher on n1 recorded no rank (status failed, exit code 1)" in text


# --- a rank that died with its node ---------------------------------------------------------------------------


def test_a_rank_without_a_last_word_is_not_blamed() -> None:
    from commprof.analyzers.sanity import check_ranks

    marks = pl.DataFrame({"rank": [0, 1, 2, 3], "step": [1] * 4, "start_ns": [0] * 4, "end_ns": [10] * 4})
    clocks = pl.DataFrame(schema={"host": pl.String, "offset_ns": pl.Int64, "fit": pl.String})
    ranks = pl.DataFrame({"rank": [0, 1, 2, 3], "host": ["a", "a", "b", "b"]})
    sanity = check_ranks(marks, clocks, ranks, ((0, "exited"), (1, "signalled"), (2, "died"), (3, "died")))
    assert sorted(sanity.ranks) == [2, 3] and set(sanity.doubtful["check"]) == {"ended"}
    assert "died without a last word" in sanity.warnings[0]
    assert not check_ranks(marks, clocks, ranks, ((0, "died"), (1, "died"))).ranks  # all died: nothing to compare


