"""The app factory, its router, its message pages and the ``commprof dashboard`` command (no browser)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

import commprof
from commprof.cli import main
from commprof.cli.dashboard import run_keys
from commprof.dashboard import create_app, ids
from commprof.dashboard.app import route
from commprof.dashboard.cache import RunCache


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> RunCache:
    sample = tmp_path_factory.mktemp("app") / "sample"
    shutil.copytree(Path(__file__).resolve().parents[1] / "sample_traces" / "gloo_4rank_profiler", sample,
                    ignore=shutil.ignore_patterns("tables"))
    return RunCache({"sample": commprof.open_run(sample)})


def _text(component: object) -> str:
    return json.dumps(component, default=lambda c: c.to_plotly_json() if hasattr(c, "to_plotly_json") else str(c))


@pytest.mark.parametrize("path", ["/run/../../etc/passwd/overview", "/run/%2Fetc%2Fpasswd/overview",
                                  "/run/nope/overview", "/run/sample/nope", "/elsewhere"])
def test_urls_never_reach_the_file_system(cache: RunCache, path: str) -> None:
    page, _ = route(cache, path)
    assert ids.MESSAGE in _text(page)
    assert "passwd" not in str(list(cache.runs))


def test_every_run_page_routes(cache: RunCache) -> None:
    for page in ("overview", "timeline", "collectives", "topology", "skew"):
        body, nav = route(cache, f"/run/sample/{page}")
        assert ids.MESSAGE not in _text(body) and ids.RUN_KEY in _text(body)
    assert "sample" in _text(route(cache, "/")[0])  # one run: / is its overview
    assert "Compare needs two runs" in _text(route(cache, "/compare")[0])
    assert "No findings are computed for this run" in _text(route(cache, "/run/sample/overview")[0])


def test_failed_analysis_is_a_message_page(cache: RunCache) -> None:
    class Broken:
        path = Path("broken")
        warnings: list[str] = []

        def tables(self) -> None:
            raise ZeroDivisionError("division by zero")

    broken = RunCache({"broken": Broken()})  # type: ignore[dict-item]
    page, _ = route(broken, "/run/broken/overview")
    text = _text(page)
    assert "run 'broken' could not be analyzed: ZeroDivisionError: division by zero" in text
    assert "Traceback" not in text


def test_timeline_callback_payload(cache: RunCache) -> None:
    app = create_app(cache.runs, cache)
    client = app.server.test_client()
    base = cache.timeline_base("sample")
    body = {
        "output": f"..{ids.TIMELINE_GRAPH}.figure...{ids.TIMELINE_INFO}.children..",
        "outputs": [{"id": ids.TIMELINE_GRAPH, "property": "figure"}, {"id": ids.TIMELINE_INFO,
                                                                         "property": "children"}],
        "inputs": [{"id": ids.TIMELINE_WINDOW, "property": "data", "value": [base.origin_ns, base.end_ns]},
                   {"id": ids.TIMELINE_RANKS, "property": "value", "value": [0, 1, 2, 3]}],
        "state": [{"id": ids.RUN_KEY, "property": "data", "value": "sample"}],
        "changedPropIds": [f"{ids.TIMELINE_WINDOW}.data"],
    }
    response = client.post("/_dash-update-component", json=body)
    assert response.status_code == 200
    data = response.get_json()["response"]
    assert len(response.data) < 1_000_000
    assert "segments drawn" in data[ids.TIMELINE_INFO]["children"]
    body["state"][0]["value"] = "../../etc"
    refused = client.post("/_dash-update-component", json=body)  # an unknown key: nothing is drawn
    assert refused.status_code in (200, 204) and b"segments" not in refused.data


def test_run_keys_are_unique(tmp_path: Path) -> None:
    (tmp_path / "a" / "run").mkdir(parents=True)
    (tmp_path / "b" / "run").mkdir(parents=True)
    assert run_keys([str(tmp_path / "a" / "run"), str(tmp_path / "b" / "run")]) == ["run", "run-2"]


def test_cli_missing_path_exits_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["dashboard", str(tmp_path / "missing")])
    assert result.exit_code == 2
    assert "no such file or folder" in result.output and "Traceback" not in result.output


def test_cli_serves_the_runs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    shutil.copytree(Path(__file__).resolve().parents[1] / "sample_traces" / "gloo_4rank_profiler",
                    tmp_path / "s", ignore=shutil.ignore_patterns("tables"))
    served = {}

    def fake_run(self: object, host: str, port: int, debug: bool) -> None:
        served.update(host=host, port=port, debug=debug)

    monkeypatch.setattr("dash.Dash.run", fake_run)
    result = CliRunner().invoke(main, ["dashboard", str(tmp_path / "s"), "--port", "8123"])
    assert result.exit_code == 0, result.output
    assert served == {"host": "127.0.0.1", "port": 8123, "debug": False}
