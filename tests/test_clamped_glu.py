"""GPT-OSS's experts as Megatron-Core runs them (simulator/program/clamped_glu.py): the
clamps before the fused activation and the per-expert fc2 bias add as element-wise kernels
of their own, in closed form, read from the Hugging Face config, and in the iteration."""

from __future__ import annotations

import pytest
import yaml

from simulator.config.hardware import load_profile
from simulator.config.resources import resolve_yaml
from simulator.config.scenario import parse_scenario
from simulator.program.clamped_glu import (
    BIAS_BWD,
    BIAS_FWD,
    CLAMP_BWD,
    CLAMP_FWD,
    clamped_glu_ops,
    expert_rows,
)
from simulator.simulation.simulate import simulate

GB200 = "validation/bridge2511-gb200-gpt-oss-120b-64g"


def _scenario(name: str, overrides=()):
    path = resolve_yaml(name, "scenarios")
    return parse_scenario(yaml.safe_load(path.read_text()), str(path), list(overrides))


def test_the_config_sets_the_clamp_and_the_expert_biases():
    moe = _scenario("gpt-oss-120b-64-h100").model.moe
    assert (moe.activation_clamp, moe.expert_bias) == (7.0, True)  # swiglu_limit 7.0


def test_kernels_in_closed_form():
    """GB200 row: micro-batch 1 x 8192 tokens x top 4 = 32768 routed rows, fc1 out 2 x 2880
    wide, fc2 out 2880; bf16; moe_act recomputed, so the clamps run again in the backward."""
    s = _scenario(GB200)
    rows, fc1, fc2 = 1 * 8192 * 4, 2 * 2880, 2880
    assert expert_rows(s) == (rows, fc1, fc2)
    fwd, bwd = clamped_glu_ops(s, "bf16")
    assert [(o.name, o.bytes_accessed) for o in fwd] == [
        ("expert_act_clamp", rows * fc1 * 4 * 2), ("expert_fc2_bias", rows * fc2 * 6 * 2)]
    assert [(o.name, o.bytes_accessed) for o in bwd] == [
        ("expert_act_clamp.recompute", rows * fc1 * 4 * 2),
        ("expert_act_clamp.bwd", rows * fc1 * 5 * 2), ("expert_fc2_bias.bwd", rows * fc2 * 8 * 2)]
    assert (CLAMP_FWD, CLAMP_BWD, BIAS_FWD, BIAS_BWD) == (4, 5, 6, 8)
    assert all(o.kind == "elementwise" and o.name.startswith("expert_") for o in fwd + bwd)


def test_without_recompute_no_rerun_and_tensor_split_experts_split_the_width():
    s = _scenario(GB200, ["parallel.recompute_modules=null", "parallel.recompute=none"])
    assert [o.name for o in clamped_glu_ops(s, "bf16")[1]] == [
        "expert_act_clamp.bwd", "expert_fc2_bias.bwd"]
    s2 = _scenario(GB200, ["parallel.tensor=2", "parallel.data=32", "parallel.expert=32",
                           "parallel.expert_tensor=2", "parallel.sequence_parallel=true"])
    assert expert_rows(s2) == (8192 * 4, 2880, 2880)
    s1 = _scenario(GB200, ["parallel.tensor=2", "parallel.data=32", "parallel.expert=32",
                           "parallel.expert_tensor=1", "parallel.sequence_parallel=true"])
    assert expert_rows(s1) == (8192 * 4 / 2, 5760, 2880)


@pytest.mark.parametrize("keys", [["model.moe.activation_clamp=null"],
                                  ["model.moe.expert_bias=false"]])
def test_each_part_costs_time_and_none_without_them(keys):
    """Removing the clamp or the bias makes the iteration faster; removing both removes
    every kernel of the module."""
    hw = load_profile("gb200-nvl72")
    base = simulate(_scenario(GB200), hw).iteration_time_s
    without = _scenario(GB200, keys)
    assert (without.model.moe.activation_clamp is None) or not without.model.moe.expert_bias
    assert simulate(without, hw).iteration_time_s < base
    bare = _scenario(GB200, ["model.moe.activation_clamp=null", "model.moe.expert_bias=false"])
    assert clamped_glu_ops(bare, "bf16") == ((), ())


def test_the_host_launches_the_bias_add_per_local_expert():
    """TEGroupedMLP._apply_bias loops over the local experts: 2 kernels each and the cat
    forward, 4 each and the split's cat backward; the clamps 3 kernels each way."""
    from simulator.lower.moe_host import MoeHost, launches

    host = MoeHost(kernel_s=1e-5, local_experts=16)
    fwd, bwd = clamped_glu_ops(_scenario(GB200), "bf16")
    assert [launches(o, host) for o in fwd] == [3, 2 * 16 + 1]
    assert [launches(o, host) for o in bwd] == [3, 3, 4 * 16 + 1]


def test_every_moe_layer_runs_its_own_clamps_and_bias_where_the_stack_runs_them():
    """Both MoE layers (the windowed and the global one, a block each) have their clamps
    just before their fused activation and their bias add just after their fc2; backward,
    the bias add's gradient and the recomputed clamps before fc2's backward, the clamps'
    gradient after the activation's; two MoE layers in one run of ops get two of each."""
    from simulator.config.framework.load import load_framework
    from simulator.program.clamped_glu import in_place
    from simulator.program.model_program import transformer_program

    prog = transformer_program(_scenario(GB200), load_framework("nemo").software)
    layers = list({b.name: b for b in prog.blocks if b.name.startswith("layer")}.values())
    assert len(layers) == 2
    pairs = ([("expert_act_clamp", "expert_act"), ("expert_fc2", "expert_fc2_bias")],
             [("expert_fc2_bias.bwd", "expert_act_clamp.recompute"),
              ("expert_act_clamp.recompute", "expert_fc2.dgrad"),
              ("expert_act.bwd", "expert_act_clamp.bwd")])
    for layer in layers:
        for ops, direction in ((layer.fwd, pairs[0]), (layer.bwd, pairs[1])):
            names = [o.name for o in ops]
            for first, then in direction:
                at = [i for i, n in enumerate(names) if n == first]
                assert len(at) == 1 and names[at[0] + 1] == then
    fwd, _ = clamped_glu_ops(_scenario(GB200), "bf16")
    bare = tuple(o for o in layers[0].fwd if not o.name.startswith(("expert_act_clamp",
                                                                     "expert_fc2_bias")))
    twice = [o.name for o in in_place(bare + bare, fwd)]
    assert twice.count("expert_act_clamp") == twice.count("expert_fc2_bias") == 2
