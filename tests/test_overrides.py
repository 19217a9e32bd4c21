"""No silent overrides: every `--set hardware.FIELD=VALUE` either changes the result or gets a
note (on stderr and in the JSON `notes`); `shardsim profiles NAME` prints every field with
its source."""

from __future__ import annotations

import functools
import json

import pytest
from typer.testing import CliRunner

from simulator.cli import app
from simulator.config.hardware.load import load_profile
from simulator.config.hardware.usage import FIELD_USES, field_value, leaf_fields

FIELDS = list(leaf_fields())
# a small transformer across 2 nodes of 2 devices (tensor 2 inside, data 2 across)
BASE = ["cluster.nodes=2", "cluster.devices_per_node=2", "parallel.data=2", "parallel.tensor=2",
        "model.dtype=bf16"]
PROFILES = ("a100-80gb", "h100-sxm", "ascend-910b")
# values for fields that no bundled profile of PROFILES sets
ABSENT = {"intra_node.mesh_links": "2", "host.launch_cost_factor": "3.0",
          "peak_tflops.fp4": "9000.0",
          "efficiency.gemm_peak_fraction_fp4": "0.5", "inter_node.nodes_per_leaf": "1",
          **{f"efficiency.kernel_bandwidth_fractions.{k}": "0.05" for k in (
              "elementwise", "reduction", "norm", "softmax", "gather", "optimizer")},
          **{f"efficiency.attention_kernels.{k}.head_dim_half.{p}": "100.0"
             for k in ("fa1",) for p in ("fwd", "bwd")}}


@functools.cache
def _profile(name: str):
    return load_profile(name)


@functools.cache
def _profile_with(path: str) -> str:
    """The first of PROFILES that has a value for `path`."""
    for name in PROFILES:
        if field_value(_profile(name), path) is not None:
            return name
    return PROFILES[0]


def _other(path: str, value) -> str:
    """A valid value for `path` different from `value`, as --set text."""
    swaps = {"device_type": "npu", "intra_node.topology": "ring",
             "default_framework": "reference", "efficiency.gemm_tile_mn": "[64, 64]",
             "intra_node.allreduce_busbw_GBps": "null", "nccl.generation": "volta",
             "nccl.cpu_vendor": "intel", "inter_node.flow_sharing": "fair",
             "inter_node.oversubscription": "4.0", "inter_node.rail_optimized": "false",
             "inter_node.fat_tree": "[{nodes: 1, oversubscription: 2.0}]"}
    if path in swaps:
        return swaps[path]
    if value is None:
        return ABSENT[path]
    if isinstance(value, (bool, str)):
        return "renamed"
    if isinstance(value, int):
        return str(value + 1)
    return repr(value * 0.5)


def _field_notes(notes: list[str]) -> list[str]:
    """The notes on `hardware.` fields (not the one on the stack `hardware=` switched to:
    tests/test_run_config.py)."""
    return [n for n in notes if not n.startswith("--set hardware=")]


def _run(hardware: str, *sets: str) -> tuple[dict, str]:
    args = ["run", "tiny-cpu", "--json", "--set", f"hardware={hardware}"]
    for item in (*BASE, *sets):
        args += ["--set", item]
    res = CliRunner().invoke(app, args)
    assert res.exit_code in (0, 1), res.output
    return json.loads(res.stdout), res.stderr


@functools.cache
def _baseline(hardware: str) -> dict:
    return _run(hardware)[0]


def _results(doc: dict) -> dict:
    keep = ("iteration_time_s", "breakdown_s", "memory", "communication", "mfu", "hfu")
    return {k: doc[k] for k in keep}


def test_every_profile_field_is_known():
    assert set(FIELD_USES) == set(FIELDS)


@pytest.mark.parametrize("path", [f for f in FIELDS if f != "source"])
def test_no_override_is_silently_ignored(path):
    hardware = _profile_with(path)
    value = field_value(_profile(hardware), path)
    item = f"hardware.{path}={_other(path, value)}"
    base = _baseline(hardware)
    doc, err = _run(hardware, item)
    mine = [n for n in doc["notes"] if n.startswith(f"--set hardware.{path}")]
    changed = _results(doc) != _results(base)
    assert changed or any("changed nothing" in n for n in mine), (item, doc["notes"])
    if changed:  # a note never claims that an override which moved the result did nothing
        assert not any("changed nothing" in n for n in mine)
    assert all(f"note: {n}" in err for n in doc["notes"])


def test_measured_curve_shadows_the_intra_node_bandwidth_on_a100():
    # the example: tensor parallel inside one A100 node, all-reduce from the curve
    sets = ["hardware=a100-80gb", "parallel.data=1", "parallel.tensor=4"]
    args = ["run", "tiny-cpu", "--json"]
    for item in (*sets, "hardware.intra_node.bandwidth_GBps=450"):
        args += ["--set", item]
    res = CliRunner().invoke(app, args)
    notes = _field_notes(json.loads(res.stdout)["notes"])
    assert notes[0].startswith("--set hardware.intra_node.bandwidth_GBps: inside a node, "
                               "all_reduce / all_gather / reduce_scatter / broadcast take "
                               "their time from the measured intra_node.allreduce_busbw_GBps")
    assert notes[1] == ("--set hardware.intra_node.bandwidth_GBps=450 changed nothing: this "
                        "run does not read it; intra_node.bandwidth_GBps is for: collectives "
                        "and sends inside a node (cost.links)")
    assert f"note: {notes[1]}\n" in res.stderr


def test_an_override_to_the_same_value_says_so():
    doc, err = _run("a100-80gb", "hardware.memory_GB=85.9")
    assert _field_notes(doc["notes"]) == ["--set hardware.memory_GB=85.9 changed nothing: "
                                          "the profile has memory_GB=85.9 already"]


def test_an_override_that_matters_gets_no_note():
    doc, err = _run("a100-80gb", "hardware.memory_bandwidth_GBps=1000")
    assert _field_notes(doc["notes"]) == [] and err.count("note:") == len(doc["notes"]) == 1


def test_api_simulate_carries_the_same_notes():
    import simulator

    sc = simulator.load_scenario("tiny-cpu", ["hardware.host.pcie_bandwidth_GBps=10"])
    assert simulator.simulate(sc).notes == (
        "--set hardware.host.pcie_bandwidth_GBps=10 changed nothing: this run does not read "
        "it; host.pcie_bandwidth_GBps is for: host copies under offload.optimizer_states",)


def test_profiles_name_prints_every_field_with_its_source():
    res = CliRunner().invoke(app, ["profiles", "a100-80gb", "--json", "--set", "memory_GB=40"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    rows = {r["field"]: r for r in doc["fields"]}
    assert list(rows) == [f for f in FIELDS if f != "source"]
    assert rows["memory_GB"] == {"field": "memory_GB", "value": 40.0, "source": "--set",
                                 "used_for": FIELD_USES["memory_GB"], "note": ""}
    assert rows["memory_bandwidth_GBps"]["source"] == "hardware_profiles/a100-80gb.yaml"
    assert rows["efficiency.vector_peak_fraction"]["source"] == "default"
    assert rows["peak_tflops.fp8"]["value"] is None
    assert rows["intra_node.bandwidth_GBps"]["note"].startswith("inside a node")
    table = CliRunner().invoke(app, ["profiles", "h100-sxm"])
    assert table.exit_code == 0 and "intra_node.nvls.efficiency" in table.stdout


def test_profiles_name_errors():
    res = CliRunner().invoke(app, ["profiles", "a100-80gb", "--set", "memory_GB=-1"])
    assert res.exit_code == 2 and "memory_GB" in res.stderr and "Traceback" not in res.stderr
    res = CliRunner().invoke(app, ["profiles", "--set", "memory_GB=1"])
    assert res.exit_code == 2
    assert "error: --set: memory_GB=1: needs a profile NAME to override" in res.stderr
