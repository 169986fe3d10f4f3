"""What the Kineto pass keeps of the communication calls, and what building the tables lets go of (issue 39: a
kernel-heavy trace's ingest held ~700 bytes a call as Args structs; kineto/kept.py holds a few bytes a call).
Each test pins a mechanism, never a memory figure: `make bench-kineto` measures the peak."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from commprof.ingest.kineto import reader
from commprof.ingest.kineto.comm import bounded_int, comm_fields, process_groups
from commprof.ingest.kineto.decode import Args
from commprof.ingest.kineto.kept import BAD_SEQ, NO_SEQ, KeptArgs
from commprof.ingest.kineto.numbers import INT64_LIMIT, as_int
from commprof.ingest.kineto.prefetch import scan_trace

SAMPLE = Path(__file__).resolve().parents[1] / "sample_traces" / "synth_2x8_tp8_dp2" / "raw" / "traces"

# values of every type a writer has put in these fields: 1, 1.0, True and "1" must stay apart (they read differently)
ODD = st.sampled_from([None, True, False, 0, 1, 1.0, "1", -1, 7, 2**64, 1.5, "", "x", "[0, 1]", [0, 1], [0, 1.0]])
ARG_KEYS = ["External id", "Seq", "Collective name", "In msg nelems", "Out msg nelems", "Group size", "dtype",
            "Process Group Name", "Process Group Description", "Process Group Ranks", "Src Rank", "Dst Rank",
            "Is asynchronized op"]
TEXT_ONLY = {"Collective name", "dtype", "Process Group Description"}  # typed str | None in Args


def _args(values: dict[str, Any]) -> Args | None:
    try:
        return msgspec.json.decode(msgspec.json.encode(values), type=Args)
    except msgspec.ValidationError:  # a value Args does not take: the pass never keeps such args
        return None


@settings(max_examples=60, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.dictionaries(st.sampled_from(ARG_KEYS), ODD, max_size=8), min_size=1, max_size=12))
def test_a_call_reads_the_same_from_its_shape(calls: list[dict[str, Any]]) -> None:
    """comm_fields of a kept call's shape (with its own seq and External id from the columns) is comm_fields of
    the call's Args; process_groups of the distinct shapes is that of every call."""
    decoded = [a for a in (_args({k: v for k, v in c.items() if k not in TEXT_ONLY or isinstance(v, str | None)})
                           for c in calls) if a is not None]
    if not decoded:
        return
    kept = KeptArgs()
    kept.pending.extend(enumerate(decoded))
    kept.flush(offset=10)
    key, shape, ext, ext_ok, seq = kept.columns()
    assert key.tolist() == list(range(10, 10 + len(decoded))) and not kept.pending
    assert (key.dtype, shape.dtype, ext.dtype, ext_ok.dtype, seq.dtype) == (np.int64, np.int32, np.int64, np.bool_,
                                                                            np.int64)
    for i, args in enumerate(decoded):
        whole = comm_fields(args, None)
        from_shape = comm_fields(kept.args(int(shape[i])), None)
        assert {k: v for k, v in whole.items() if k != "seq"} == {k: v for k, v in from_shape.items() if k != "seq"}
        read = bounded_int(args.seq, 0, INT64_LIMIT)
        assert seq[i] == (NO_SEQ if args.seq is None else BAD_SEQ if read is None else read)
        ext_id = as_int(args.external_id)
        assert bool(ext_ok[i]) == (ext_id is not None) and (ext_id is None or ext[i] == ext_id)
    assert process_groups(None, kept.shapes_in_order(by_key=False)).equals(process_groups(None, decoded))


def test_the_pass_keeps_columns_not_structs() -> None:
    """A GPU trace's communication calls: one row each in int64/int32 columns and their shapes once, no Args per
    call (the 2x8 sample's rank 0: 204 NCCL kernels and their 204 record_param_comms, 2 distinct shapes each)."""
    _, scan = scan_trace(SAMPLE / "rank-0.json.gz", "rank-0")
    for kept in (scan.dev_comm_args, scan.comm_args_by_external_id):
        assert len(kept) == 204 and not kept.pending
        assert len(kept.codes) <= 4  # distinct calls, not calls
        assert not kept._args  # no Args made until the tables read a shape
        assert all(c.dtype.kind in "ib" and c.size == 204 for c in kept.columns())
    assert not scan.cpu_comm_args  # a GPU trace's CPU comm ops make no table


def test_building_the_tables_lets_go_of_the_pass() -> None:
    """The device rows' times become the intervals' columns (handed over, not copied), and what only the
    collectives read (kept args, CPU and runtime rows) and the device rows' codes are let go of once read."""
    _, scan = scan_trace(SAMPLE / "rank-0.json.gz", "rank-0")
    ts = scan.dev.col("ts")
    rows = len(scan.dev)
    intervals, collectives = reader._gpu_tables(scan, 0, 0, "rank-0", [])
    assert intervals.height == rows and collectives.height == 204
    assert np.shares_memory(intervals["start_ns"].to_numpy(), ts)  # the pass's own column, now the table's
    for name in ("dev", "cpu", "launch"):
        assert len(getattr(scan, name)) == 0, name
    assert len(scan.dev_comm_args) == 0 and len(scan.comm_args_by_external_id) == 0
    assert intervals["rank"].to_list() == [0] * rows  # one literal, read as a column
