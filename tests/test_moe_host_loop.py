"""The MoE host rule's two kinds of launches (`simulator.lower.moe_host.loop_launches`,
`op_host_s`): a Python-level operator's launch costs the stack's `moe_host.host_us_per_kernel`,
a kernel that Transformer Engine's C++ loop issues inside that operator (the other experts'
GEMMs, the MXFP8 scale swizzles, the other splits' quantizes) `loop_us_per_gemm` or
`loop_us_per_kernel`; the hardware profile's `host.launch_cost_factor` scales both."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from simulator.api.core import load_scenario
from simulator.cost.specs import ComputeSpec
from simulator.lower.costs import CostModel, eager_loop_s
from simulator.lower.moe_host import (
    MoeHost,
    launches,
    loop_launches,
    moe_host,
    op_host_s,
    price_synced,
    price_unsynced,
)
from tests.test_moe_host import A2A, ATTN, CAST, GEMM, GROUPS

BIAS = ComputeSpec("expert_fc2_bias", "elementwise", 1.0, 1.0, "bf16")
# 30 us a Python-level launch, 10 us a looped GEMM, 5 us another looped kernel; MXFP8
MX = MoeHost(30e-6, 16, True, 2, loop_gemm_s=10e-6, loop_kernel_s=5e-6)


def _costs(times: dict[str, float]) -> CostModel:
    return CostModel(compute_s=lambda spec: times[spec.name],
                     collective_s=lambda coll, nbytes, group: 0.0,
                     send_recv_s=lambda nbytes, intra: 0.0)


def test_the_loop_issues_all_but_the_operators_own_launch():
    """A grouped GEMM: the Python call, then 15 more experts' GEMMs and 2 swizzles from C++;
    a split quantize: 15 more splits; a dense FP8 GEMM its 2 swizzles; GPT-OSS's per-expert
    bias kernels come from a Python list comprehension (none looped); a collective none."""
    tensor = MoeHost(30e-6, 16)
    assert (loop_launches(GEMM, MX), loop_launches(GEMM, tensor)) == ((15, 2), (15, 0))
    assert (loop_launches(CAST, MX), loop_launches(CAST, tensor)) == ((0, 15), (0, 0))
    qkv = ComputeSpec("qkv", "gemm", 1.0, 1.0, "fp8")
    assert (loop_launches(qkv, MX), loop_launches(ATTN, MX)) == ((0, 2), (0, 0))
    assert (launches(BIAS, MX), loop_launches(BIAS, MX)) == (33, (0, 0))
    assert loop_launches(A2A, MX) == (0, 0)
    # one expert: nothing left to loop over
    assert loop_launches(GEMM, MoeHost(30e-6, 1, True, 2)) == (0, 2)


def test_an_operators_host_time_adds_its_two_kinds_of_launches():
    """MXFP8 grouped GEMM over 16 experts: 30 + 15 x 10 + 2 x 5 = 190 us; its split quantize
    30 + 15 x 5 = 105 us. Swapping the two loop figures (a mutation) gives 30 + 15 x 5 +
    2 x 10 = 125 us; without loop figures every launch is 30 us: 18 x 30 = 540 us."""
    assert op_host_s(GEMM, MX) == pytest.approx(190e-6)
    assert op_host_s(CAST, MX) == pytest.approx(105e-6)
    swapped = MoeHost(30e-6, 16, True, 2, loop_gemm_s=5e-6, loop_kernel_s=10e-6)
    assert op_host_s(GEMM, swapped) == pytest.approx(125e-6)
    assert op_host_s(GEMM, MoeHost(30e-6, 16, True, 2)) == pytest.approx(540e-6)


def test_a_synced_layer_is_the_makespan_of_both_kinds():
    """From the dispatch's sync: the all-to-all's launch (30 us, no device time here), the
    grouped GEMM (190 us of host, 1 us of device), the attention (30 us, 500 us of device):
    max(30 + 501, 220 + 500, 250 + 500) = 750 us; all launches at 30 us: 30 + 540 + 30 + 500
    = 1100 us."""
    costs = _costs({"expert_fc1": 1e-6, "flash_attention": 500e-6})
    ops = (ATTN, A2A, GEMM)
    split = price_synced(ops, costs, GROUPS, MX)
    assert split.compute_s + split.comm_s == pytest.approx(750e-6)
    whole = price_synced(ops, costs, GROUPS, MoeHost(30e-6, 16, True, 2))
    assert whole.compute_s + whole.comm_s == pytest.approx(1100e-6)


def test_the_backward_floor_counts_both_kinds():
    """dgrad and wgrad of 16 experts in BF16 (no swizzles) and an attention of 100 us: the
    host's 2 x (30 + 15 x 10) + 30 = 390 us floor the 132 us of device time."""
    tensor = MoeHost(30e-6, 16, loop_gemm_s=10e-6, loop_kernel_s=5e-6)
    dgrad = ComputeSpec("expert_fc1.dgrad", "gemm", 1.0, 1.0, "bf16", "bwd", grouped=True)
    wgrad = ComputeSpec("expert_fc1.wgrad", "gemm", 1.0, 1.0, "bf16", "bwd", grouped=True)
    costs = _costs({"expert_fc1.dgrad": 16e-6, "expert_fc1.wgrad": 16e-6,
                    "flash_attention": 100e-6})
    priced = price_unsynced((dgrad, wgrad, ATTN), costs, GROUPS, tensor)
    assert priced.compute_s == pytest.approx(390e-6)


def test_the_cost_model_hands_the_loop_figures_to_the_rule():
    """`CostModel.moe_loop_s` reaches `MoeHost` (the B200 Qwen3-30B-A3B row: 16 local
    experts, MXFP8); the Grace factor scales each figure and leaves a missing one missing."""
    sc = load_scenario("scenarios/validation/bridge2511-b200-qwen3-30b-a3b-8g.yaml",
                       ["training.cuda_graphs.scope=[]", "training.cuda_graphs.impl=none"]
                       ).scenario
    costs = CostModel(compute_s=lambda s: 0.0, collective_s=lambda c, b, g: 0.0,
                      send_recv_s=lambda b, i: 0.0, moe_host_kernel_s=32.7e-6,
                      moe_loop_s=(13.7e-6, 7.1e-6))
    assert moe_host(sc, costs) == MoeHost(32.7e-6, 16, True, 2, loop_gemm_s=13.7e-6,
                                          loop_kernel_s=7.1e-6)
    grace = SimpleNamespace(host=SimpleNamespace(launch_cost_factor=2.75))
    scaled = eager_loop_s(grace, (10e-6, None))
    assert scaled[0] == pytest.approx(27.5e-6) and scaled[1] is None
    assert eager_loop_s(SimpleNamespace(host=None), (10e-6, 4e-6)) == (10e-6, 4e-6)
