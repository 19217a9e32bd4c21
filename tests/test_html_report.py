"""report.html opens offline in a real browser with its summary table and every figure;
trace.json is valid Trace Event Format with tensor-parallel slices, memory counter tracks
and pipeline flow arrows."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from simulator.config.hardware import load_profile
from simulator.config.scenario import parse_scenario
from simulator.report import write_report
from simulator.report.chrome import TP_THREAD, chrome_trace
from simulator.report.html import FIGURES
from simulator.report.metrics import memory_timeline
from simulator.simulation.simulate import simulate

CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser",
                                               "google-chrome")) if p), None)


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


def test_report_html_is_self_contained(report_dir):
    page = (report_dir / "report.html").read_text()
    assert "<script" not in page and "<link" not in page
    assert not re.search(r"""(src|href)=["'](?!data:)""", page)  # nothing fetched
    assert page.count('src="data:image/png;base64,') == len(FIGURES)
    assert "html &lt;report&gt;" in page  # names are escaped


def test_report_opens_in_headless_chromium(report_dir, result):
    if CHROMIUM is None:
        pytest.skip("no Chromium executable (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                     args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page()
        page.route("**/*", lambda route: route.abort() if not route.request.url.startswith(
            ("file:", "data:")) else route.continue_())  # offline: any fetch would fail
        page.goto((report_dir / "report.html").as_uri())
        rows = page.locator("#summary-table tbody tr")
        assert rows.count() == 10  # the summary, with the device that set the pace
        assert rows.nth(8).inner_text().startswith(
            f"pace set by\tdevice {result.critical_path['device']} (node ")
        assert rows.nth(2).inner_text().split("\t")[1] == \
            f"{result.iteration_time_s:.4f} s"
        for fig_id, _ in FIGURES.values():
            width = page.eval_on_selector(f"#{fig_id}", "img => img.naturalWidth")
            assert width > 0, fig_id  # the inlined PNG decoded
        comm = page.locator("#comm-table tbody tr").all_inner_texts()
        assert [r.split("\t")[0] for r in comm] == [c for c, _ in result.comm_bytes]
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
