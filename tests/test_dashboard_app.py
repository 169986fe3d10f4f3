"""The app factory, its router, its message pages, the Perfetto download, the callbacks' validation (crafted
and fuzzed inputs never give an HTTP 500) and the ``commprof dashboard`` command (no browser)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import commprof
from commprof.cli import main
from commprof.cli.dashboard import host_warning, run_keys
from commprof.dashboard import create_app, ids, serve, state
from commprof.dashboard.app import route
from commprof.dashboard.cache import RunCache

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_traces" / "tp2_pp2_dp2"


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> RunCache:
    sample = tmp_path_factory.mktemp("app") / "sample"
    shutil.copytree(SAMPLE, sample, ignore=shutil.ignore_patterns("tables"))
    return RunCache({"sample": commprof.open_run(sample)})


@pytest.fixture(scope="module")
def app(cache: RunCache) -> Any:
    return create_app(cache.runs, cache)


def _text(component: object) -> str:
    return json.dumps(component, default=lambda c: c.to_plotly_json() if hasattr(c, "to_plotly_json") else str(c))


def _is_message(component: object) -> bool:
    return f'"id": "{ids.MESSAGE}"' in _text(component)


def _outputs(key: str) -> Any:
    """The request's ``outputs`` for a callback_map key (``..a.b...c.d..`` or ``a.b@hash``)."""
    parts = key[2:-2].split("...") if key.startswith("..") else [key]
    outs = [{"id": p.split(".", 1)[0], "property": p.split(".", 1)[1]} for p in parts]
    return outs if key.startswith("..") else outs[0]


def call(app: Any, key: str, inputs: list[Any], states: list[Any], changed: int = 0) -> Any:
    """POST one callback as the browser would, with these input and state values."""
    spec = app.callback_map[key]
    body = {
        "output": key, "outputs": _outputs(key),
        "inputs": [dict(i, value=v) for i, v in zip(spec["inputs"], inputs, strict=True)],
        "state": [dict(s, value=v) for s, v in zip(spec["state"], states, strict=True)],
        "changedPropIds": [f"{spec['inputs'][changed]['id']}.{spec['inputs'][changed]['property']}"],
    }
    return app.server.test_client().post("/_dash-update-component", data=json.dumps(body),
                                          content_type="application/json")


def _key(app: Any, starts: str) -> str:
    return next(k for k in app.callback_map if k.startswith(starts))


@pytest.mark.parametrize("path", ["/run/../../etc/passwd/overview", "/run/%2Fetc%2Fpasswd/overview",
                                  "/run/nope/overview", "/run/sample/nope", "/elsewhere"])
def test_urls_never_reach_the_file_system(cache: RunCache, path: str) -> None:
    page, _ = route(cache, path)
    assert _is_message(page)
    assert "passwd" not in str(list(cache.runs))


def test_every_run_page_routes(cache: RunCache) -> None:
    for page in ("overview", "timeline", "collectives", "topology", "skew"):
        body, nav = route(cache, f"/run/sample/{page}")
        assert not _is_message(body) and ids.RUN_KEY in _text(body)
    assert ids.OVERVIEW_HEADLINE in _text(route(cache, "/")[0])  # one run: / is its overview
    assert "Compare needs two runs" in _text(route(cache, "/compare")[0])
    overview = _text(route(cache, "/run/sample/overview")[0])
    # the CLI's dimension x tier rows, group names, the headline and the Perfetto link
    for text in ("Communication by dimension and tier", "loopback", "exposed ms/step", "step time",
                 "/download/sample/perfetto.json"):
        assert text in overview


def test_the_overview_says_where_a_large_exposed_time_goes_when_no_rule_names_a_cause(tmp_path: Path,
                                                                                      cache: RunCache) -> None:
    """Synthetic (exact by construction): 16 ranks, tp=8 x dp=2, 25 % of the step exposed DP comm and no finding
    above info. The overview carries the analysis' own note, word for word, not "nothing costs enough"."""
    out = tmp_path / "s16"
    made = CliRunner().invoke(main, ["synth", str(out), "--nodes", "2", "--gpus-per-node", "8", "--layout",
                                     "tp=8,dp=2", "--steps", "2", "--layers", "2", "--micro-batches", "2"])
    assert made.exit_code == 0, made.output
    synth = RunCache({"s16": commprof.open_run(out)})
    note = synth.analysis("s16").exposed_note
    assert note is not None and "dp on ib" in note.headline
    page = _text(route(synth, "/run/s16/overview")[0])
    assert ids.OVERVIEW_EXPOSED_NOTE in page and json.dumps(note.headline)[1:-1] in page
    assert json.dumps(note.look_at)[1:-1] in page and "nothing in this run costs enough" not in page
    sample = _text(route(cache, "/run/sample/overview")[0])
    assert ids.OVERVIEW_EXPOSED_NOTE not in sample  # its findings name causes: no note


def test_bad_url_state_is_said_on_the_page(cache: RunCache) -> None:
    page = _text(route(cache, "/run/sample/timeline", "?step=abc&ranks=x,99&t0=nan")[0])
    assert "step must be a whole number" in page and "t0 must be a finite number" in page
    assert "a rank must be a whole number" in page
    assert "no rank 99" in _text(route(cache, "/run/sample/timeline", "?ranks=0-3,99")[0])
    assert "this run has no step 1 (steps: 2, 3, 4)" in _text(route(cache, "/run/sample/timeline", "?step=1")[0])
    good = _text(route(cache, "/run/sample/timeline", "?step=3&ranks=0-3&t0=1&t1=2")[0])
    assert "whole number" not in good and '"value": "3"' in good
    assert "not one of this run's ops" in _text(route(cache, "/run/sample/collectives", "?op=nope")[0])


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


def test_a_run_that_failed_to_open_is_listed_with_its_message(cache: RunCache) -> None:
    mixed = RunCache(dict(cache.runs), failures={"bad": "bad/x.json: not JSON"}, order=["bad", "sample"])
    index = _text(route(mixed, "/")[0])
    assert "could not be opened: bad/x.json: not JSON" in index and "/run/sample/overview" in index
    assert "not JSON" in _text(route(mixed, "/run/bad/overview")[0])
    assert not _is_message(route(mixed, "/run/sample/overview")[0])


def test_timeline_callback_payload(app: Any, cache: RunCache) -> None:
    base = cache.timeline_base("sample")
    key = _key(app, f"..{ids.TIMELINE_GRAPH}.figure")
    response = call(app, key, [[base.origin_ns, base.end_ns], [0, 1, 2, 3], "ranks"], ["sample"])
    assert response.status_code == 200
    data = response.get_json()["response"]
    assert len(response.data) < 1_000_000
    assert "segments drawn" in data[ids.TIMELINE_INFO]["children"]
    fig = data[ids.TIMELINE_GRAPH]["figure"]
    assert fig["layout"]["yaxis"]["range"] == [7.5, -0.5]  # 4 ranks x (compute, comm), pinned
    refused = call(app, key, [[base.origin_ns, base.end_ns], [0], "ranks"], ["../../etc"])
    assert refused.status_code == 200 and b"segments" not in refused.data and b"No run named" in refused.data


def test_timeline_state_goes_into_the_url(app: Any, cache: RunCache) -> None:
    base = cache.timeline_base("sample")
    key = _key(app, "url.search")
    step = base.steps.row(1, named=True)
    response = call(app, key, [[step["start_ns"], step["end_ns"]], [0, 1, 2, 3, 7], "ranks"],
                    [str(step["step"]), "sample", ""])
    search = response.get_json()["response"]["url"]["search"]
    assert search == f"?step={step['step']}&ranks=0-3%2C7"
    assert state.parse_query(search) == {"step": str(step["step"]), "ranks": "0-3,7"}
    # the URL already says so: no new history entry
    again = call(app, key, [[step["start_ns"], step["end_ns"]], [0, 1, 2, 3, 7], "ranks"],
                 [str(step["step"]), "sample", search])
    assert again.status_code in (200, 204) and "url" not in (again.get_json() or {}).get("response", {})


def test_a_reset_to_the_first_drawn_range_returns_to_the_chosen_step(app: Any, cache: RunCache) -> None:
    """Plotly's reset axes and double-click send the range the graph was first drawn with (the whole run
    when the step was chosen later): with a step chosen that means the step, as autoscale does."""
    base = cache.timeline_base("sample")
    step = base.steps.row(1, named=True)
    key = _key(app, f"..{ids.TIMELINE_WINDOW}.data")
    whole = [base.origin_ns, base.end_ns]
    first_range = {"xaxis.range[0]": 0.0, "xaxis.range[1]": (base.end_ns - base.origin_ns) / 1e6}
    for relayout in (first_range, {"xaxis.autorange": True}):
        got = call(app, key, [step["step"], relayout], ["sample", whole], changed=1).get_json()["response"]
        assert got[ids.TIMELINE_WINDOW]["data"] == [step["start_ns"], step["end_ns"]], relayout
    zoom = {"xaxis.range[0]": 1.0, "xaxis.range[1]": 2.0}  # any other range is a zoom
    got = call(app, key, [step["step"], zoom], ["sample", whole], changed=1).get_json()["response"]
    assert got[ids.TIMELINE_WINDOW]["data"] == [base.origin_ns + 1_000_000, base.origin_ns + 2_000_000]


CRAFTED = ["abc", math.nan, math.inf, 1e308, -1e308, ["x"], [["x"]], {"a": 1}, [1, 2, 3], None, True, -1, 2**70,
           "", [], {"xaxis.range[0]": math.nan, "xaxis.range[1]": 1e308}, {"xaxis.range": ["a", None]},
           {"points": [{"customdata": ["x", {}, None]}]}, {"points": "x"}, "../../etc/passwd", "0-99999999"]


def test_crafted_callback_inputs_answer_a_message_never_a_500(app: Any, cache: RunCache) -> None:
    """The issue's 63 crafted callbacks, and more: every input and state of every callback, one at a time,
    set to each crafted value, the others plausible."""
    plausible = {"pathname": "/run/sample/timeline", "search": "", "data": "sample", "value": None,
                 "relayoutData": None, "clickData": None}
    base = cache.timeline_base("sample")
    answered = 0
    for key, spec in app.callback_map.items():
        slots = spec["inputs"] + spec["state"]
        good = []
        for slot in slots:
            value = plausible.get(slot["property"])
            if slot["id"] == ids.TIMELINE_WINDOW:
                value = [base.origin_ns, base.end_ns]
            good.append(value)
        for i in range(len(slots)):
            for bad in CRAFTED:
                values = list(good)
                values[i] = bad
                n = len(spec["inputs"])
                response = call(app, key, values[:n], values[n:], changed=min(i, n - 1))
                assert response.status_code in (200, 204), (key, slots[i], bad, response.data[:300])
                assert b"Traceback" not in response.data
                answered += 1
    assert answered > 500


def _json_values() -> st.SearchStrategy[Any]:
    leaves = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**80), max_value=2**80),
                       st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=30),
                       st.sampled_from(["sample", "all", "ranks", "streams", "0-3", "1", "abc"]))
    return st.recursive(leaves, lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(
            ["points", "customdata", "xaxis.range[0]", "xaxis.range[1]", "xaxis.range", "xaxis.autorange",
             "autosize", "x"]), inner, max_size=3)), max_leaves=8)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(data=st.data())
def test_fuzzed_callbacks_never_answer_500(app: Any, data: st.DataObject) -> None:
    keys = sorted(app.callback_map)
    key = data.draw(st.sampled_from(keys))
    spec = app.callback_map[key]
    inputs = [data.draw(_json_values()) for _ in spec["inputs"]]
    states = [data.draw(_json_values()) for _ in spec["state"]]
    response = call(app, key, inputs, states, changed=data.draw(st.integers(0, len(inputs) - 1)))
    assert response.status_code in (200, 204), (key, inputs, states, response.data[:300])


def test_perfetto_download(app: Any) -> None:
    client = app.server.test_client()
    response = client.get("/download/sample/perfetto.json")
    assert response.status_code == 200
    assert "attachment" in response.headers["Content-Disposition"]
    trace = json.loads(response.data)
    assert trace["commprof"]["world_size"] == 8 and trace["traceEvents"]
    # a path that is not a run's key: never a file (Dash's catch-all answers with its HTML shell)
    escaped = client.get("/download/..%2F..%2Fetc/perfetto.json")
    assert "attachment" not in escaped.headers.get("Content-Disposition", "") and b"root:" not in escaped.data
    assert client.get("/download/nope/perfetto.json").status_code == 404


def test_state_helpers() -> None:
    assert state.ranks_text([0, 1, 2, 3, 7, 9, 10]) == "0-3,7,9-10"
    assert state.as_ranks("0-3,7", range(16)) == [0, 1, 2, 3, 7]
    assert state.href("a b", "timeline", ranks=[1, 2, 3], step=None) == "/run/a%20b/timeline?ranks=1-3"
    for bad in ("abc", "1.5", math.nan, True, 2**70):
        with pytest.raises(state.BadInput):
            state.as_int(bad, "step")
    for zoom in ({"xaxis.range[0]": math.nan, "xaxis.range[1]": 1}, {"xaxis.range": [0, 1e308]},
                 {"xaxis.range": "x"}, ["x"]):
        with pytest.raises(state.BadInput):
            state.as_relayout(zoom)
    assert state.as_relayout({"xaxis.range[0]": 2, "xaxis.range[1]": 1}) == (1.0, 2.0)
    assert state.as_relayout({"xaxis.autorange": True}) == "reset"


def test_run_keys_are_unique(tmp_path: Path) -> None:
    (tmp_path / "a" / "run").mkdir(parents=True)
    (tmp_path / "b" / "run").mkdir(parents=True)
    assert run_keys([str(tmp_path / "a" / "run"), str(tmp_path / "b" / "run")]) == ["run", "run-2"]


def test_cli_missing_path_exits_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["dashboard", str(tmp_path / "missing")])
    assert result.exit_code == 2
    assert "no such file or folder" in result.output and "Traceback" not in result.output


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    got: dict[str, Any] = {}

    def fake_serve(app: Any, host: str, port: int, threads: int = serve.THREADS) -> None:
        got.update(host=host, port=port, threads=threads, cache=app.commprof_cache)

    monkeypatch.setattr(serve, "serve", fake_serve)
    return got


def test_cli_serves_the_runs_with_the_analysis_options(tmp_path: Path, served: dict[str, Any]) -> None:
    shutil.copytree(SAMPLE, tmp_path / "s", ignore=shutil.ignore_patterns("tables"))
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "rank-0.json").write_text("{not json")
    result = CliRunner().invoke(main, ["dashboard", str(tmp_path / "s"), str(tmp_path / "bad"), "--port", "8123",
                                       "--network", "ib", "--layout", "tp=2,pp=2,dp=2", "--peak", "loopback=5"])
    assert result.exit_code == 0, result.output
    assert {k: served[k] for k in ("host", "port", "threads")} == {"host": "127.0.0.1", "port": 8123,
                                                                   "threads": serve.THREADS}
    cache = served["cache"]
    assert cache.settings.network == "ib" and cache.settings.peaks == {"loopback": 5.0}
    assert "bad" in cache.failures and "the other runs are served" in result.output
    assert "warning: --host" not in result.output
    assert cache.analysis("s").settings.layout.sizes == {"tp": 2, "pp": 2, "dp": 2}


def test_cli_bad_options_exit_2(tmp_path: Path, served: dict[str, Any]) -> None:
    shutil.copytree(SAMPLE, tmp_path / "s", ignore=shutil.ignore_patterns("tables"))
    result = CliRunner().invoke(main, ["dashboard", str(tmp_path / "s"), "--layout", "tp=x"])
    assert result.exit_code == 2 and "Traceback" not in result.output and not served


def test_cli_warns_when_served_to_the_network(tmp_path: Path, served: dict[str, Any]) -> None:
    shutil.copytree(SAMPLE, tmp_path / "s", ignore=shutil.ignore_patterns("tables"))
    result = CliRunner().invoke(main, ["dashboard", str(tmp_path / "s"), "--host", "0.0.0.0"])
    assert result.exit_code == 0
    assert "warning: --host 0.0.0.0 serves the dashboard to the network, to whoever has its token" in result.output
    assert "?token=" in result.output and "no login" not in result.output  # tests/test_dashboard_token.py: HTTP
    assert host_warning("127.0.0.1", 1) is None and host_warning("localhost", 1) is None
    assert host_warning("::", 8050) is not None


def test_figure_clicks_open_the_filtered_views(app: Any, cache: RunCache) -> None:
    """A skew cell opens the timeline of its group at the step of the row's longest wait; a topology rank
    and a breakdown bar open their rank's timeline; a dimension or tier bar opens its collectives."""
    a = cache.analysis("sample")
    row = a.rank_group_waits.sort("wait_ns_per_step", descending=True).row(0, named=True)
    # the cell is read from the click's x (column) and y (row): plotly's heatmap clicks carry no customdata
    skew = call(app, next(
        k for k, v in app.callback_map.items() if v["inputs"][0]["id"] == ids.SKEW_GROUPS),
        [{"points": [{"x": f"{row['dimension']} · pg {row['pg']}", "y": str(row["rank"])}]}], ["sample"])
    target = skew.get_json()["response"]["url"]["href"]
    members = a.process_groups.filter(a.process_groups["pg"] == row["pg"])["ranks"][0].to_list()
    assert target == state.href("sample", "timeline", ranks=sorted(members), step=row["max_wait_step"])
    topo = next(k for k, v in app.callback_map.items() if v["inputs"][0]["id"] == ids.TOPO_GRAPH)
    answer = call(app, topo, [{"points": [{"customdata": 3}]}], ["sample"]).get_json()["response"]
    assert answer["url"]["href"] == "/run/sample/timeline?ranks=3"
    over = next(k for k, v in app.callback_map.items() if v["inputs"][0]["id"] == ids.OVERVIEW_BREAKDOWN)
    clicks = [{"points": [{"customdata": 6}]}, None, None]
    assert call(app, over, clicks, ["sample"]).get_json()["response"]["url"]["href"] == \
        "/run/sample/timeline?ranks=6"
    clicks = [None, None, {"points": [{"customdata": "loopback"}]}]
    assert call(app, over, clicks, ["sample"], changed=2).get_json()["response"]["url"]["href"] == \
        "/run/sample/collectives?tier=loopback"
    # a rank the run does not have goes nowhere
    assert call(app, topo, [{"points": [{"customdata": 99}]}], ["sample"]).status_code in (200, 204)
    assert "url" not in (call(app, topo, [{"points": [{"customdata": 99}]}], ["sample"]).get_json() or {}).get(
        "response", {})


@pytest.mark.parametrize(("callback", "inputs", "states", "changed", "output", "said"), [
    (ids.TIMELINE_WINDOW, ["abc", None], ["sample", None], 0, ids.TIMELINE_MESSAGE, "step must be a whole number"),
    (ids.TIMELINE_WINDOW, ["all", {"xaxis.range[0]": math.nan, "xaxis.range[1]": 1e308}], ["sample", None], 1,
     ids.TIMELINE_MESSAGE, "must be a finite number of ms"),
    (ids.TIMELINE_GRAPH, [[0, 1], ["x"], "ranks"], ["sample"], 1, ids.TIMELINE_NOTE,
     "a rank must be a whole number"),
    (ids.TIMELINE_GRAPH, ["abc", [0], "ranks"], ["sample"], 0, ids.TIMELINE_NOTE, "must be a pair"),
    (ids.TIMELINE_GRAPH, [[0, 1], [0], "ranks"], [["sample"]], 0, ids.TIMELINE_NOTE, "No run named"),
    (ids.COLL_TABLE, [{"a": 1}, None, None, None], ["sample"], 0, ids.COLL_MESSAGE, "is not one of this run's"),
    (ids.SKEW_HEATMAP, [["x"]], ["sample", "1"], 0, ids.SKEW_MESSAGE, "is not one of this run's groups"),
    (ids.COMPARE_GRAPH, [["x"], "sample"], [], 0, ids.COMPARE_MESSAGE, "No run named"),
])
def test_bad_inputs_are_answered_with_a_message(app: Any, callback: str, inputs: list[Any], states: list[Any],
                                                changed: int, output: str, said: str) -> None:
    key = next(k for k in app.callback_map if k.lstrip(".").startswith(callback + "."))
    response = call(app, key, inputs, states, changed=changed)
    assert response.status_code == 200
    assert said in response.get_json()["response"][output]["children"]
