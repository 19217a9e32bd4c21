"""Host & device heterogeneous placement (simulator/lower/host.py): a graph operator with
`primitive_target: CPU` runs at the cpu-x86 profile's speed and pays the PCIe copies of its
inputs and outputs; its parameters (and their gradients and optimizer states) leave the
device; `verify` still passes (placement does not change the tensors), computing with the
rows that came up from the host and the gradient that went down, and fails when they are
lost or corrupted on the way."""

from __future__ import annotations

import json

import pytest
import yaml

from simulator.config.hardware import load_profile
from simulator.config.resources import resolve_yaml
from simulator.config.scenario import parse_scenario
from simulator.cost import compute_time_s
from simulator.lower.host import HOST_PROFILE, host_optimizer_s
from simulator.numeric.execution import Faults
from simulator.program.graph_program import graph_program
from simulator.simulation.simulate import simulate
from simulator.simulation.verify import verify_scenario

NAME = "hetero-embedding-cpu-8-a100"
E = 4  # fp32


def _scenario(target: str):
    doc = yaml.safe_load(resolve_yaml(NAME, "scenarios").read_text())
    doc["model"]["ops"][0]["attrs"] = {"primitive_target": target}
    # a stack without a host launch cost (framework profiles' `launch`), so kernel times add:
    # under eager PyTorch's 8 us per launch this small graph is launch-bound, and moving one
    # kernel to the host would change no sum
    doc["framework"] = "reference"
    return parse_scenario(doc, "test")


@pytest.fixture(scope="module")
def runs():
    hw = load_profile("a100-80gb")
    return {t: simulate(_scenario(t), hw) for t in ("CPU", "GPU")}


def test_the_lookups_copies_are_its_ids_down_and_rows_up_and_the_rows_gradient_down():
    prog = graph_program(_scenario("CPU")).program
    ids, rows = 64 // 8 * 8, 64 // 8 * 8 * 16  # per device: 8 samples x 8 fields (x 16 wide)
    kernels = dict(prog.host_kernels)
    assert kernels["embedding"] == E * (ids + rows)
    assert kernels["embedding.bwd"] == E * rows  # the ids take no gradient
    assert graph_program(_scenario("GPU")).program.host_kernels == ()


def test_the_host_kernel_runs_at_the_cpu_profiles_speed_plus_its_copies(runs):
    a100, cpu = load_profile("a100-80gb"), load_profile(HOST_PROFILE)
    prog = graph_program(_scenario("CPU")).program
    specs = {s.name: s for s in prog.block("graph").fwd + prog.block("graph").bwd
             if hasattr(s, "flops")}
    kernels = dict(prog.host_kernels)
    moved = sum(compute_time_s(specs[n], cpu) - compute_time_s(specs[n], a100)
                + kernels[n] / a100.pcie_bandwidth_bytes_per_s
                for n in ("embedding", "embedding.bwd"))
    on_host, on_device = (dict(runs[t].breakdown_s)["compute"] for t in ("CPU", "GPU"))
    assert moved > 0
    assert on_host - on_device == pytest.approx(moved, rel=1e-9)


def test_the_table_and_its_states_leave_the_device(runs):
    table = 200_000 * 16
    host, device = (dict(runs[t].plan.static_memory[0]) for t in ("CPU", "GPU"))
    assert device["parameters"] - host["parameters"] == E * table
    assert device["gradients"] - host["gradients"] == E * table
    assert device["optimizer_states"] - host["optimizer_states"] == 2 * E * table  # Adam, fp32
    assert runs["CPU"].memory.peak_bytes < runs["GPU"].memory.peak_bytes


def test_verify_passes_with_the_lookup_on_the_host(invoke_cli):
    result = invoke_cli("verify", NAME, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["ok"] and report["tensors_checked"] > 0
    assert any("primitive_target" in note for note in report["notes"])


def test_verify_computes_with_what_crossed_the_host_link():
    """The rows come up (64 samples x 8 fields x 16 wide, fp32), their gradient goes down
    (the same bytes): 32768 bytes each way over the 8 ranks; the ids' trip down is not
    executed (their values are not changed by a copy that the mutations could reach)."""
    s = _scenario("CPU")
    good = verify_scenario(s)
    assert good.ok
    assert ("offload (host-placed operators): 32768 bytes went to the host and came back "
            "(all ranks, micro-batches run); the run continued with the copies") in good.notes
    for fault in ("drop", "corrupt"):
        bad = verify_scenario(s, Faults(offload_fault=fault))
        assert [c.tensor for c in bad.checks if not c.ok][:2] == ["emb", "x"]
    on_device = verify_scenario(_scenario("GPU"), Faults(offload_fault="drop"))
    assert on_device.ok  # nothing crosses the host link: nothing to lose


def test_the_hosts_optimizer_step_over_the_table_precedes_the_devices(runs):
    """Dense Adam over the 200k x 16 table on the host (cpu-x86 roofline), then the device's
    step over the MLP: the optimizer part is their sum."""
    result = runs["CPU"]
    host = host_optimizer_s(200_000 * 16, "fp32", "adam")
    device = next(t.duration_s for t in result.plan.tasks if t.name == "opt")
    assert host > 0 and dict(result.breakdown_s)["optimizer"] == pytest.approx(host + device)
    assert graph_program(_scenario("CPU")).program.host_params == 200_000 * 16
