"""The modelling choices made for accuracy, each pinned to its closed form or source."""

import pytest
import yaml

from simulator.cost.collectives import collective_time_s
from simulator.cost.specs import ComputeSpec, GroupSpec
from simulator.hardware import load_profile
from simulator.resources import resolve_yaml
from simulator.scenario import parse_scenario
from simulator.schedule.transformer import transformer_program, uses_flash
from simulator.simulate import simulate


def _case(name, overrides=()):
    path = resolve_yaml(name, "scenarios")
    return parse_scenario(yaml.safe_load(path.read_text()), str(path), list(overrides))


def _op(ops, name):
    return next(op for op in ops if getattr(op, "name", "") == name)


def test_attention_auto_follows_the_profiles_stack():
    s = _case("validation/r023-megatron-readme-table-gpt-1.7b-48g")
    assert uses_flash(s, load_profile("h100-sxm").software.fused_attention)
    assert not uses_flash(s, load_profile("a100-80gb").software.fused_attention)
    forced = _case("validation/r023-megatron-readme-table-gpt-1.7b-48g",
                   ["model.attention=standard"])
    assert not uses_flash(forced, True)


def test_fused_attention_keeps_model_flops_and_drops_the_score_matrix():
    """Same QK^T + PV FLOPs (MFU comparable); activations lose Korthikanti's 5as^2b term."""
    s = _case("validation/r023-megatron-readme-table-gpt-1.7b-48g")
    sw = load_profile("h100-sxm").software
    flash = transformer_program(s, sw)
    std = transformer_program(s, sw.model_copy(update={"fused_attention": False}))
    fa = _op(flash.layer_fwd, "flash_attention")
    assert fa.flops == _op(std.layer_fwd, "scores").flops + _op(std.layer_fwd, "context").flops
    a, sq, b = 16, 4096, 1
    five_as2b = 5 * a * sq * sq * b  # bytes: 2 (softmax, 16-bit) + 3 (dropout out + mask)
    assert std.activation_bytes_per_layer - flash.activation_bytes_per_layer == pytest.approx(
        five_as2b - 4 * a * sq * b, rel=1e-9)  # flash keeps the fp32 log-sum-exp per row


def test_unfused_stacks_add_micro_batch_gradients_into_fp32():
    s = _case("validation/r001-narayanan2021-t1-gpt-1.7b-32g")
    prog = transformer_program(s, load_profile("a100-80gb").software)
    add = _op(prog.layer_bwd, "main_grad_add")
    assert add.bytes_accessed == (2 + 4 + 4) * prog.params_per_layer  # fp16 in, fp32 in+out
    fused = transformer_program(s, load_profile("h100-sxm").software)
    assert not [op for op in fused.layer_bwd if getattr(op, "name", "") == "main_grad_add"]


def test_cross_entropy_bytes_follow_megatrons_fp32_passes():
    s = _case("validation/r023-megatron-readme-table-gpt-1.7b-48g")
    prog = transformer_program(s, load_profile("h100-sxm").software)
    logits = 4096 * 131072
    assert _op(prog.head_fwd, "cross_entropy").bytes_accessed == (2 + 36) * logits
    assert _op(prog.head_bwd, "cross_entropy.bwd").bytes_accessed == (12 + 2) * logits
    assert isinstance(_op(prog.head_fwd, "cross_entropy"), ComputeSpec)


def test_parameter_gather_overlaps_the_next_forward():
    s = _case("validation/r026-megatron-readme-table-gpt-32b-384g")
    hw = load_profile(s.hardware)
    overlapped = simulate(s, hw)
    exposed = simulate(_case("validation/r026-megatron-readme-table-gpt-32b-384g",
                             ["parallel.overlap.param_gather=false"]), hw)
    gather = [t for t in exposed.plan.tasks if t.name == "param_gather"][0]
    assert exposed.iteration_time_s - overlapped.iteration_time_s == pytest.approx(
        gather.duration_s, rel=0.01)


def test_a100_node_collectives_follow_the_measured_curve():
    """nccl-tests on 8 x A100: 64 MiB all_reduce in 684.6 us (validation/nccl_allreduce)."""
    hw = load_profile("a100-80gb")
    t = collective_time_s("all_reduce", 67108864.0, GroupSpec(8, 1, 8), hw)
    assert t == pytest.approx(684.6e-6, rel=0.01)


def test_cross_node_rings_take_ll128_when_latency_dominates():
    """48 nodes, 25 MB bucket: 47 hops at NCCL's LL128 latency (4 of Simple's 14 us) with
    120/128 of the bandwidth beat the Simple protocol."""
    from simulator.cost.collectives import _ring_link, collective_cost

    hw = load_profile("h100-sxm")
    group = GroupSpec(48, 8, 8)
    bw, alpha = _ring_link(group, hw)
    algorithm, auto = collective_cost("reduce_scatter", 25e6, group, hw)
    simple = collective_time_s("reduce_scatter", 25e6, group, hw, "ring")
    ll128 = 47 / 48 * 25e6 / (bw * 120 / 128) + 47 * alpha * 4 / 14
    assert algorithm == "ring"
    assert auto == pytest.approx(ll128, rel=1e-12)
    assert simple == pytest.approx(47 / 48 * 25e6 / bw + 47 * alpha, rel=1e-12)
    assert auto < simple
