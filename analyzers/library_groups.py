"""Groups for communication that runs in no process group (issue 37): the kernels of DeepEP, custom all-reduce,
symmetric memory, userbuffers, ... carry no ``pg`` in a trace. Each library and path the kernel's name states
(comm_kernels.describe) becomes one group, so its calls are keyed like any other group's in every table: the
overlap per group and step, the dimension x tier table, the groups table and the findings.

* **pg** ``<library>: <path>`` (``DeepEP: internode``), or the library alone where the name says no path.
* **ranks** the ranks whose traces hold such calls; **size** unknown (the group's members are not in the trace).
* **dimension** from the library (CommKernel.dimension: all-to-all -> ep; the inference and comm-GEMM-overlap
  all-reduces -> tp), else unknown; source ``kernel name``.
* **tier** from the name: NVLink where it says intranode NVLink (or multicast, MNNVL); where it says internode,
  the run's network tier (its groups across nodes, else ``--network``); else unknown. Source ``kernel name``.
"""

from __future__ import annotations

from collections import Counter

import polars as pl

from commprof.ingest.common.comm_kernels import CommKernel, Declared, describe
from commprof.vocab import UNKNOWN

SOURCE = "kernel name"
DECLARED_SOURCE = "--comm-kernel"  # the user's declaration (flag or [[comm_kernel]] in commprof.toml)
CONFIDENCE = 0.7  # the library's own name: below a layout (1.0) or a group description, above structure alone


def label(kernel: CommKernel) -> str:
    path = kernel.path.split(" (")[0]
    return f"{kernel.library}: {path}" if path else kernel.library


def with_library_groups(collectives: pl.DataFrame, declared: tuple[Declared, ...] = ()) -> pl.DataFrame:
    """``collectives`` with ``pg`` filled for the calls in no process group whose kernel a library's (or of a
    family the user ``declared``)."""
    if collectives.height == 0 or "name" not in collectives.columns:
        return collectives
    loose = collectives.filter(pl.col("pg").is_null())["name"].unique().drop_nulls().to_list()
    groups = {name: label(k) for name in loose if (k := describe(name, declared)) is not None}
    if not groups:
        return collectives
    return collectives.with_columns(pl.col("pg").fill_null(
        pl.col("name").replace_strict(groups, default=None, return_dtype=pl.String)))


def group_rows(collectives: pl.DataFrame, groups: pl.DataFrame, network: str | None,
               declared: tuple[Declared, ...] = ()) -> pl.DataFrame:
    """``groups`` with a row for each library group of ``collectives`` (module doc)."""
    if collectives.height == 0 or "name" not in collectives.columns:
        return groups
    known = set(groups["pg"].to_list())
    calls = collectives.filter(pl.col("pg").is_not_null() & ~pl.col("pg").is_in(list(known)))
    if calls.height == 0:
        return groups
    across = groups.filter((pl.col("nodes_spanned") > 1) & pl.col("tier").is_not_null()
                           & (pl.col("tier") != UNKNOWN)) if "nodes_spanned" in groups.columns else groups.clear()
    common = Counter(across["tier"].to_list()).most_common(1)
    net = common[0][0] if common else network
    rows = []
    for pg, names, ranks in (calls.group_by("pg").agg(pl.col("name").unique(), pl.col("rank").unique().sort())
                             .sort("pg").iter_rows()):
        kernels = [k for n in names if (k := describe(n, declared)) is not None and label(k) == pg]
        if not kernels:
            continue
        kernel = kernels[0]
        tier = (net or UNKNOWN) if kernel.tier == "network" else kernel.tier or UNKNOWN
        said = "declared communication by the user" if kernel.is_declared else "no process group in the trace"
        dimension_source = DECLARED_SOURCE if kernel.declared_dimension else SOURCE
        tier_source = DECLARED_SOURCE if kernel.declared_tier else SOURCE
        rows.append({"pg": pg, "desc": f"{kernel.library} kernels ({said})",
                     "ranks": [int(r) for r in ranks], "size": None, "backend": kernel.library,
                     "dimension": kernel.dimension or UNKNOWN, "dimension_source": dimension_source,
                     "confidence": (1.0 if kernel.declared_dimension else CONFIDENCE) if kernel.dimension else 0.0,
                     "tier": tier, "tier_source": tier_source if tier != UNKNOWN else None, "nodes_spanned": None})
    if not rows:
        return groups
    extra = pl.DataFrame(rows, schema={c: groups.schema[c] for c in rows[0] if c in groups.schema})
    return pl.concat([groups, extra], how="diagonal_relaxed")
