"""One process group per communicator in a run that mixes sources (Kineto traces for some ranks, nsys exports
for others): each source names a group its own way (Kineto by the process group's name, with all its ranks;
nsys by NCCL's communicator hash, each export knowing only its own rank and the group's size), so the same
group would be two groups and its calls never matched across the two halves.

A group only the non-Kineto ranks name is the Kineto group that holds every rank naming it and has its size.
Where several Kineto groups fit (Megatron makes groups of equal ranks: dp and dp-cp with cp = 1), the one whose
calls on a Kineto member are the same ops and sizes, in the same order, as on a rank naming the other is taken;
a group matched to nothing, or to more than one, keeps its own name and a warning says its calls are not
matched with the Kineto ranks'. The seq numbers of the two sources count differently (torch's per process
group, NCCL's per communicator), so a united group's calls are matched by order (``seq`` cleared in it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

KINETO = "kineto"


@dataclass(frozen=True)
class GroupUnion:
    alias: dict[str, str] = field(default_factory=dict)  # a non-Kineto group's name -> the Kineto group's
    united: frozenset[str] = frozenset()  # the Kineto names of the groups now spanning both sources
    warnings: tuple[str, ...] = ()


Calls = list[tuple[str | None, int | None]]


def unite(listed: pl.DataFrame, calls: pl.DataFrame) -> GroupUnion:
    """``listed``: pg, ranks, size, lister (the rank whose file lists the group), source (that file's);
    ``calls``: rank, pg, op, bytes, start_ns."""
    kineto_names = set(listed.filter(pl.col("source") == KINETO)["pg"].to_list())
    others = listed.filter(~pl.col("pg").is_in(list(kineto_names)))
    if not kineto_names or others.height == 0:
        return GroupUnion()
    full = {pg: set(ranks) for pg, ranks in listed.filter(pl.col("source") == KINETO)
            .group_by("pg").agg(pl.col("ranks").explode().unique()).iter_rows()}
    kineto_ranks = set(listed.filter(pl.col("source") == KINETO)["lister"].to_list())
    wanted = others.group_by("pg", maintain_order=True).agg(pl.col("lister").unique().sort(), pl.col("size").max())
    candidates: dict[str, list[str]] = {}
    for pg, listers, size in wanted.iter_rows():
        fits = [k for k, members in full.items() if set(listers) <= members and (size is None or len(members) == size)]
        if len(fits) > 1:
            mine = _calls(calls, listers[0], pg)
            fits = [k for k in fits if _same(mine, _calls(calls, _member(full[k], kineto_ranks), k))]
        candidates[pg] = fits
    alias = _one_to_one(candidates)
    # left alone, a group is whole when its own ranks are all it has (nsys ranks only, no Kineto trace lists it)
    warnings = [f"process group {pg} (named by rank(s) {', '.join(map(str, listers))}, not in a Kineto trace) "
                f"{'fits several' if candidates[pg] else 'fits none'} of the Kineto traces' groups: its calls are "
                "not matched with the Kineto ranks'" for pg, listers, size in wanted.iter_rows()
                if pg not in alias and (candidates[pg] or (size is not None and len(listers) < size))]
    return GroupUnion(alias, frozenset(alias.values()), tuple(warnings))


def _one_to_one(candidates: dict[str, list[str]]) -> dict[str, str]:
    """Each group to its one candidate; a candidate taken is no longer one for the others (repeat until
    nothing changes)."""
    alias: dict[str, str] = {}
    changed = True
    while changed:
        changed = False
        for pg, fits in candidates.items():
            left = [k for k in fits if k not in alias.values()]
            if pg not in alias and len(left) == 1:
                alias[pg] = left[0]
                changed = True
    return alias


def _member(members: set[int], kineto_ranks: set[int]) -> int | None:
    inside = sorted(members & kineto_ranks)
    return inside[0] if inside else None


def _calls(calls: pl.DataFrame, rank: int | None, pg: str) -> Calls | None:
    if rank is None:
        return None
    mine = calls.filter((pl.col("rank") == rank) & (pl.col("pg") == pg)).sort("start_ns")
    return list(mine.select("op", "bytes").iter_rows())


def _same(a: Calls | None, b: Calls | None) -> bool:
    """The same calls: ops equal, sizes equal where both sources know them. Unknown calls (a group without a
    Kineto member with calls) stay possible."""
    if a is None or b is None:
        return True
    return len(a) == len(b) and all(x[0] == y[0] and (x[1] is None or y[1] is None or x[1] == y[1])
                                    for x, y in zip(a, b, strict=True))
