"""The example notebook (issue 40, item 3) runs headless on the 2x8 synthetic sample and shows the run, the findings
(the HTML report's pieces), the findings and summaries as DataFrames, and a plotly figure: docs/notebook.ipynb
cannot rot."""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl
import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "docs" / "notebook.ipynb"


@pytest.mark.slow
def test_the_example_notebook_runs_and_shows_findings_and_a_figure(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    nbformat = pytest.importorskip("nbformat", reason="the dev extra's nbformat (pip install -e .[dev])")
    nbclient = pytest.importorskip("nbclient", reason="the dev extra's nbclient (pip install -e .[dev])")
    pytest.importorskip("ipykernel", reason="the dev extra's ipykernel: the notebook's kernel")
    monkeypatch.setenv("COMMPROF_CACHE_DIR", str(tmp_path / "cache"))  # the kernel inherits it: the sample stays
    monkeypatch.setenv("COMMPROF_NOTEBOOK_RUN", str(ROOT / "sample_traces" / "synth_2x8_tp8_dp2"))
    book = nbformat.read(NOTEBOOK, as_version=4)
    assert not any(cell.get("outputs") for cell in book.cells if cell.cell_type == "code"), "commit it without outputs"
    nbclient.NotebookClient(book, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    outputs = [o for cell in book.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    html = [o["data"]["text/html"] for o in outputs if "text/html" in o.get("data", {})]
    assert any("commprof run" in h and "16 rank(s)" in h for h in html)  # the run
    assert any('<article class="finding info" data-finding="straggler:rank5"' in h for h in html)  # the analysis
    frames = [h for h in html if "<table" in h and "shape:" in h]  # polars' own HTML
    assert any("straggler" in h and "saving_ns_per_step" in h for h in frames)  # the findings DataFrame
    assert any("exposed_ns_per_step" in h for h in frames)
    plotly = [o["data"] for o in outputs if "application/vnd.plotly.v1+json" in o.get("data", {})]
    assert plotly and plotly[-1]["application/vnd.plotly.v1+json"]["data"], [list(o.get("data", {})) for o in outputs]


def _documented(section: str) -> list[str]:
    """The column names of a table under ``## `analysis.<section>` `` in docs/notebook.md."""
    text = (ROOT / "docs" / "notebook.md").read_text(encoding="utf-8")
    body = text.split(f"## `analysis.{section}`", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `(\w+)` \|", body, flags=re.MULTILINE)


@pytest.mark.parametrize("section", ["findings", "rank_summary", "dimension_tier"])
def test_the_documented_columns_are_the_frames(section: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import commprof

    monkeypatch.setenv("COMMPROF_CACHE_DIR", str(tmp_path / "cache"))
    analysis = commprof.analyze(str(ROOT / "sample_traces" / "synth_2x8_tp8_dp2"))
    frame = getattr(analysis, section)
    assert isinstance(frame, pl.DataFrame)
    assert frame.columns == _documented(section)
    if section == "findings":
        assert frame["key"].to_list() == [f.key for f in analysis.finding_list] == ["straggler:rank5"]
