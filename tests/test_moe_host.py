"""Host-bound MoE layers (`simulator.lower.moe_host`): Megatron-Core's all-to-all dispatcher
waits for the device once per layer's forward (dropless), and Transformer Engine launches
its grouped GEMMs and split quantizes once per local expert."""

from __future__ import annotations

from dataclasses import replace

import pytest

from simulator.api.core import load_hardware, load_scenario
from simulator.config.framework.load import framework_for, load_framework
from simulator.cost.specs import CommSpec, ComputeSpec, GroupSpec
from simulator.lower.costs import CostModel
from simulator.lower.moe_host import (
    MoeHost,
    launches,
    moe_host,
    price_synced,
    price_unsynced,
    sync_points,
    sync_segment_s,
)
from simulator.simulation.simulate import run_costs, simulate

GROUPS = {"ep": GroupSpec(8, 1, 8)}
GEMM = ComputeSpec("expert_fc1", "gemm", 1.0, 1.0, "fp8", grouped=True)
CAST = ComputeSpec("expert_fc1.fp8_cast_input", "elementwise", 1.0, 1.0, "bf16")
ATTN = ComputeSpec("flash_attention", "attention", 1.0, 1.0, "bf16")
A2A = CommSpec("dispatch", "all_to_all", 1e6, "ep")


def _costs(times: dict[str, float], comm_s: float, moe_s: float = 0.0) -> CostModel:
    return CostModel(compute_s=lambda spec: times[spec.name],
                     collective_s=lambda coll, nbytes, group: comm_s,
                     send_recv_s=lambda nbytes, intra: 0.0, moe_host_kernel_s=moe_s)


def test_the_segment_is_the_two_machine_makespan():
    """Host 1, 1, 1 and device 5, 1, 1 (s): the first kernel starts after its launch,
    max(1 + 7, 2 + 2, 3 + 1) = 8; host 3, 3 and device 1, 1: max(3 + 2, 6 + 1) = 7, more than
    either machine's 6 or 2 alone would need."""
    assert sync_segment_s([1, 1, 1], [5, 1, 1]) == 8
    assert sync_segment_s([3, 3], [1, 1]) == 7
    assert sync_segment_s([], []) == 0


def test_host_heavy_experts_then_device_heavy_attention_add_up():
    """After the sync the host launches N local experts' GEMMs (host-heavy) before the next
    layer's attention (device-heavy): with N = 16 GEMMs of 1 us on the device and 10 us of
    host each, and an attention of 500 us launched last, the segment is 16 x 10 + 10 (its
    launch) + 500 us; without the sync the host would have hidden under the attention."""
    host = MoeHost(10e-6, 16)
    costs = _costs({"expert_fc1": 1e-6, "flash_attention": 500e-6}, 0.0)
    ops = (ATTN, A2A, GEMM)  # the layer as planned: attention, dispatch, experts
    priced = price_synced(ops, costs, GROUPS, host)
    assert priced.compute_s + priced.comm_s == pytest.approx(10e-6 + 16 * 10e-6 + 10e-6
                                                             + 500e-6)
    unsynced = price_unsynced(ops, costs, GROUPS, host)
    assert unsynced.compute_s + unsynced.comm_s == pytest.approx(501e-6)


def test_local_experts_multiply_the_grouped_gemm_launches():
    """A grouped GEMM is one cuBLASLt call per local expert (+2 scale swizzles under
    MXFP8); an MXFP8 expert cast one quantize per expert split; a delayed-scaling cast one
    fused kernel; a non-expert op one; an empty op none."""
    mx, tensor = MoeHost(1.0, 16, True, 2), MoeHost(1.0, 16)
    assert (launches(GEMM, mx), launches(GEMM, tensor)) == (18, 16)
    assert (launches(CAST, mx), launches(CAST, tensor)) == (16, 1)
    assert launches(ATTN, mx) == launches(A2A, mx) == 1
    qkv = ComputeSpec("qkv", "gemm", 1.0, 1.0, "fp8")
    router = ComputeSpec("router", "gemm", 1.0, 1.0, "bf16")
    assert (launches(qkv, mx), launches(qkv, tensor), launches(router, mx)) == (3, 1, 1)
    assert launches(ComputeSpec("none", "elementwise", 0.0, 0.0, "bf16"), mx) == 0


def test_the_dispatchers_bookkeeping_ends_each_segment():
    """20 launches of 10 us before the next sync (counts, all-gather, copies): when the
    attention (100 us) is shorter than them the host sets the pace, 10 + 160 + 10 + 200 us;
    without them the segment is 180 + 100 us."""
    costs = _costs({"expert_fc1": 1e-6, "flash_attention": 100e-6}, 0.0)
    ops = (ATTN, A2A, GEMM)
    with_tail = price_synced(ops, costs, GROUPS, MoeHost(10e-6, 16, before_sync=20))
    without = price_synced(ops, costs, GROUPS, MoeHost(10e-6, 16))
    assert with_tail.compute_s + with_tail.comm_s == pytest.approx(380e-6)
    assert without.compute_s + without.comm_s == pytest.approx(280e-6)


def test_backward_is_floored_by_its_launches():
    """No sync in the backward: 16 + 16 expert GEMMs (dgrad, wgrad) of 1 us and an
    attention of 100 us, 20 us of host a launch: max(33 x 20, 132) us = 660 us."""
    dgrad = ComputeSpec("expert_fc1.dgrad", "gemm", 1.0, 1.0, "fp8", "bwd", grouped=True)
    wgrad = ComputeSpec("expert_fc1.wgrad", "gemm", 1.0, 1.0, "fp8", "bwd", grouped=True)
    costs = _costs({"expert_fc1.dgrad": 16e-6, "expert_fc1.wgrad": 16e-6,
                    "flash_attention": 100e-6}, 0.0)
    priced = price_unsynced((dgrad, wgrad, ATTN), costs, GROUPS, MoeHost(20e-6, 16))
    assert priced.compute_s == pytest.approx(33 * 20e-6)


def test_the_sync_is_before_each_dispatch_all_to_all():
    """Before the all-to-all the experts' ops follow (not the combine's); without expert
    parallelism before each layer's first expert op."""
    combine = CommSpec("combine", "all_to_all", 1e6, "ep")
    layer = (ATTN, CAST, A2A, GEMM, combine)
    assert sync_points(layer) == [2]
    assert sync_points(layer + layer) == [2, 7]
    assert sync_points((ATTN, CAST, GEMM, ATTN, CAST, GEMM)) == [1, 4]


def test_a_run_of_layers_is_one_segment_per_sync():
    """Two layers in a row (a recomputed run): two segments, each the one-layer makespan."""
    host = MoeHost(10e-6, 16)
    costs = _costs({"expert_fc1": 1e-6, "flash_attention": 500e-6}, 0.0)
    one = price_synced((ATTN, A2A, GEMM), costs, GROUPS, host)
    two = price_synced((ATTN, A2A, GEMM) * 2, costs, GROUPS, host)
    assert two.compute_s + two.comm_s == pytest.approx(2 * (one.compute_s + one.comm_s))


def test_the_expert_all_to_all_stays_named_for_moe_a2a_pairs():
    """The host-bound price keeps the all-to-all's seconds apart (`Priced.a2a_s`), which
    `parallel.overlap.moe_a2a` hides under the paired pass: losing it made the overlap
    pay its extra warm-up forward and hide nothing (26.38 s vs 26.17 s without it)."""
    from simulator.lower.costs import price_ops

    host = MoeHost(10e-6, 16)
    costs = _costs({"expert_fc1": 1e-6, "flash_attention": 500e-6}, 300e-6)
    ops = (ATTN, A2A, GEMM)
    plain = price_ops(ops, costs, GROUPS)
    assert plain.a2a_s == pytest.approx(300e-6)
    assert price_synced(ops, costs, GROUPS, host).a2a_s == plain.a2a_s
    assert price_unsynced(ops, costs, GROUPS, host).a2a_s == plain.a2a_s


def _scenario(**moe):
    # without the recipe's CUDA graphs (moe_preprocess is refused with token dropping)
    return load_scenario("scenarios/validation/bridge2511-b200-qwen3-30b-a3b-8g.yaml",
                         ["training.cuda_graphs.scope=[]", "training.cuda_graphs.impl=none"]
                         + [f"model.moe.{k}={v}" for k, v in moe.items()]).scenario


def test_it_applies_only_where_the_code_syncs():
    """Megatron-Core's all-to-all dispatcher (16 local experts of 128 over EP 8, MXFP8):
    it syncs when dropless, not with token dropping (the experts' launches remain); not
    with DeepEP or a stack whose profile has no figure."""
    synced = CostModel(compute_s=lambda s: 0.0, collective_s=lambda c, b, g: 0.0,
                       send_recv_s=lambda b, i: 0.0, moe_host_kernel_s=32.7e-6)
    sc = _scenario()
    assert moe_host(sc, synced) == MoeHost(32.7e-6, 16, True, 2)
    assert moe_host(_scenario(capacity_factor=1.0), synced) == MoeHost(32.7e-6, 16, True, 2,
                                                                        sync=False)
    deepep = sc.model_copy(update={"parallel": sc.parallel.model_copy(
        update={"expert_dispatcher": "deepep"})})
    assert moe_host(deepep, synced) is None
    assert moe_host(sc, CostModel(synced.compute_s, synced.collective_s,
                                  synced.send_recv_s)) is None


@pytest.mark.parametrize("name,kernel_s", [("nemo", 32.7e-6), ("megatron-core", 32.7e-6),
                                           ("torchtitan", 0.0), ("deepspeed-zero", 0.0),
                                           ("mindspore", 0.0)])
def test_only_megatron_core_stacks_sync(name, kernel_s):
    """The measured 32.7 us a kernel (H200 host, a real layer) and the cited code."""
    fw = load_framework(name)
    assert fw.moe_host_kernel_s == pytest.approx(kernel_s)
    assert fw.moe_host_costs[1] == (11 if kernel_s else 0)
    if kernel_s:
        assert fw.moe_host is not None
        assert "token_dispatcher.py" in (fw.moe_host.sync_source or "")
        assert "grouped_linear.py" in (fw.moe_host.expert_launches_source or "")
        assert "h200-gpu-kernels-2026-11-28.json" in (fw.moe_host.source or "")


@pytest.mark.parametrize("scenario,moves", [
    ("scenarios/validation/bridge2511-b200-llama3-8b-8g.yaml", False),
    ("scenarios/validation/r023-megatron-readme-table-gpt-1.7b-48g.yaml", False),
    ("scenarios/validation/bridge2511-b200-qwen3-30b-a3b-8g.yaml", True)])
def test_dense_runs_are_unchanged(scenario, moves):
    """The rule prices MoE layers only: a dense run's iteration is the same with the
    stack's MoE host cost and without it."""
    loaded = load_scenario(scenario)
    hw = load_hardware(loaded)
    costs = run_costs(hw, framework_for(loaded.scenario, hw))
    assert costs.moe_host_kernel_s == pytest.approx(32.7e-6)
    off = replace(costs, moe_host_kernel_s=0.0)
    t = [simulate(loaded.scenario, hw, costs=c, reports=False).iteration_time_s
         for c in (costs, off)]
    assert (t[0] > t[1] * 1.5) if moves else (t[0] == t[1])


def test_token_dropping_keeps_the_launches_but_not_the_sync():
    """With a capacity factor Megatron-Core drops and pads, with no sync; TE still launches
    one GEMM per local expert, so the launches still floor the layer (MXFP8 on a B200 at
    micro-batch 1 is host-bound); dropless adds the sync on top."""
    def seconds(capacity: str, moe_s: float) -> float:
        loaded = load_scenario("scenarios/validation/bridge2511-b200-qwen3-30b-a3b-8g.yaml",
                               ["training.cuda_graphs.scope=[]", "training.cuda_graphs.impl=none",
                                f"model.moe.capacity_factor={capacity}"])
        hw = load_hardware(loaded)
        costs = replace(run_costs(hw, framework_for(loaded.scenario, hw)),
                        moe_host_kernel_s=moe_s)
        return simulate(loaded.scenario, hw, costs=costs, reports=False).iteration_time_s

    dropping = seconds("1.0", 32.7e-6)
    assert dropping > seconds("1.0", 0.0)
    assert seconds("null", 32.7e-6) > dropping


ACT = ComputeSpec("expert_act", "elementwise", 1.0, 1.0, "bf16")
FC2 = ComputeSpec("expert_fc2", "gemm", 1.0, 1.0, "bf16", grouped=True)


def test_a_clamped_glu_waits_again_before_its_activation():
    """GPT-OSS (weighted_bias_quick_geglu_impl's torch.tensor of the linear offset: a
    synchronous host-to-device copy): the forward is two segments, [dispatch, fc1] then
    [activation, fc2, attention]; host 10 us a launch, 16 local experts, fc1 and fc2 1 us,
    the activation 1 us, the attention 500 us: (10 + 160 + 1) + (10 + 160 + 10 + 500) us.
    Without the wait the host's fc2 launches hide under fc1 and the attention: 10 + 160 +
    10 + 160 + 10 + 500."""
    costs = _costs({"expert_fc1": 1e-6, "expert_act": 1e-6, "expert_fc2": 1e-6,
                    "flash_attention": 500e-6}, 0.0)
    ops = (ATTN, A2A, GEMM, ACT, FC2)
    both = price_synced(ops, costs, GROUPS, MoeHost(10e-6, 16, act_sync=True))
    one = price_synced(ops, costs, GROUPS, MoeHost(10e-6, 16))
    assert both.compute_s + both.comm_s == pytest.approx(
        sync_segment_s([10e-6, 160e-6], [0.0, 1e-6])
        + sync_segment_s([10e-6, 160e-6, 10e-6], [1e-6, 1e-6, 500e-6]))
    assert both.compute_s + both.comm_s == pytest.approx(171e-6 + 680e-6)
    assert one.compute_s + one.comm_s == pytest.approx(850e-6)
    assert both.compute_s > one.compute_s


def test_the_dispatchers_bookkeeping_ends_only_the_dispatch_segments():
    """20 bookkeeping launches (200 us) close the segment that ends at the next dispatch
    sync, [activation, fc2, attention of 100 us]: max(10 + 160 + 10 + 100, 380) = 380 us
    instead of 280; not the one that ends at the activation's wait ([dispatch, fc1]: 171
    us, 370 with them)."""
    costs = _costs({"expert_fc1": 1e-6, "expert_act": 1e-6, "expert_fc2": 1e-6,
                    "flash_attention": 100e-6}, 0.0)
    ops = (ATTN, A2A, GEMM, ACT, FC2)
    plain = price_synced(ops, costs, GROUPS, MoeHost(10e-6, 16, act_sync=True))
    tail = price_synced(ops, costs, GROUPS, MoeHost(10e-6, 16, before_sync=20, act_sync=True))
    extra = (tail.compute_s + tail.comm_s) - (plain.compute_s + plain.comm_s)
    assert extra == pytest.approx(100e-6)


def test_a_recomputed_clamped_glu_waits_in_the_backward():
    """moe_act recomputes the activation before fc2's backward (CheckpointWithoutOutput):
    the backward is cut there; host 10 us, 16 experts: [fc2.dgrad, fc1.dgrad, attention]
    then the next layer's from its own wait. Without recompute only the launch floor."""
    f2 = ComputeSpec("expert_fc2.dgrad", "gemm", 1.0, 1.0, "bf16", "bwd", grouped=True)
    f1 = ComputeSpec("expert_fc1.dgrad", "gemm", 1.0, 1.0, "bf16", "bwd", grouped=True)
    costs = _costs({"expert_fc2.dgrad": 1e-6, "expert_fc1.dgrad": 1e-6,
                    "flash_attention": 500e-6}, 0.0)
    ops = (f2, f1, ATTN)
    waits = price_unsynced(ops * 2, costs, GROUPS, MoeHost(10e-6, 16, act_recomputed=True))
    floor = price_unsynced(ops * 2, costs, GROUPS, MoeHost(10e-6, 16))
    one = sync_segment_s([160e-6, 160e-6, 10e-6], [1e-6, 1e-6, 500e-6])
    assert waits.compute_s == pytest.approx(2 * one) and one == pytest.approx(830e-6)
    assert floor.compute_s == pytest.approx(1004e-6)  # the device: 2 x (1 + 1 + 500)


def test_gpt_oss_waits_at_its_activation_and_its_recompute():
    """The GB200 row: clamped experts (swiglu_limit 7) with moe_act recomputed; without the
    clamp neither wait, without moe_act only the forward's."""
    def host(*sets: str) -> MoeHost | None:
        ld = load_scenario("validation/bridge2511-gb200-gpt-oss-120b-64g", list(sets))
        hw = load_hardware(ld)
        return moe_host(ld.scenario, run_costs(hw, framework_for(ld.scenario, hw)))

    assert (host().act_sync, host().act_recomputed) == (True, True)
    assert (host("model.moe.activation_clamp=null").act_sync,
            host("model.moe.activation_clamp=null").act_recomputed) == (False, False)
    assert (host("parallel.recompute_modules=[layernorm]").act_sync,
            host("parallel.recompute_modules=[layernorm]").act_recomputed) == (True, False)
