"""Which switch each host hangs on, from SLURM's ``topology.conf`` (the tree plugin's form), so that a group whose
hosts sit under different leaf switches (racks) is known to cross the spine: the slower tier.

    SwitchName=leaf0 Nodes=gpu[001-016]
    SwitchName=leaf1 Nodes=gpu[017-032],spare1
    SwitchName=spine Switches=leaf[0-1]

A host's rack is its leaf switch: the switch whose ``Nodes=`` names it. Lines are ``Key=Value`` pairs separated by
blanks; ``#`` starts a comment; keys are case-insensitive, as slurmctld reads them. Host lists use SLURM's
bracket ranges (``n[1-3,7]``, zero-padded ``gpu[001-016]``, several brackets ``r[1-2]n[1-4]``). Host names are
compared short (``gpu001.cluster`` is ``gpu001``), as the other topology sources are.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

from commprof.errors import InputError
from commprof.ingest.topology import short_host

MAX_HOSTS = 1 << 20  # a range that expands past this is a typo, not a cluster
_BRACKET = re.compile(r"\[([^\]]*)\]")


def expand_hostlist(text: str) -> list[str]:
    """``gpu[001-003],x`` -> gpu001, gpu002, gpu003, x. ValueError on a malformed list."""
    out: list[str] = []
    for item in _split_top(text):
        if not item:
            continue
        pieces = _BRACKET.split(item)  # literal, range, literal, range, ...
        if "[" in "".join(pieces[::2]) or "]" in "".join(pieces[::2]):
            raise ValueError(f"unbalanced brackets in {item!r}")
        choices = [[p] if i % 2 == 0 else _range(p) for i, p in enumerate(pieces)]
        for combo in itertools.product(*choices):
            out.append("".join(combo))
            if len(out) > MAX_HOSTS:
                raise ValueError(f"{text[:60]!r} names more than {MAX_HOSTS} hosts")
    return out


def _split_top(text: str) -> list[str]:
    """Split on commas outside brackets."""
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        depth += (ch == "[") - (ch == "]")
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts]


def _range(spec: str) -> list[str]:
    out: list[str] = []
    for part in spec.split(","):
        lo, sep, hi = part.strip().partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise ValueError(f"[{spec}] is not a list of numbers and ranges")
        if not sep:
            out.append(lo)
            continue
        width = len(lo) if lo.startswith("0") else 0
        if int(hi) < int(lo) or int(hi) - int(lo) > MAX_HOSTS:
            raise ValueError(f"[{spec}]: {part.strip()} is not a range")
        out.extend(str(n).zfill(width) for n in range(int(lo), int(hi) + 1))
    return out


def parse_topology_conf(text: str, where: str = "topology.conf") -> dict[str, str]:
    """host -> its leaf switch. InputError naming the file and line for a line that is not ``Key=Value``
    pairs or a host list that does not expand."""
    leaf: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        pairs = {}
        for token in line.split():
            key, sep, value = token.partition("=")
            if not sep or not key:
                raise InputError(f"line {number}: {token!r} is not Key=Value (SLURM's topology.conf: "
                                 "SwitchName=NAME Nodes=HOSTLIST)", where)
            pairs[key.lower()] = value
        name = pairs.get("switchname")
        if not name:
            continue  # other keys (LinkSpeed alone, BlockName of the block plugin) name no leaf
        try:
            hosts = expand_hostlist(pairs.get("nodes", ""))
        except ValueError as err:
            raise InputError(f"line {number}: Nodes={pairs.get('nodes')}: {err}", where) from None
        for host in hosts:
            leaf.setdefault(short_host(host) or host, name)
    return leaf


def read_topology_conf(path: Path) -> dict[str, str]:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as err:
        raise InputError(f"cannot read the switch topology: {(err.strerror or str(err)).lower()}", path) from None
    leaf = parse_topology_conf(text, str(path))
    if not leaf:
        raise InputError("no SwitchName=... Nodes=... line: no host is placed on a switch (SLURM's topology.conf "
                         "form)", path)
    return leaf
