"""Inferred communicators: connection lines that no ``Init``/``commId`` line placed.

Real logs are often partial — an excerpt pasted into an issue, ``NCCL_DEBUG_SUBSYS`` without INIT,
a rotated file, prefixes stripped — yet a line like ``Channel 00/0 : 0[0] -> 1[1] via P2P/IPC``
still says which transport joins two ranks. Such lines are grouped into communicator ranks by who
printed them — (process, cudaDev of the prefix, the rank printing, the ``comm %p`` pointer when the
line carries one) — and those ranks into communicators across processes:

- ranks that carry the same known size (``nRanks`` on the line) join one communicator until a rank
  number repeats (a second run, or a second communicator of that size, interleaved in the input);
- ranks of unknown size join the first communicator whose rank is still free, in order of first
  appearance; the size is then a lower bound: the highest rank any of its lines, ring orders or
  init timings named, plus one.

Each inferred record is marked ``inferred`` (comm_id ``inferred-<n>``, comm_id_source
``inferred``), so the tables, the JSON and the text say that no log line named the communicator.
Lines of several communicators of one rank that share a key land in one record; their tier is
still the slowest link that rank's lines show.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from commprof.ingest.nccl_logs.records import CommRank, Link, Process
from commprof.ingest.nccl_logs.state import State


@dataclass
class _Rank:
    process: Process
    dev: int
    rank: int
    ptr: str | None
    nranks: int | None  # as the lines said
    bound: int  # highest rank named + 1
    links: list[Link] = field(default_factory=list)


def _me(link: Link) -> int:
    return link.to_rank if link.direction == "receive" and link.to_rank is not None else link.from_rank


def _nvml(link: Link) -> int | None:
    dev = link.to_dev if link.direction == "receive" else link.from_dev
    return int(dev) if dev is not None and dev.isdigit() and len(dev) <= 3 else None


def infer_comms(st: State) -> None:
    ranks: dict[tuple[int, int, int, str | None], _Rank] = {}
    for link in st.links:
        if link.comm is not None:
            continue
        me = _me(link)
        key = (link.process.index, link.dev, me, link.ptr_hint)
        r = ranks.get(key)
        if r is None:
            r = ranks[key] = _Rank(link.process, link.dev, me, link.ptr_hint, link.nranks_hint, 0)
        r.bound = max(r.bound, link.from_rank + 1, (link.to_rank or 0) + 1, (link.proxy_rank or 0) + 1)
        if link.nranks_hint is not None:
            r.nranks = link.nranks_hint
        r.links.append(link)
    if not ranks:
        return
    groups: list[tuple[int | None, list[_Rank]]] = []
    for r in ranks.values():  # dicts keep insertion order: first appearance
        home = next((g for g in groups if g[0] == r.nranks and all(o.rank != r.rank for o in g[1])), None)
        if home is None:
            home = (r.nranks, [])
            groups.append(home)
        home[1].append(r)
    for n, (known, members) in enumerate(groups, start=1):
        bound = max(max(r.bound, r.process.rank_bound if known is None else 0) for r in members)
        nranks = known if known is not None else bound
        comm_id = f"inferred-{n}"
        for r in members:
            first = r.links[0]
            rec = CommRank(
                index=len(st.comms),
                process=r.process,
                ptr=r.ptr or "(unknown)",
                rank=r.rank,
                nranks=nranks,
                file=first.file,
                line_no=first.line_no,
                cuda_dev=r.dev if r.dev >= 0 else None,
                nvml_dev=_nvml(first),
                comm_id=comm_id,
                comm_id_source="inferred",
                init_complete=False,
                inferred=True,
            )
            rec.nvls = any(link.transport == "nvls" for link in r.links)
            st.comms.append(rec)
            r.process.comms.append(rec)
            for link in r.links:
                link.comm = rec
            st.stats.inferred_links += len(r.links)
    st.stats.inferred_comms += len(groups)
