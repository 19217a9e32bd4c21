"""The modelling choices made for accuracy, each pinned to its closed form or source."""

import pytest
import yaml

from simulator.config.hardware import load_profile
from simulator.config.resources import resolve_yaml
from simulator.config.scenario import parse_scenario
from simulator.cost.collectives import collective_time_s
from simulator.cost.specs import ComputeSpec, GroupSpec
from simulator.program.model_program import transformer_program, uses_flash
from simulator.simulation.simulate import simulate


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
    fa = _op(flash.block("layer").fwd, "flash_attention")
    std_fwd = std.block("layer").fwd
    assert fa.flops == _op(std_fwd, "scores").flops + _op(std_fwd, "context").flops
    a, sq, b = 16, 4096, 1
    five_as2b = 5 * a * sq * sq * b  # bytes: 2 (softmax, 16-bit) + 3 (dropout out + mask)
    assert std.block("layer").saved_bytes - flash.block("layer").saved_bytes == pytest.approx(
        five_as2b - 4 * a * sq * b, rel=1e-9)  # flash keeps the fp32 log-sum-exp per row


def test_unfused_stacks_add_micro_batch_gradients_into_fp32():
    s = _case("validation/r001-narayanan2021-t1-gpt-1.7b-32g")
    prog = transformer_program(s, load_profile("a100-80gb").software)
    add = _op(prog.block("layer").bwd, "main_grad_add")
    assert add.bytes_accessed == (2 + 4 + 4) * prog.block("layer").params  # fp16 in, fp32 in+out
    fused = transformer_program(s, load_profile("h100-sxm").software)
    assert not [op for op in fused.block("layer").bwd if getattr(op, "name", "") == "main_grad_add"]


def test_cross_entropy_bytes_follow_megatrons_fp32_passes():
    s = _case("validation/r023-megatron-readme-table-gpt-1.7b-48g")
    prog = transformer_program(s, load_profile("h100-sxm").software)
    logits = 4096 * 131072
    assert _op(prog.block("head").fwd, "cross_entropy").bytes_accessed == (2 + 36) * logits
    assert _op(prog.block("head").bwd, "cross_entropy.bwd").bytes_accessed == (12 + 2) * logits
    assert isinstance(_op(prog.block("head").fwd, "cross_entropy"), ComputeSpec)


def _gated_forward_exposure(result):
    """Closed form of the overlapped parameter all-gather: the buckets run back to back
    from t=0; forward piece k of the first micro-batch starts after piece k-1 and after
    the bucket it waits for. Returns (gather seconds, forward end - forward compute)."""
    tasks = result.plan.tasks
    ends, clock = {}, 0.0
    for t in tasks:
        if t.name == "param_gather" and t.device == 0:
            clock += t.duration_s
            ends[t.tid] = clock
    pieces = [t for t in tasks if t.name == "F" and t.micro == 0 and t.device == 0]
    assert len(pieces) > 1 and all(any(d in ends for d in t.deps) for t in pieces)
    end = 0.0
    for t in pieces:
        end = max([end] + [ends[d] for d in t.deps if d in ends]) + t.duration_s
    return clock, end - sum(t.duration_s for t in pieces)


@pytest.mark.parametrize("name, overrides", [
    # 48 ranks, one per node: the gather (292 ms) is far longer than the forward (62 ms)
    ("validation/r026-megatron-readme-table-gpt-32b-384g", []),
    # 8 ranks over NVLink: the gather hides under the forward except for the embedding table,
    # the first piece, which waits for its own buckets
    ("validation/r023-megatron-readme-table-gpt-1.7b-48g",
     ["cluster.nodes=1", "parallel.data=8", "training.global_batch_size=32"]),
])
def test_parameter_gather_gates_the_first_forward_bucket_by_bucket(name, overrides):
    """Megatron-Core --overlap-param-gather: the forward pre-hook of each module waits for
    the all-gather of the bucket holding its parameters, so only the gather time the first
    forward cannot cover is exposed; without overlap the whole gather follows the step."""
    s = _case(name, overrides)
    # the closed form below: the gathers beside the forward slow nothing (engine.core)
    hw = load_profile(s.hardware, ["efficiency.overlap_compute_slowdown=0"])
    overlapped = simulate(s, hw)
    serial = simulate(_case(name, overrides + ["parallel.overlap.param_gather=false"]), hw)
    gather_s, exposed_s = _gated_forward_exposure(overlapped)
    assert 0.0 < exposed_s < gather_s
    assert serial.iteration_time_s - overlapped.iteration_time_s == pytest.approx(
        gather_s - exposed_s, rel=1e-9)


def test_a100_node_collectives_follow_the_measured_curve():
    """nccl-tests on 8 x A100: 64 MiB all_reduce in 684.6 us (validation/nccl_allreduce)."""
    hw = load_profile("a100-80gb")
    t = collective_time_s("all_reduce", 67108864.0, GroupSpec(8, 1, 8), hw)
    assert t == pytest.approx(684.6e-6, rel=0.01)


def test_one_gpu_per_node_reduce_scatter_is_nccl_tuning_model():
    """48 nodes, one rank each, 25 MB bucket (NCCL tuning.cc v2.30.7): with one GPU per node
    every step is exposed, so the ring's network hops take the tree's NET latencies (Simple
    14 us after an 8.4 us base; LL128 8.5 us after 14 us, at 0.92 of the bandwidth); PAT
    (0.75 of the bandwidth, 8 us + log2(48) x 14/3.5 + 48 x 2.8 us) beats both."""
    from simulator.cost.collectives import _ring_link, collective_cost

    hw = load_profile("h100-sxm")
    group = GroupSpec(48, 8, 8)
    bw, _ = _ring_link(group, hw)
    simple = collective_time_s("reduce_scatter", 25e6, group, hw, "ring", protocol="simple")
    ll128 = collective_time_s("reduce_scatter", 25e6, group, hw, "ring", protocol="ll128")
    assert simple == pytest.approx(47 / 48 * 25e6 / bw + 8.4e-6 + 47 * 14e-6, rel=1e-12)
    assert ll128 == pytest.approx(47 / 48 * 25e6 / (0.92 * bw) + 14e-6 + 47 * 8.5e-6,
                                  rel=1e-12)
    pat = 47 / 48 * 25e6 / (0.75 * bw) + 8e-6 + 5 * 14e-6 / 3.5 + 48 * 2.8e-6
    assert collective_cost("reduce_scatter", 25e6, group, hw) == ("pat", pytest.approx(pat))
    assert pat < ll128 < simple


def _fixed_costs(gemm_s, comm_s):
    """Every GEMM takes gemm_s, every other kernel 1 us, every collective comm_s."""
    from simulator.lower.costs import CostModel

    return CostModel(compute_s=lambda spec: gemm_s if spec.kind == "gemm" else 1e-6,
                     collective_s=lambda coll, nbytes, group: comm_s,
                     send_recv_s=lambda nbytes, intra: 0.0)


@pytest.mark.parametrize("gemm_s,comm_s", [(4e-3, 1e-3), (1e-3, 4e-3)])
def test_tp_collectives_pipeline_against_their_gemm(gemm_s, comm_s):
    """Transformer Engine's default userbuffer methods: the all-gathers ring-exchange on
    the copy engines (one SM; exposed max(0, c - g)); the forward reduce-scatters are
    pipelined in 4 pieces on 16 SMs (exposed max(0, c - g) + min(c, g)/4)."""
    from simulator.lower.costs import price_ops

    s = _case("validation/r026-megatron-readme-table-gpt-32b-384g")
    sw = load_profile("h100-sxm").software
    prog = transformer_program(s, sw, 132)
    serial = transformer_program(s, sw.model_copy(update={"tp_comm_overlap": False}), 132)
    assert serial.tp_overlap is None
    tp = prog.tp_overlap
    assert (tp.chunks, tp.sm_fraction, tp.ring_sm_fraction, tp.rs_splits) == (
        8, 16 / 132, 1 / 132, 4)
    groups = {"tp": GroupSpec(8, 1, 8)}
    costs = _fixed_costs(gemm_s, comm_s)
    # sequence parallel: all-gather before qkv and fc1, reduce-scatter
    ops = prog.block("layer").fwd
    both = min(gemm_s, comm_s)  # after proj and fc2: each next to its GEMM
    over, base = price_ops(ops, costs, groups, tp), price_ops(ops, costs, groups)
    assert base.comm_s == pytest.approx(4 * comm_s)
    exposed = max(0.0, comm_s - gemm_s)
    assert over.comm_s == pytest.approx(2 * exposed + 2 * (exposed + both / 4))
    assert over.compute_s - base.compute_s == pytest.approx(
        2 * both * 1 / 131 + 2 * both * 16 / 116)
    # backward: the all-gathers before proj/fc2 dgrad ring-exchange too, the reduce-scatters
    # after the qkv/fc1 wgrad run in bulk on 16 SMs (nothing after the GEMM)
    bwd, bwd_base = price_ops(prog.block("layer").bwd, costs, groups, tp), price_ops(
        prog.block("layer").bwd, costs, groups)
    assert bwd.comm_s == pytest.approx(4 * exposed)
    assert bwd.compute_s - bwd_base.compute_s == pytest.approx(
        2 * both * 1 / 131 + 2 * both * 16 / 116)


def test_scenario_switches_tp_overlap_either_way():
    s = _case("validation/r026-megatron-readme-table-gpt-32b-384g",
              ["parallel.overlap.tp_comm=false"])
    assert transformer_program(s, load_profile("h100-sxm").software).tp_overlap is None
    s = _case("validation/r004-narayanan2021-t1-gpt-18.4b-256g",
              ["parallel.overlap.tp_comm=true"])
    assert transformer_program(s, load_profile("a100-80gb").software, 108).tp_overlap.chunks == 8
    hw = load_profile("h100-sxm")
    on = simulate(_case("validation/r026-megatron-readme-table-gpt-32b-384g"), hw)
    off = simulate(_case("validation/r026-megatron-readme-table-gpt-32b-384g",
                         ["parallel.overlap.tp_comm=false"]), hw)
    assert on.iteration_time_s < off.iteration_time_s


def test_megatron_keeps_bf16_gradients_in_fp32():
    """Buffer and data-parallel reduce-scatter at 4 bytes per gradient under bf16; fp16 and a
    stack without the rule keep 2."""
    hw = load_profile("h100-sxm")
    bf16 = simulate(_case("validation/r023-megatron-readme-table-gpt-1.7b-48g"), hw)
    fp16 = simulate(_case("validation/r023-megatron-readme-table-gpt-1.7b-48g",
                          ["model.dtype=fp16"]), hw)
    params = bf16.program.block("layer").params * 24 + bf16.program.block("embed").params + \
        bf16.program.block("head").params
    cats = dict(bf16.memory.by_category)
    assert cats["gradients"] == pytest.approx(4 * params)
    assert dict(fp16.memory.by_category)["gradients"] == pytest.approx(2 * params)
    assert dict(bf16.comm_bytes)["reduce_scatter"] == pytest.approx(
        2 * dict(fp16.comm_bytes)["reduce_scatter"])
    assert dict(bf16.comm_bytes)["all_gather"] == dict(fp16.comm_bytes)["all_gather"]


def test_sustained_compute_fraction_scales_compute_roofs_only():
    from simulator.cost.compute import compute_time_s

    hw = load_profile("h100-sxm", ["efficiency.sustained_compute_fraction=1.0"])
    slow = hw.model_copy(update={"efficiency": hw.efficiency.model_copy(
        update={"sustained_compute_fraction": 0.5})})
    gemm = ComputeSpec("mm", "gemm", 2 * 4096**3, 6 * 4096**2, "bf16",
                       gemm_mnk=(4096, 4096, 4096))
    copy = ComputeSpec("add", "elementwise", 1e6, 1e9, "bf16")
    launch = hw.kernel_launch_s
    assert compute_time_s(gemm, slow) - launch == pytest.approx(
        2 * (compute_time_s(gemm, hw) - launch), rel=1e-9)
    assert compute_time_s(copy, slow) == compute_time_s(copy, hw)
