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


def test_install_lines_are_what_ci_checks() -> None:
    """No release exists, so no code block tells people to `pip install commprof`; the wheel the README
    installs is the one `make wheel-check` (CI, after make test) builds, installs into a fresh venv and uses."""
    section = README[README.index("## Install"):README.index("## Analyze your own traces")]
    lines = [line.split("#")[0].strip() for block in re.findall(r"```sh\n(.*?)```", section, flags=re.DOTALL)
             for line in block.splitlines()]
    version = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), flags=re.MULTILINE)
    assert version is not None
    assert lines == ["pip install .", "pip install '.[record]'", "pip install build && python -m build",
                     f"pip install dist/commprof-{version.group(1)}-py3-none-any.whl"]
    makefile = (ROOT / "Makefile").read_text()
    assert "-m build --outdir dist ." in makefile and "tools/check_dist.py dist --install" in makefile
    assert "make wheel-check" in (ROOT / ".ci" / "run").read_text()
