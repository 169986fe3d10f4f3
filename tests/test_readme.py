"""The README's Python API example runs as written (on a sample run instead of runs/exp1), and the
README points at design notes inside the repository."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_python_api_example_runs() -> None:
    section = README[README.index("## Python API"):]
    code = re.search(r"```python\n(.*?)```", section, flags=re.DOTALL)
    assert code is not None
    sample = str(ROOT / "sample_traces" / "tp2_dp2")
    namespace: dict[str, object] = {}
    exec(compile(code.group(1).replace("runs/exp1", sample), "README.md", "exec"), namespace)
    assert isinstance(namespace["report"], dict) and namespace["report"]["run"]["ranks_analyzed"] == 4


def test_links_stay_inside_the_repository() -> None:
    for target in re.findall(r"\]\(([^)#]+)\)", README):
        if "://" not in target:
            assert (ROOT / target).exists(), target
    assert "../shared/DESIGN" not in README and "DESIGN §" not in README
