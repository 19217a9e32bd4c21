"""Offloading parameters and activations to the host (simulator/lower/offload.py): bytes
per step in closed form, the exposed copy time out of the event engine against its closed
form in the two simple regimes, and the direction of every effect (device memory down,
host-link bytes up, time up when the copies cannot hide)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from simulator.api import load_scenario
from simulator.api import simulate as api_simulate
from simulator.config.hardware import load_profile
from simulator.config.scenario import parse_scenario
from simulator.errors import InputError
from simulator.lower.costs import CostModel
from simulator.lower.host import HOST_SOCKETS, host_optimizer_s
from simulator.program.model_program import transformer_program
from simulator.simulation.simulate import simulate

LAYERS = 4


@pytest.fixture(scope="module")
def a100():
    return load_profile("a100-80gb")


def _scenario(micro: int = 1, data: int = 1, **parallel: Any):
    return parse_scenario({
        "name": "offload", "hardware": "a100-80gb",
        "cluster": {"nodes": 1, "devices_per_node": data},
        "model": {"type": "transformer", "layers": LAYERS, "hidden_size": 1024,
                  "num_heads": 16, "seq_length": 1024, "vocab_size": 8192, "dtype": "bf16"},
        "training": {"global_batch_size": micro * data, "micro_batch_size": 1},
        "parallel": {"data": data, "tensor": 1, "pipeline": 1, **parallel},
    }, "test")


def _offload(acts: bool = False, params: bool = False, states: bool = False) -> dict:
    return {"offload": {"activations": acts, "parameters": params,
                        "optimizer_states": states}}


def _layer_costs(sc, copy_bytes_per_s: float) -> CostModel:
    """1 ms per layer kernel, nothing else costs compute time; host copies at the given
    bandwidth."""
    prog = transformer_program(sc)
    names = {op.name for op in prog.block("layer").fwd + prog.block("layer").bwd}
    return CostModel(compute_s=lambda spec: 1e-3 if spec.name in names else 0.0,
                     collective_s=lambda coll, nbytes, group: 0.0,
                     send_recv_s=lambda nbytes, intra: 0.0,
                     copy_s=lambda nbytes: nbytes / copy_bytes_per_s)


def _layer_seconds(result) -> tuple[float, float]:
    """(forward, backward) seconds of one layer, read off a plan without offload (one task
    per pass of the L layers)."""
    fwd = {t.duration_s for t in result.plan.tasks if t.name == "F" and t.duration_s > 0}
    bwd = {t.duration_s for t in result.plan.tasks if t.name == "B" and t.duration_s > 0}
    assert len(fwd) == len(bwd) == 1
    return fwd.pop() / LAYERS, bwd.pop() / LAYERS


def _copied(result) -> dict:
    return dict(result.plan.extras)["offload_bytes_per_device"]


@pytest.mark.parametrize("micro", [1, 3])
def test_activation_offload_moves_each_layers_saved_bytes_down_and_up_once(a100, micro):
    result = simulate(_scenario(micro=micro, **_offload(acts=True)), a100)
    a = result.program.block("layer").saved_bytes
    assert _copied(result) == {"d2h": round(micro * LAYERS * a),
                               "h2d": round(micro * LAYERS * a)}


@pytest.mark.parametrize("micro", [1, 2])
def test_parameter_offload_fetches_every_piece_twice_per_micro_batch(a100, micro):
    result = simulate(_scenario(micro=micro, **_offload(params=True)), a100)
    prog = result.program  # one device holds every parameter (the LM head tied), in bf16
    p_bytes = 2 * (LAYERS * prog.block("layer").params + prog.block("embed").params
                   + prog.block("head").params)
    # H2D: forward and backward of every micro-batch; D2H: the updated parameters once
    assert _copied(result) == {"h2d": round(2 * micro * p_bytes), "d2h": round(p_bytes)}
    with_host_optimizer = simulate(_scenario(micro=micro, **_offload(params=True, states=True)),
                                   a100)
    grads = dict(with_host_optimizer.plan.static_memory[0])["gradients"]
    # ZeRO-Offload's gradients go down; the host keeps the updated parameters
    assert grads == p_bytes
    assert _copied(with_host_optimizer) == {"h2d": round(2 * micro * p_bytes),
                                            "d2h": round(grads)}


def test_compute_bound_copies_expose_only_the_last_layers_round_trip():
    """Copy c <= forward f and backward b of a layer: every D2H hides under the next layer's
    forward and every H2D under the previous layer's backward, but the last layer's
    activations go down and up between its forward and its backward: T = L (f + b) + 2 c."""
    sc = _scenario(**_offload(acts=True))
    hw = load_profile("a100-80gb")
    plain = simulate(_scenario(), hw, costs=_layer_costs(sc, 1e12))
    a = plain.program.block("layer").saved_bytes
    f, b = _layer_seconds(plain)
    c = min(f, b) / 2
    result = simulate(sc, hw, costs=_layer_costs(sc, a / c))
    assert plain.iteration_time_s == pytest.approx(LAYERS * (f + b))
    assert result.iteration_time_s == pytest.approx(LAYERS * (f + b) + 2 * c)
    assert dict(result.breakdown_s)["offload_exposed"] == pytest.approx(2 * c)


def test_bandwidth_bound_copies_set_the_pace():
    """Copy c >= f and b: the copies run back to back, D2H of every layer and then H2D of
    every layer, with only the first forward and the last backward outside them:
    T = f + 2 L c + b."""
    sc = _scenario(**_offload(acts=True))
    hw = load_profile("a100-80gb")
    plain = simulate(_scenario(), hw, costs=_layer_costs(sc, 1e12))
    a = plain.program.block("layer").saved_bytes
    f, b = _layer_seconds(plain)
    c = 3 * max(f, b)
    result = simulate(sc, hw, costs=_layer_costs(sc, a / c))
    assert result.iteration_time_s == pytest.approx(f + 2 * LAYERS * c + b)


def test_activation_offload_keeps_two_layers_on_the_device():
    """Compute-bound: a layer's activations live from its forward until its D2H ends under
    the next layer's forward, so at most two layers' (plus the embedding's and head's)."""
    sc = _scenario(**_offload(acts=True))
    hw = load_profile("a100-80gb")
    plain = simulate(_scenario(), hw, costs=_layer_costs(sc, 1e12))
    prog = plain.program
    a, f_b = prog.block("layer").saved_bytes, _layer_seconds(plain)
    result = simulate(sc, hw, costs=_layer_costs(sc, a / (min(f_b) / 2)))
    keep = prog.block("embed").saved_bytes + max(2 * a, a + prog.block("head").saved_bytes)
    full = prog.block("embed").saved_bytes + LAYERS * a + prog.block("head").saved_bytes
    assert dict(plain.memory.by_category)["activations"] == pytest.approx(full)
    assert dict(result.memory.by_category)["activations"] == pytest.approx(keep)


@pytest.mark.parametrize("what", ["acts", "params", "both"])
def test_offload_lowers_device_memory_and_costs_time_on_a100(a100, what):
    off = _offload(acts=what in ("acts", "both"), params=what in ("params", "both"))
    plain, moved = simulate(_scenario(micro=2), a100), simulate(_scenario(micro=2, **off), a100)
    assert moved.memory.peak_bytes < plain.memory.peak_bytes
    assert moved.iteration_time_s > plain.iteration_time_s
    exposed = dict(moved.breakdown_s)["offload_exposed"]
    assert exposed > 0 and sum(dict(moved.breakdown_s).values()) == pytest.approx(
        moved.iteration_time_s)
    if what != "acts":
        assert dict(moved.plan.static_memory[0])["parameters"] == 0.0


@pytest.mark.parametrize("parallel,message", [
    ({"recompute": "full", **_offload(acts=True)},
     "test: parallel.offload.activations: true with parallel.recompute full is not simulated "
     "yet (allowed: recompute none)"),
    ({"optimizer_shard": 1, **_offload(params=True)},
     "test: parallel.offload.parameters: true with parallel.optimizer_shard 1 is not "
     "simulated yet (allowed: optimizer_shard 0)"),
])
def test_combinations_not_modelled_are_refused_by_name(parallel, message):
    with pytest.raises(InputError) as err:
        _scenario(data=2, **parallel)
    assert str(err.value) == message


def test_host_optimizer_copies_wait_for_the_backward_without_data_parallel(a100):
    """ZeRO-Offload on one device: the gradient D2H starts after the backward, the host
    CPU runs the optimizer step on the P parameters (priced on the host profile, its socket
    shared by the node's devices: `lower.host`), then the updated parameters come up:
    T = compute + 2 P e / PCIe + host step (it used to start at time 0, and the host's
    step used to cost nothing)."""
    sc = _scenario(micro=2, **_offload(states=True))
    result = simulate(sc, a100)
    grads = dict(result.plan.static_memory[0])["gradients"]
    parts = dict(result.breakdown_s)
    sharing = max(1, sc.cluster.devices_per_node // HOST_SOCKETS)
    host = host_optimizer_s(result.program.params, result.program.dtype,
                            sc.training.optimizer) * sharing
    assert host > 0
    assert parts["offload_exposed"] == pytest.approx(2 * grads / a100.pcie_bandwidth_bytes_per_s)
    assert parts["optimizer"] == pytest.approx(host)
    assert result.iteration_time_s == pytest.approx(
        parts["compute"] + parts["offload_exposed"] + parts["optimizer"])


def test_optimizer_offload_is_not_free():
    """Moving the optimizer states to the host adds its copies and its CPU step: it is
    slower than the step on the device, never faster (issue 23: it was faster)."""
    for name in ("seed-a-weight-ops", "llama2-7b-8-ascend910b"):
        on, off = (api_simulate(load_scenario(name, [f"parallel.offload.optimizer_states={v}"]))
                   .iteration_time_s for v in ("true", "false"))
        assert on > off, name


def test_verify_passes_with_offload_and_says_what_it_checked(invoke_cli):
    result = invoke_cli("verify", "tiny-cpu", "--json", "--set", "parallel.offload.parameters=true",
                        "--set", "parallel.offload.activations=true")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["ok"] and report["tensors_checked"] > 0
    assert ("parallel.offload.parameters, activations: host copies leave the values unchanged; "
            "checked the tensors they move") in report["notes"][-1]


def test_the_planner_searches_only_what_runs_with_the_scenarios_offload():
    from simulator.planner.memory import Workload, estimate_memory
    from simulator.planner.space import enumerate_space

    sc = _scenario(data=8, **_offload(params=True, acts=True))
    space = enumerate_space(sc, 8)
    assert space and all(c.recompute == "none" and c.optimizer_shard == 0 for c in space)
    cfg = space[0]
    model = sc.model
    kept = estimate_memory(Workload(model, 8, "adam", False, 2), cfg)
    moved = estimate_memory(Workload(model, 8, "adam", False, 2, offload_parameters=True,
                                     offload_activations=True), cfg)
    # the floor stays a lower bound: the offloaded weights and activations count nothing
    states = kept.gradients + kept.optimizer_states
    assert kept.floor_bytes >= kept.parameters + states + kept.activations
    assert states <= moved.floor_bytes <= kept.floor_bytes - kept.parameters - kept.activations
