"""The expert token dispatcher (`parallel.expert_dispatcher`) and the all-to-all
dispatcher's second permutation (simulator/program/a2a_sort.py): the sort by local expert
and its unsort priced for `alltoall` with more than one local expert, never for the flex
dispatcher (`deepep`, `hybridep`); HybridEP's dropless dispatch syncs the host."""

from __future__ import annotations

import pytest

from simulator.api import load_scenario
from simulator.config.framework.load import load_framework
from simulator.config.hardware import load_profile
from simulator.cost.specs import ComputeSpec
from simulator.errors import InputError
from simulator.lower.costs import CostModel
from simulator.lower.moe_host import MoeHost, moe_host
from simulator.program.a2a_sort import PROBS_BYTES, sort_ops
from simulator.program.model_program import transformer_program
from simulator.simulation.simulate import simulate

H100 = "scenarios/validation/bridge2511-h100-gpt-oss-120b-64g.yaml"  # EP 8: 16 local experts
GB200 = "scenarios/validation/bridge2511-gb200-gpt-oss-120b-64g.yaml"  # EP 64: 2 of 128


def _sc(path: str, *keys: str):
    return load_scenario(path, list(keys)).scenario


def _layer(sc) -> list[str]:
    prog = transformer_program(sc, load_framework("nemo").software)
    block = next(b for b in prog.blocks if b.name.startswith("layer"))
    return [o.name for o in block.fwd] + [o.name for o in block.bwd]


def test_sort_and_unsort_in_closed_form():
    """One micro-batch of 4096 tokens, top-4, hidden 2880, BF16: each row's tokens read and
    written (2 x 2880 x 2 bytes) and its fp32 probabilities with them in the sort; the
    Triton map one int32 a row; backward the unsort's gradient, then the sort's."""
    rows = 1 * 4096 * 4
    (fwd_sort, fwd_unsort), (bwd_unsort, bwd_sort) = sort_ops(_sc(H100), "bf16")
    tokens = rows * 2880 * 2 * 2
    assert [(k.name, k.bytes_accessed, k.phase) for k in fwd_sort] == [
        ("expert_sort_map", rows * 4.0, "fwd"),
        ("expert_sort", tokens + rows * 2 * PROBS_BYTES, "fwd")]
    assert [(k.name, k.bytes_accessed) for k in fwd_unsort] == [
        ("expert_unsort_map", rows * 4.0), ("expert_unsort", tokens)]
    assert [(k.name, k.bytes_accessed, k.phase) for k in bwd_unsort + bwd_sort] == [
        ("expert_unsort.bwd", tokens, "bwd"),
        ("expert_sort.bwd", tokens + rows * 2 * PROBS_BYTES, "bwd")]
    assert all(isinstance(k, ComputeSpec) and k.flops == 0 for k in fwd_sort + bwd_sort)


def test_the_sort_sits_between_the_all_to_alls_and_the_experts():
    names = _layer(_sc(H100))
    at = names.index("expert_sort")
    assert names[at - 2].endswith(".all_to_all") and names[at - 1] == "expert_sort_map"
    assert names[at + 1] == "expert_fc1"
    un = names.index("expert_unsort")
    assert names[un - 2] == "expert_fc2_bias" and names[un + 1].endswith(".all_to_all")
    assert names[names.index("expert_unsort.bwd") - 1].endswith(".all_to_all")
    assert names[names.index("expert_sort.bwd") + 1].endswith(".all_to_all")


@pytest.mark.parametrize("keys", [("parallel.expert_dispatcher=hybridep",),
                                  ("parallel.expert_dispatcher=deepep",),
                                  ("model.moe.experts=64",)])
def test_no_sort_for_the_flex_dispatcher_or_one_local_expert(keys):
    """HybridEP permutes inside its fused dispatch, DeepEP's manager has one permute; with
    one local expert (64 experts over EP 64) Megatron-Core skips the sort
    (`if self.num_local_experts > 1`)."""
    sc = _sc(GB200, *keys)
    assert sort_ops(sc, "bf16") == (((), ()), ((), ()))
    assert not [n for n in _layer(sc) if "sort" in n]
    assert [n for n in _layer(_sc(GB200)) if "sort" in n]  # 2 local experts: sorted


def test_the_sort_costs_time_under_alltoall_only():
    """The same run under HybridEP drops the copies (the host rule syncs either way): it is
    faster by at least the copies' device time."""
    hw = load_profile("h100-sxm")
    alltoall = simulate(_sc(H100), hw).iteration_time_s
    hybridep = simulate(_sc(H100, "parallel.expert_dispatcher=hybridep"), hw).iteration_time_s
    assert hybridep < alltoall


def test_hybridep_syncs_the_host_without_the_alltoall_bookkeeping():
    """HybridEP's dropless dispatch copies its counts to the host and waits (fused_a2a.py
    `use_host_meta`); its own bookkeeping is not counted; DeepEP stays outside the rule."""
    costs = CostModel(compute_s=lambda s: 0.0, collective_s=lambda c, b, g: 0.0,
                      send_recv_s=lambda b, i: 0.0, moe_host_kernel_s=32.7e-6,
                      moe_dispatcher_kernels=11)
    assert moe_host(_sc(H100), costs) == MoeHost(32.7e-6, 16, before_sync=11, act_sync=True,
                                                 act_recomputed=True)
    assert moe_host(_sc(H100, "parallel.expert_dispatcher=hybridep"), costs) == MoeHost(
        32.7e-6, 16, before_sync=0, act_sync=True, act_recomputed=True)
    assert moe_host(_sc(H100, "parallel.expert_dispatcher=deepep"), costs) is None


def test_a_bad_dispatcher_is_refused_with_its_key_and_the_allowed_values():
    with pytest.raises(InputError) as err:
        load_scenario(H100, ["parallel.expert_dispatcher=flex"])
    assert err.value.key == "parallel.expert_dispatcher"
    assert "found 'flex'; allowed: alltoall, deepep, hybridep" in str(err.value)
