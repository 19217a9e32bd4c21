"""What one Qwen3-MoE layer keeps for its backward under the NeMo 25.11 stack
(Megatron-Core core_v0.15.0, Transformer Engine v2.9, FP8 current scaling), counted tensor
by tensor from the stack's code, against the program of the published H100 run
(scenarios/validation/bridge2511-h100-qwen3-30b-a3b-16g.yaml: TP 1, EP 8, MBS 2, seq 4096)."""

from __future__ import annotations

import pytest

from simulator.api.core import load_hardware, load_scenario
from simulator.config.framework.load import framework_for
from simulator.simulation.simulate import run_program

ROW = "scenarios/validation/bridge2511-h100-qwen3-30b-a3b-16g.yaml"
# Qwen/Qwen3-30B-A3B config.json: hidden 2048, 32 query heads and 4 key/value heads of 128,
# 128 experts of FFN 768, top 8
H, NQ, NKV, HEADS, E, K, F = 2048, 32 * 128, 4 * 128, 32, 128, 8, 768
T = 2 * 4096  # tokens of one micro-batch (MBS 2, seq 4096)
R = T * K  # expert rows one EP rank computes (force-balanced routing: its T k tokens)


def _layer(*sets: str):
    loaded = load_scenario(ROW, list(sets))
    sc, hw = loaded.scenario, load_hardware(loaded)
    return run_program(sc, hw, framework_for(sc, hw)).program.block("layer")


def _megatron_core_0_15() -> float:
    """Bytes one layer keeps per micro-batch, from the stack's code."""
    attention = (
        2 * T * H  # TELayerNormColumnParallelLinear: the norm's bf16 input
        + T * H  # ... and its FP8 output for the qkv wgrad (columnwise only, grouped_linear/
        #          layernorm_linear: update_usage(rowwise_usage=False, columnwise_usage=True))
        + 2 * T * (NQ + NKV)  # q_layernorm / k_layernorm (TENorm): their bf16 inputs
        + 2 * T * (NQ + 2 * NKV)  # fused attention: q, k, v
        + 2 * T * NQ + 4 * T * HEADS  # ... its output and fp32 softmax statistics per row
        # linear_proj keeps no FP8 copy: attention.py set_save_original_input(linear_proj)
        # for non-delayed FP8 recipes (it reads the attention's own saved output)
    )
    moe = (
        2 * T * H  # pre_mlp_layernorm (TENorm): its bf16 input
        + 2 * T * H  # the router's bf16 input (RouterGatingLinearFunction)
        + 2 * T * E  # the router's scores (bf16 a token and expert)
        + 4 * T * K  # the permutation's int32 row map
        + R * H  # fc1 (TEGroupedLinear, FP8): its quantized input, columnwise
        + 2 * R * 2 * F  # weighted_bias_swiglu: its bf16 input (gate and up)
        + R * F  # fc2: its quantized input
        + 2 * T * K  # the combine's routing weights (bf16); no copy of the experts'
        # outputs: experts.py TEGroupedMLP.forward applies the probs in the activation and
        # token_dispatcher.py combine_postprocess unpermutes without them (TE v2.9
        # moe_unpermute then saves only row_id_map)
    )
    return float(attention + moe)


def test_the_published_h100_layer_keeps_what_megatron_core_saves():
    assert _layer().saved_bytes == pytest.approx(_megatron_core_0_15(), rel=1e-12)


def test_the_combines_copy_of_the_expert_outputs_would_be_one_more_tensor():
    """The mutation the row's `probs_in_activation` removes: the combine keeping the k
    expert outputs of every token, 2 T k h bytes (268 MB a micro-batch here)."""
    copy = _layer("model.moe.probs_in_activation=false").saved_bytes - _layer().saved_bytes
    assert copy == pytest.approx(2 * R * H, rel=1e-12)
