"""report.html opens offline in a real browser with its summary table and interactive
figures (hover shows values, drag zooms, legends clear of the data), in one self-contained
file; without plotly it falls back to inlined PNGs and says so; the timeline has one lane
per pipeline stage and stream kind at any rank count. trace.json is valid Trace Event
Format with tensor-parallel slices, memory counter tracks and pipeline flow arrows.

The browser tests drive the system Chromium with Playwright (no browser download) and skip,
saying why, where no Chromium executable or no playwright is found; the plain tests parse
the HTML and run everywhere."""

from __future__ import annotations

import json
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest

from simulator.config.hardware import load_profile
from simulator.config.scenario import parse_scenario
from simulator.engine.tasks import STREAMS
from simulator.report import html as report_html
from simulator.report import write_report
from simulator.report.chrome import TP_THREAD, chrome_trace
from simulator.report.html import FIGURES, run_page, sweep_page
from simulator.report.interactive import plotly_js, run_figures
from simulator.report.lanes import timeline_lanes
from simulator.report.metrics import memory_timeline
from simulator.report.summary import summary
from simulator.simulation.simulate import simulate

CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser",
                                               "google-chrome")) if p), None)
needs_plotly = pytest.mark.skipif(plotly_js() is None, reason="plotly (the report extra) "
                                  "is not installed: report.html has static figures")


@pytest.fixture(scope="module")
def result():
    sc = parse_scenario({
        "name": "html <report>", "hardware": "a100-80gb",
        "cluster": {"nodes": 2, "devices_per_node": 4},
        "model": {"type": "transformer", "layers": 4, "hidden_size": 512, "num_heads": 8,
                  "seq_length": 512, "vocab_size": 4096},
        "training": {"global_batch_size": 8, "micro_batch_size": 1},
        "parallel": {"tensor": 2, "data": 2, "pipeline": 2},
    }, "test")
    return simulate(sc, load_profile("a100-80gb"))


@pytest.fixture(scope="module")
def report_dir(result, tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    write_report(result, out)
    return out


@pytest.fixture(scope="module")
def wide():
    """A 64-rank scenario (data 2 x tensor 8 x pipeline 4) with every device simulated."""
    from simulator import api

    return api.simulate("llama2-70b-64-h100", fidelity="full")


class _Page(HTMLParser):
    """The tags of a page with their attributes, and the text of each script."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: list[tuple[dict[str, str | None], str]] = []
        self._in: dict[str, str | None] | None = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag == "script":
            self._in = dict(attrs)
            self.scripts.append((self._in, ""))

    def handle_endtag(self, tag):
        if tag == "script":
            self._in = None

    def handle_data(self, data):
        if self._in is not None:
            attrs, text = self.scripts[-1]
            self.scripts[-1] = (attrs, text + data)


def _plots(page: _Page) -> dict:
    data = [text for attrs, text in page.scripts if attrs.get("id") == "plot-data"]
    assert len(data) == 1 and page.scripts[0][0].get("type") == "application/json"
    return json.loads(data[0])


def _self_contained(page: _Page) -> None:
    """Nothing the page would fetch: no link element, no script src, every src and href
    inline (data:) or in the page (#)."""
    assert not [t for t, _ in page.tags if t in ("link", "iframe", "object", "embed")]
    for tag, attrs in page.tags:
        assert not (tag == "script" and "src" in attrs)
        for key in ("src", "href", "srcset", "poster"):
            value = attrs.get(key)
            assert value is None or value.startswith(("data:", "#")), (tag, key, value)


@needs_plotly
def test_report_html_is_self_contained_and_interactive(report_dir, result):
    text = (report_dir / "report.html").read_text()
    page = _Page(text)
    _self_contained(page)
    plots = _plots(page)
    assert set(plots) == {fig_id for fig_id, _ in FIGURES.values()}
    assert all(plots[f]["data"] for f in plots)  # every figure has its data in the page
    ids = {attrs.get("id") for tag, attrs in page.tags if tag == "div"}
    assert set(plots) <= ids  # each drawn into its own element
    bundle = [t for _, t in page.scripts if "plotly.js v" in t[:200]]
    assert len(bundle) == 1 and len(bundle[0]) > 1_000_000  # the plotly.js bundle, inline
    assert "<img" not in text and 'id="static-note"' not in text
    assert "Hover a bar for its task" in text
    assert "html &lt;report&gt;" in text  # names are escaped ...
    assert "html <report>" not in text  # ... in the figure data too (\u003c)
    # the timeline's values are the simulation's: one bar per span of the lanes
    lanes = timeline_lanes(result.plan, result.trace)
    bars = plots["fig-timeline"]["data"]
    assert sum(len(t["x"]) for t in bars) == sum(len(lane.spans) for lane in lanes)
    assert max(b + x for t in bars for b, x in zip(t["base"], t["x"])) == \
        pytest.approx(result.iteration_time_s, rel=1e-6)
    breakdown = plots["fig-breakdown"]["data"][0]
    assert breakdown["x"] == pytest.approx([v for _, v in result.breakdown_s], rel=1e-6)


def test_without_plotly_the_page_has_static_figures_and_says_so(result, report_dir,
                                                                monkeypatch):
    monkeypatch.setattr(report_html, "plotly_js", lambda: None)
    pngs = {name: report_dir / name for name in FIGURES}
    text = run_page(summary(result), pngs, run_figures(result))
    page = _Page(text)
    _self_contained(page)
    assert not page.scripts
    assert text.count('src="data:image/png;base64,') == len(FIGURES)
    note = re.search(r'<p id="static-note"[^>]*>(.*?)</p>', text).group(1)
    assert "Static figures: plotly is not installed" in note
    assert "Hover a bar" not in text  # no promise the images cannot keep
    assert "pip install &#x27;shardsim[report]&#x27;" in note or \
        "pip install 'shardsim[report]'" in note


def test_the_timeline_has_a_lane_per_stage_and_kind_at_64_ranks(wide, tmp_path):
    """64 simulated devices, 4 pipeline stages, 2 stream kinds: 8 lanes, not 64 rows; the
    same lanes as the representative simulation of the same scenario."""
    from simulator import api

    plan = wide.plan
    assert len(plan.devices) == plan.total_devices == 64
    lanes = timeline_lanes(plan, wide.trace)
    stages = sorted(set(plan.stage_of))
    kinds = [s for s in STREAMS if any(t.stream == s for t in plan.tasks)]
    assert [(lane.stage, lane.stream) for lane in lanes] == \
        [(s, k) for s in stages for k in kinds]
    assert len(lanes) == len(stages) * len(kinds) == 8
    assert len(lanes) <= wide.scenario.parallel.pipeline * len(STREAMS)  # bounded
    assert all(lane.represents == 16 for lane in lanes)  # 16 ranks per stage
    rep = api.simulate("llama2-70b-64-h100")
    assert [lane.label for lane in timeline_lanes(rep.plan, rep.trace)] == \
        [lane.label for lane in lanes]
    if plotly_js() is not None:
        write_report(wide, tmp_path / "r")
        plots = _plots(_Page((tmp_path / "r" / "report.html").read_text()))
        labels = plots["fig-timeline"]["layout"]["yaxis"]["categoryarray"]
        assert labels == [lane.label for lane in lanes]
        assert {y for t in plots["fig-timeline"]["data"] for y in t["y"]} <= set(labels)


def test_each_stage_is_drawn_from_its_device_that_finishes_last(wide):
    ends: dict[int, float] = {}
    for t in wide.plan.tasks:
        ends[t.device] = max(ends.get(t.device, 0.0), wide.trace.end[t.tid])
    for lane in timeline_lanes(wide.plan, wide.trace):
        same = [d for d, s in zip(wide.plan.devices, wide.plan.stage_of) if s == lane.stage]
        assert ends[lane.device] == max(ends[d] for d in same)
        # a span is consecutive tasks of the lane's device on its stream, in time order
        assert all(a.end <= b.start + 1e-12 for a, b in zip(lane.spans, lane.spans[1:]))


@needs_plotly
def test_the_sweep_page_plots_every_series(tmp_path):
    rows = [{"index": i, "config": f"a={a} b={b}", "a": a, "b": b, "status": "ok",
             "error": None, "fits": True, "iteration_time_s": 1.0 + a + b / 100,
             "tokens_per_s": 1.0, "mfu": 0.5, "peak_memory_bytes": 1e9 * (a + 1),
             "capacity_bytes": 80e9} for i, (a, b) in enumerate(
                 (a, b) for b in range(15) for a in (1, 2))]
    text = sweep_page(rows, ["a", "b"], None, "sweep <x>")
    page = _Page(text)
    _self_contained(page)
    plot = _plots(page)["fig-sweep"]
    legend = [t["name"] for t in plot["data"] if t.get("showlegend", True)]
    assert legend == [f"b={b}" for b in range(15)]  # all 15 series, not the best 12
    for group in {t["legendgroup"] for t in plot["data"] if "legendgroup" in t}:
        time_line, memory_line = [t for t in plot["data"] if t.get("legendgroup") == group]
        assert time_line["line"]["color"] == memory_line["line"]["color"]  # one series
        assert time_line["y"] == [r["iteration_time_s"] for r in rows
                                  if f"b={r['b']}" == time_line["name"]]


def _browser(pw):
    return pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                              args=["--no-sandbox", "--disable-gpu"])


def _open(browser, path: Path):
    """The page opened offline: any request that is not the file itself fails and is
    recorded."""
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    fetched: list[str] = []
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))

    def route(r):
        if r.request.url.startswith(("file:", "data:")):
            return r.continue_()
        fetched.append(r.request.url)
        return r.abort()

    page.route("**/*", route)
    page.goto(path.as_uri())
    return page, fetched, errors


def _skip_without_browser():
    if CHROMIUM is None:
        pytest.skip("no Chromium executable on PATH (chromium, chromium-browser or "
                    "google-chrome; apt-get install chromium): the browser tests did not run")
    return pytest.importorskip("playwright.sync_api", reason="playwright is not installed "
                               "(the dev extra): the browser tests did not run")


def _texts(page, selector: str) -> list[str]:
    """The text of each element (SVG ones too, which have no innerText), top to bottom."""
    found = page.locator(selector).evaluate_all(
        "els => els.map(e => [e.getBoundingClientRect().top, e.textContent])")
    return [text for _, text in sorted(found)]


def _widest(page, selector: str) -> dict:
    """The bounding box of the widest element matching `selector`."""
    boxes = page.locator(selector).evaluate_all(
        "els => els.map(e => { const r = e.getBoundingClientRect();"
        " return {x: r.x, y: r.y, width: r.width, height: r.height}; })")
    return max(boxes, key=lambda b: b["width"])


def _box(page, selector: str) -> dict:
    box = page.locator(selector).first.bounding_box()
    assert box is not None, selector
    return box


@needs_plotly
def test_report_is_interactive_in_headless_chromium(report_dir, result):
    sync_api = _skip_without_browser()
    with sync_api.sync_playwright() as pw:
        browser = _browser(pw)
        page, fetched, errors = _open(browser, report_dir / "report.html")
        rows = page.locator("#summary-table tbody tr")
        texts = rows.all_inner_texts()
        assert f"iteration time\t{result.iteration_time_s:.4f} s" in texts
        assert any(t.startswith(f"pace set by\tdevice {result.critical_path['device']} "
                                "(node ") for t in texts)
        for fig_id, _ in FIGURES.values():  # every figure drawn by plotly.js
            page.wait_for_selector(f"#{fig_id} .main-svg", timeout=30_000)
        comm = page.locator("#comm-table tbody tr").all_inner_texts()
        assert [r.split("\t")[0] for r in comm] == [c for c, _ in result.comm_bytes]
        lanes = timeline_lanes(result.plan, result.trace)
        ticks = _texts(page, "#fig-timeline .yaxislayer-above .ytick text")
        assert ticks == [lane.label for lane in lanes]
        # hover over the widest bar: a label with its task, micro-batch and times
        page.locator("#fig-timeline").scroll_into_view_if_needed()
        bar = _widest(page, "#fig-timeline .bars .point path")
        page.mouse.move(bar["x"] + bar["width"] / 2, bar["y"] + bar["height"] / 2, steps=5)
        hover = page.wait_for_selector("#fig-timeline .hoverlayer .hovertext", timeout=10_000)
        assert re.search(r"micro-batch .+ s to .+ s: ", hover.text_content())
        # the legend lies above the plotting area: it hides no bar, the iteration's end
        # included
        area = _box(page, "#fig-timeline .nsewdrag")
        legend = _box(page, "#fig-timeline .legend")
        assert legend["y"] + legend["height"] <= area["y"] + 1
        # drag across the plotting area: the time axis zooms in; a double-click resets it
        def x_range():
            return page.evaluate("document.getElementById('fig-timeline')"
                                 "._fullLayout.xaxis.range.slice()")

        full = x_range()
        y = area["y"] + area["height"] / 2
        page.mouse.move(area["x"] + area["width"] * 0.3, y)
        page.mouse.down()
        page.mouse.move(area["x"] + area["width"] * 0.5, y, steps=8)
        page.mouse.up()
        page.wait_for_function("r => document.getElementById('fig-timeline')"
                               "._fullLayout.xaxis.range[1] < r", arg=full[1] * 0.9)
        zoomed = x_range()
        assert full[0] < zoomed[0] < zoomed[1] < full[1]
        assert zoomed[1] - zoomed[0] < (full[1] - full[0]) / 3
        page.mouse.dblclick(area["x"] + area["width"] * 0.4, y)
        page.wait_for_function("r => document.getElementById('fig-timeline')"
                               "._fullLayout.xaxis.range[1] >= r", arg=full[1] * 0.999)
        # the memory plot shows every category's GB at the hovered time
        page.locator("#fig-memory").scroll_into_view_if_needed()
        mem = _box(page, "#fig-memory .nsewdrag")
        page.mouse.move(mem["x"] + mem["width"] * 0.5, mem["y"] + mem["height"] * 0.5,
                        steps=5)
        hover = page.wait_for_selector("#fig-memory .hoverlayer .legend", state="attached",
                                       timeout=10_000)
        shown = hover.text_content()
        assert "activations: " in shown and " GB" in shown
        assert fetched == [] and errors == []  # offline: nothing was fetched, no JS error
        browser.close()


@needs_plotly
def test_a_64_rank_report_shows_8_lanes_in_chromium(wide, tmp_path):
    sync_api = _skip_without_browser()
    write_report(wide, tmp_path / "r")
    with sync_api.sync_playwright() as pw:
        browser = _browser(pw)
        page, fetched, errors = _open(browser, tmp_path / "r" / "report.html")
        page.wait_for_selector("#fig-timeline .main-svg", timeout=30_000)
        ticks = _texts(page, "#fig-timeline .yaxislayer-above .ytick text")
        assert len(ticks) == 8 and ticks[0] == "stage 0 · compute"
        area = _box(page, "#fig-timeline .nsewdrag")
        legend = _box(page, "#fig-timeline .legend")
        assert legend["y"] + legend["height"] <= area["y"] + 1
        assert fetched == [] and errors == []
        browser.close()


_PHASES = {"X", "C", "M", "s", "f"}


def _check_trace_event_format(events):
    """The Trace Event Format's required fields per phase."""
    for e in events:
        assert e["ph"] in _PHASES and isinstance(e["name"], str) and "pid" in e
        if e["ph"] in "XCsf":
            assert isinstance(e["ts"], float) and e["ts"] >= 0
        if e["ph"] == "X":
            assert e["dur"] >= 0 and "tid" in e
        if e["ph"] == "C":
            assert e["args"] and all(isinstance(v, float) for v in e["args"].values())
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    ends = {e["id"]: e for e in events if e["ph"] == "f"}
    assert starts.keys() == ends.keys()
    assert all(ends[i]["ts"] >= starts[i]["ts"] and ends[i]["bp"] == "e" for i in starts)


def test_trace_has_tp_slices_memory_counters_and_flows(result):
    trace = json.loads(json.dumps(chrome_trace(result)))  # JSON round trip
    events = trace["traceEvents"]
    _check_trace_event_format(events)
    plan = result.plan
    # one tp slice per compute task with critical-path TP collectives, inside its task
    tp_tasks = [t for t in plan.tasks if t.stream == "compute" and t.comm_s > 0]
    tp = [e for e in events if e.get("cat") == "tp_comm"]
    assert tp_tasks and len(tp) == len(tp_tasks)
    for task, e in zip(tp_tasks, tp):
        assert e["dur"] == pytest.approx(task.comm_s * 1e6) and e["dur"] <= \
            task.duration_s * 1e6
        assert e["ts"] == pytest.approx(result.trace.start[task.tid] * 1e6)
    tp_tid = {(e["pid"], e["args"]["name"]) for e in events if e["name"] == "thread_name"}
    assert all((d, TP_THREAD) in tp_tid for d in plan.devices)
    # a memory counter track per device whose peak is the device's allocation peak
    for device in plan.devices:
        counts = [sum(e["args"].values()) for e in events
                  if e["ph"] == "C" and e["pid"] == device]
        _, states = memory_timeline(plan, result.trace, device)
        assert max(counts) == pytest.approx(max(sum(s.values()) for s in states) / 1e9,
                                            abs=1e-5)
    peak = max(sum(e["args"].values()) for e in events if e["ph"] == "C")
    assert peak == pytest.approx(result.memory.peak_bytes / 1e9, abs=1e-5)
    # a flow arrow from each pipeline send to the next stage's compute task
    sends = [t for t in plan.tasks if t.name in ("send_fwd", "send_bwd")]
    flows = [e for e in events if e["ph"] == "s"]
    assert len(flows) == len(sends) > 0
    arrivals = {(e["pid"], e["ts"]) for e in events if e["ph"] == "f"}
    computes = {(t.device, result.trace.start[t.tid] * 1e6) for t in plan.tasks
                if t.stream == "compute"}
    assert arrivals <= computes
