"""simulate() against closed forms: one device = sum of its roofline times; pipeline bubble
(p-1)/(m+p-1); data-parallel weak scaling loses only the exposed gradient reduction; the
breakdown adds up; runs reproduce; full fidelity agrees with representative devices;
ZeRO model states; the CONTRACT section 3 keys."""

from __future__ import annotations

from typing import Any

import pytest

from simulator.config.hardware import load_profile
from simulator.config.scenario import parse_scenario
from simulator.cost import compute_time_s
from simulator.lower.costs import CostModel
from simulator.lower.state import optimizer_spec
from simulator.program.model_program import transformer_program
from simulator.program.program import compute_ops
from simulator.report import summary
from simulator.report.chrome import chrome_trace
from simulator.simulation.simulate import simulate


@pytest.fixture(scope="module")
def a100():
    return load_profile("a100-80gb")


def _scenario(tensor: int = 1, data: int = 1, pipeline: int = 1, micro: int = 1,
              devices_per_node: int = 8, mbs: int = 1, **parallel: Any):
    devices = tensor * data * pipeline
    return parse_scenario({
        "name": "sim", "hardware": "a100-80gb",
        "cluster": {"nodes": max(1, devices // devices_per_node),
                    "devices_per_node": min(devices, devices_per_node)},
        "model": {"type": "transformer", "layers": 8, "hidden_size": 1024, "num_heads": 16,
                  "seq_length": 1024, "vocab_size": 8192, "dtype": "bf16"},
        "training": {"global_batch_size": micro * data * mbs, "micro_batch_size": mbs},
        "parallel": {"tensor": tensor, "data": data, "pipeline": pipeline, **parallel},
    }, "test")


def _layer_only_costs(sc, dp_bytes_per_s: float = 0.0) -> CostModel:
    """1 ms per layer kernel, nothing else costs time (uniform stages, free pipeline
    communication); data-parallel collectives take bytes / dp_bytes_per_s."""
    prog = transformer_program(sc)
    layer = prog.block("layer")
    names = {op.name for op in layer.fwd + layer.bwd + layer.recompute}

    def collective(coll: str, nbytes: float, group) -> float:
        if group.stride == sc.parallel.tensor and dp_bytes_per_s:  # the dp axis
            return nbytes / dp_bytes_per_s
        return 0.0

    return CostModel(compute_s=lambda spec: 1e-3 if spec.name in names else 0.0,
                     collective_s=collective, send_recv_s=lambda nbytes, intra: 0.0)


def test_one_device_iteration_is_the_sum_of_its_roofline_times(a100):
    sc = _scenario(micro=3)
    prog = transformer_program(sc)
    layer, embed, head = (prog.block(n) for n in ("layer", "embed", "head"))
    per_micro = sum(compute_time_s(op, a100) for op in compute_ops(
        embed.fwd + head.fwd + head.bwd + embed.bwd)) + 8 * sum(
        compute_time_s(op, a100) for op in compute_ops(layer.fwd + layer.bwd))
    params = 8 * prog.block("layer").params + prog.block("embed").params + prog.block("head").params
    opt = compute_time_s(optimizer_spec(params, "bf16", "adam", 0, 1), a100)
    result = simulate(sc, a100)
    assert result.iteration_time_s == pytest.approx(3 * per_micro + opt, rel=1e-9)
    assert dict(result.breakdown_s)["bubble"] == 0.0


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("p,m", [(2, 1), (2, 4), (4, 4), (4, 8), (8, 3)])
def test_bubble_fraction_is_p_minus_1_over_m_plus_p_minus_1(a100, schedule: str, p: int,
                                                           m: int):
    sc = _scenario(pipeline=p, micro=m, schedule=schedule)
    result = simulate(sc, a100, costs=_layer_only_costs(sc))
    prog, layers = result.program, 8 // p
    t_f = layers * len(compute_ops(prog.block("layer").fwd)) * 1e-3  # 1 ms per layer kernel
    t_b = layers * len(compute_ops(prog.block("layer").bwd)) * 1e-3
    assert result.iteration_time_s == pytest.approx((m + p - 1) * (t_f + t_b))
    bubble = dict(result.breakdown_s)["bubble"]
    assert bubble / result.iteration_time_s == pytest.approx((p - 1) / (m + p - 1))


def test_recompute_adds_a_forward_per_micro_batch(a100):
    sc = _scenario(pipeline=2, micro=4, recompute="full")
    result = simulate(sc, a100, costs=_layer_only_costs(sc))
    parts = dict(result.breakdown_s)
    assert parts["recompute"] == pytest.approx(4 * 4 * 13e-3)  # 13 forward kernels a layer
    assert parts["bubble"] / result.iteration_time_s == pytest.approx(1 / 5)


@pytest.mark.parametrize("overlap", [True, False])
def test_data_parallel_weak_scaling_loses_only_the_exposed_reduction(a100, overlap: bool):
    one = _scenario(micro=4, overlap={"grad_reduce": overlap})
    eight = _scenario(data=8, micro=4, overlap={"grad_reduce": overlap})
    r1 = simulate(one, a100, costs=_layer_only_costs(one, 50e9))
    r8 = simulate(eight, a100, costs=_layer_only_costs(eight, 50e9))
    p1, p8 = dict(r1.breakdown_s), dict(r8.breakdown_s)
    assert p8["compute"] == pytest.approx(p1["compute"])
    assert p1["comm_exposed"] == 0.0
    assert r8.iteration_time_s - r1.iteration_time_s == pytest.approx(p8["comm_exposed"])
    grads = 2 * r8.plan.static_memory[0][1][1] / 2  # gradient bytes (bf16)
    reduce_s = grads / 50e9
    if overlap:
        assert 0.0 < p8["comm_exposed"] < reduce_s
    else:
        assert p8["comm_exposed"] == pytest.approx(reduce_s)


CASES = [
    {"tensor": 2, "data": 2, "pipeline": 2, "micro": 4},
    {"tensor": 2, "pipeline": 4, "micro": 8, "recompute": "full", "sequence_parallel": True},
    {"data": 4, "pipeline": 2, "micro": 4, "schedule": "interleaved_1f1b",
     "virtual_stages": 2, "optimizer_shard": 1},
    {"data": 4, "pipeline": 2, "micro": 2, "optimizer_shard": 3, "recompute": "selective"},
    {"data": 4, "micro": 2, "mbs": 2, "tensor": 2, "optimizer_shard": 2,
     "overlap": {"grad_reduce": False, "copies": 2}},
    {"tensor": 2, "data": 4, "pipeline": 2, "micro": 4, "devices_per_node": 4,
     "schedule": "gpipe"},
]


@pytest.mark.parametrize("case", CASES)
def test_breakdown_adds_up_to_the_iteration_time(a100, case: dict):
    result = simulate(_scenario(**case), a100)
    total = sum(v for _, v in result.breakdown_s)
    assert total == pytest.approx(result.iteration_time_s, rel=1e-2)
    assert all(v >= -1e-12 for _, v in result.breakdown_s)


@pytest.mark.parametrize("case", CASES[:4])
def test_full_fidelity_agrees_with_representative_devices(a100, case: dict):
    sc = _scenario(**case)
    rep, full = simulate(sc, a100), simulate(sc, a100, fidelity="full")
    assert len(full.plan.devices) == sc.devices > len(rep.plan.devices)
    assert full.iteration_time_s == pytest.approx(rep.iteration_time_s, rel=1e-12)
    assert dict(full.breakdown_s) == pytest.approx(dict(rep.breakdown_s), rel=1e-9, abs=1e-12)
    assert full.memory.peak_bytes == pytest.approx(rep.memory.peak_bytes)
    assert dict(full.comm_bytes) == pytest.approx(dict(rep.comm_bytes))


def test_same_scenario_twice_gives_the_identical_trace(a100):
    sc = _scenario(**CASES[2])
    first, second = simulate(sc, a100), simulate(sc, a100)
    assert first.trace == second.trace
    assert first.plan == second.plan
    assert chrome_trace(first) == chrome_trace(second)


@pytest.mark.parametrize("shard", [0, 1, 2, 3])
def test_every_task_stream_has_a_trace_thread(a100, shard: int):
    """ZeRO-3 reduce-scatters on their own stream ('dp_reduce'); the Chrome trace must have a
    thread for it (it raised KeyError on every FSDP scenario's report)."""
    result = simulate(_scenario(data=4, micro=2, optimizer_shard=shard), a100)
    trace = chrome_trace(result)
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in trace["traceEvents"]
             if e.get("ph") == "M" and e.get("name") == "thread_name"}
    used = {t.stream for t in result.plan.tasks}
    assert used <= set(names.values())
    assert ("dp_reduce" in used) == (shard == 3)


@pytest.mark.parametrize("shard,per_param", [(0, 16.0), (1, 4 + 12 / 4), (2, 2 + 14 / 4),
                                             (3, 16 / 4)])
def test_zero_model_states_in_the_memory_timeline(a100, shard: int, per_param: float):
    sc = _scenario(data=4, micro=2, optimizer_shard=shard)
    result = simulate(sc, a100)
    prog = result.program
    psi = 8 * prog.block("layer").params + prog.block("embed").params + prog.block("head").params
    static = dict(result.plan.static_memory[0])
    model_states = ("parameters", "gradients", "optimizer_states")
    assert sum(static[c] for c in model_states) == pytest.approx(per_param * psi)
    cats = dict(result.memory.by_category)
    states = cats["parameters"] + cats["gradients"] + cats["optimizer_states"]
    # at the peak ZeRO-3 also holds the gathered units: two at most (prefetch depth one)
    unit = 2 * max(b.params for b in prog.blocks)
    extra = 2 * unit if shard == 3 else 0.0
    assert per_param * psi <= states + 1e-6 <= per_param * psi + extra + 1e-6


def test_activation_peak_of_1f1b_holds_p_micro_batches_on_the_first_stage(a100):
    sc = _scenario(pipeline=4, micro=8)
    result = simulate(sc, a100, costs=_layer_only_costs(sc))
    prog = result.program
    first_stage = 2 * prog.block("layer").saved_bytes + prog.block("embed").saved_bytes
    assert result.memory.device == 0
    assert dict(result.memory.by_category)["activations"] == pytest.approx(4 * first_stage)


def test_summary_has_exactly_the_contract_keys(a100):
    s = summary(simulate(_scenario(tensor=2, data=2, micro=2), a100))
    # the CONTRACT section 3 keys in order, then the extensions: layers per pipeline stage,
    # the device that set the pace, notes on the inputs (and `jitter` under cluster.jitter)
    assert list(s) == ["scenario", "devices", "iteration_time_s", "samples_per_s",
                       "tokens_per_s", "model_flops_per_iteration", "tflops_per_device",
                       "mfu", "hfu", "breakdown_s", "memory", "communication", "simulation",
                       "config", "pipeline_layers", "critical_path", "notes", "uncertainty"]
    assert s["pipeline_layers"] == [8]
    assert list(s["breakdown_s"]) == ["compute", "recompute", "comm_exposed", "bubble",
                                      "offload_exposed", "optimizer", "nvme_exposed"]
    assert list(s["memory"]) == ["peak_bytes", "capacity_bytes", "fits", "headroom_bytes",
                                 "allocated_peak_bytes", "framework_overhead_bytes",
                                 "reserved_peak_bytes", "reserved_model", "host_peak_bytes",
                                 "host_capacity_bytes", "nvme_peak_bytes",
                                 "nvme_capacity_bytes", "by_category_bytes"]
    assert list(s["memory"]["by_category_bytes"]) == [
        "parameters", "gradients", "optimizer_states", "activations", "communication_buffers",
        "framework_overhead"]
    assert list(s["communication"]) == ["bytes_per_device", "by_collective"]
    assert list(s["simulation"]) == ["events", "wall_s"]
    assert s["devices"] == 4 and s["memory"]["fits"] is True
    assert 0 < s["mfu"] <= s["hfu"] < 1
    assert set(s["communication"]["by_collective"]) == {"all_reduce"}


def test_optimizer_offload_moves_states_to_the_host_and_exposes_the_copies(a100):
    sc = _scenario(data=2, micro=2, offload={"optimizer_states": True})
    result = simulate(sc, a100)
    parts = dict(result.breakdown_s)
    grads = dict(result.plan.static_memory[0])["gradients"]
    assert parts["offload_exposed"] == pytest.approx(2 * grads / a100.pcie_bandwidth_bytes_per_s)
    assert parts["optimizer"] > 0.0  # the host CPU's step (tests/test_offload.py)
    assert dict(result.memory.by_category)["optimizer_states"] == 0.0
    assert sum(parts.values()) == pytest.approx(result.iteration_time_s)


def test_activation_offload_with_recompute_is_refused_with_the_key(a100):
    from simulator.errors import InputError

    with pytest.raises(InputError, match="parallel.offload.activations"):
        simulate(_scenario(recompute="full", offload={"activations": True}), a100)
