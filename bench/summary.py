"""One table of every bench row: ``python bench/summary.py [FOLDER]`` (default .bench/).

Each bench script writes ``.bench/<name>.json`` with a top-level ``"rows"`` list, each row
``{"work", "now", "unit", "floor", "floor_what", "hta", "target", "passed"}`` (``now``, ``floor`` and
``hta`` in ``unit``). Files without ``"rows"`` (older reports) are skipped; a row missing keys prints
what it has. The ratio column is now / floor (how far from the floor), and HTA / now where HTA ran.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
COLUMNS = ("work", "now", "floor (what)", "HTA", "ratio", "target", "pass", "from")


def _num(value: Any, unit: str = "") -> str:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return "—"
    text = f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    return f"{text} {unit}".strip()


def _ratio(row: dict[str, Any]) -> str:
    now, floor, hta = row.get("now"), row.get("floor"), row.get("hta")
    parts = []
    if isinstance(now, int | float) and isinstance(floor, int | float) and floor:
        parts.append(f"{now / floor:.2f}x floor")
    if isinstance(now, int | float) and isinstance(hta, int | float) and now:
        parts.append(f"HTA/now {hta / now:.1f}x")
    return ", ".join(parts) or "—"


def cells(row: dict[str, Any], source: str) -> list[str]:
    unit = str(row.get("unit") or "")
    floor = _num(row.get("floor"), unit)
    if row.get("floor_what"):
        floor = f"{floor} ({row['floor_what']})"
    passed = row.get("passed")
    return [str(row.get("work", "?")), _num(row.get("now"), unit), floor, _num(row.get("hta"), unit), _ratio(row),
            str(row.get("target") or "—"), {True: "yes", False: "NO"}.get(passed, "—"), source]


def load(folder: Path) -> list[tuple[str, dict[str, Any]]]:
    rows = []
    for path in sorted(folder.glob("*.json")):
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError) as err:
            print(f"skipped {path.name}: {err}", file=sys.stderr)
            continue
        if isinstance(doc, dict) and isinstance(doc.get("rows"), list):
            rows += [(path.name, r) for r in doc["rows"] if isinstance(r, dict)]
    return rows


def table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [list(COLUMNS), *rows]) for i in range(len(COLUMNS))]
    line = "| " + " | ".join(c.ljust(w) for c, w in zip(COLUMNS, widths, strict=True)) + " |"
    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    body = ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |" for r in rows]
    return "\n".join([line, rule, *body])


def main(argv: list[str]) -> int:
    folder = Path(argv[0]) if argv else REPO / ".bench"
    rows = load(folder)
    if not rows:
        print(f"no bench rows under {folder} (run `make bench` first)")
        return 0
    print(table([cells(r, source) for source, r in rows]))
    failed = sum(r.get("passed") is False for _, r in rows)
    print(f"\n{len(rows)} rows, {failed} below target. Timings on a shared machine are noisy: read the ratios.")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
