"""Report files: what write_report writes, the Chrome trace layout, the text table."""

from __future__ import annotations

import json

import pytest

from simulator.config.hardware import load_profile
from simulator.config.scenario import parse_scenario
from simulator.report import format_table, summary, write_report
from simulator.simulation.simulate import simulate


@pytest.fixture(scope="module")
def small_result():
    sc = parse_scenario({
        "name": "report", "hardware": "a100-80gb",
        "cluster": {"nodes": 1, "devices_per_node": 8},
        "model": {"type": "transformer", "layers": 4, "hidden_size": 512, "num_heads": 8,
                  "seq_length": 512, "vocab_size": 4096},
        "training": {"global_batch_size": 8, "micro_batch_size": 1},
        "parallel": {"tensor": 2, "data": 2, "pipeline": 2},
    }, "test")
    return simulate(sc, load_profile("a100-80gb"))


def test_write_report_writes_the_seven_files(small_result, tmp_path):
    paths = write_report(small_result, tmp_path / "out")
    assert sorted(p.name for p in paths) == sorted(
        ["summary.csv", "summary.md", "trace.json", "timeline.png", "breakdown.png",
         "memory.png", "report.html"])
    assert all(p.stat().st_size > 0 for p in paths)
    csv = (tmp_path / "out" / "summary.csv").read_text().splitlines()
    assert "iteration_time_s" in csv[0] and "memory.by_category_bytes.activations" in csv[0]
    assert (tmp_path / "out" / "timeline.png").read_bytes()[:4] == b"\x89PNG"


def test_trace_has_one_process_per_device_and_one_thread_per_stream(small_result, tmp_path):
    write_report(small_result, tmp_path)
    events = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    spans = [e for e in events if e["ph"] == "X" and e["cat"] != "tp_comm"]
    assert len(spans) == len(small_result.plan.tasks)
    assert {e["pid"] for e in spans} == set(small_result.plan.devices)
    names = {(e["pid"], e["args"]["name"]) for e in events if e["name"] == "thread_name"}
    assert (0, "compute") in names and (0, "dp") in names
    last = max(e["ts"] + e["dur"] for e in spans)
    assert last == pytest.approx(small_result.iteration_time_s * 1e6)


def test_format_table_names_every_part(small_result):
    text = format_table(summary(small_result))
    for word in ("iteration time", "bubble", "comm_exposed", "memory peak", "activations",
                 "all_reduce", "events"):
        assert word in text
