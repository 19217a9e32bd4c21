"""Mixture-of-experts models from Hugging Face configs (Mixtral, Qwen3-MoE): total and
activated parameters against the published figures (scenarios/models/SOURCES.md), the
mapping to model.moe, what cannot be expressed refused by name, and the model FLOPs per
token of `run` against Megatron-LM's published formula."""

from __future__ import annotations

import json
import math

import pytest

from simulator.config.hardware import load_profile
from simulator.config.resources import bundled_dir
from simulator.config.scenario import parse_scenario
from simulator.config.scenario.hf import load_hf, read_hf_config
from simulator.errors import InputError
from simulator.models.layers import layer_kinds
from simulator.simulation.simulate import simulate

# (total, activated) as published, and the digits they are published to
PUBLISHED = {"mixtral-8x7b": (46.7e9, 12.9e9), "qwen3-30b-a3b": (30.5e9, 3.3e9),
             "qwen3-235b-a22b": (235e9, 22e9)}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_total_and_activated_parameters_match_the_model_cards(name):
    """Totals within 0.5%. Activated: Mixtral's 12.9B within 0.5%; Qwen publishes its
    activated counts to two digits, truncated (3.353B is "3.3B", 22.19B "22B"), so the count
    must agree at the digits published (Qwen3-30B-A3B's non-embedding total, 29.9B, pins the
    per-layer count to 0.5% as well)."""
    m = load_hf(name)
    total, active = PUBLISHED[name]
    assert abs(m.param_count() - total) / total < 0.005
    got = m.param_count(active=True)
    if name == "mixtral-8x7b":
        assert abs(got - active) / active < 0.005
    else:
        digits = 10 ** (math.floor(math.log10(active)) - 1)
        assert math.floor(got / digits) * digits == pytest.approx(active)
    if name == "qwen3-30b-a3b":
        non_embedding = m.param_count() - 2 * m.vocab * m.hidden
        assert abs(non_embedding - 29.9e9) / 29.9e9 < 0.005


def test_qwen3_moe_closed_form():
    """Per layer: attention h(q + 2kv) + qh with q = 32 * 128 and kv = 4 * 128, the router
    h * 128, 128 experts of 3 h * 768, two RMSNorms and the query and key head norms
    (Qwen3MoeAttention's q_norm, k_norm: 128 each); the activated count keeps 8 experts."""
    m = load_hf("qwen3-30b-a3b")
    h, q, kv, v = 2048, 32 * 128, 4 * 128, 151936
    attn = h * (q + 2 * kv) + q * h + 2 * h + 2 * 128
    assert m.param_count() == 2 * v * h + 48 * (attn + h * 128 + 128 * 3 * h * 768) + h
    assert m.param_count(active=True) == 2 * v * h + 48 * (attn + h * 128 + 8 * 3 * h * 768) + h


def _scenario(model: dict, overrides=()):
    return parse_scenario({"hardware": "h100-sxm", "cluster": {"devices_per_node": 8},
                           "model": model, "parallel": {"data": 8, "expert": 8},
                           "training": {"global_batch_size": 16, "micro_batch_size": 1}},
                          "s.yaml", list(overrides))


def test_qwen3_moe_maps_to_model_moe():
    m = _scenario({"from_hf": "qwen3-30b-a3b", "seq_length": 4096}).model
    assert (m.layers, m.hidden_size, m.num_heads, m.kv_heads, m.ffn, m.vocab_size) == \
        (48, 2048, 32, 4, 6144, 151936)
    moe = m.moe
    assert (moe.experts, moe.top_k, moe.ffn_hidden_size, moe.every, moe.first_dense,
            moe.normalized(), moe.score, moe.shared_experts) == \
        (128, 8, 768, 1, 0, True, "softmax", 0)


def _cfg(**extra) -> dict:
    path = bundled_dir("scenarios") / "models" / "qwen3-30b-a3b.json"
    cfg = json.loads(path.read_text(encoding="utf-8"))
    return {**cfg, **extra}


def test_qwen3_moe_leading_dense_layers_and_sparse_step():
    m = read_hf_config(_cfg(mlp_only_layers=[0, 1]), "c.json")
    assert (m.first_dense, m.model_fields()["moe"]["first_dense"]) == (2, 2)
    dense_ffn = 3 * 2048 * 6144
    assert m.param_count() - load_hf("qwen3-30b-a3b").param_count() == \
        2 * (dense_ffn - 128 * 3 * 2048 * 768 - 2048 * 128)
    m = read_hf_config(_cfg(decoder_sparse_step=2, norm_topk_prob=False), "c.json")
    assert m.model_fields()["moe"] == {"experts": 128, "top_k": 8, "ffn_hidden_size": 768,
                                       "every": 2, "normalize_top_k": False}


@pytest.mark.parametrize("extra,message", [
    ({"mlp_only_layers": [3, 7]}, "mlp_only_layers: found [3, 7]; only leading dense layers "
                                  "[0, 1, ..., k-1] are simulated (model.moe.first_dense)"),
    ({"mlp_only_layers": [0], "decoder_sparse_step": 2},
     "mlp_only_layers [0] with decoder_sparse_step=2 is not simulated (allowed: one of the "
     "two)"),
    ({"norm_topk_prob": "yes"}, "norm_topk_prob: found 'yes'; expected true or false"),
    ({"num_experts": 0}, "num_experts: found 0; expected an integer from 1 to 100000 (a "
                         "range a real system could have)"),
])
def test_what_qwen3_moe_cannot_express_is_refused_by_name(extra, message):
    with pytest.raises(InputError) as err:
        read_hf_config(_cfg(**extra), "c.json")
    assert str(err.value) == f"c.json: model.from_hf: {message}"


# ---- FLOPs per token against Megatron-LM's formula --------------------------------------------

def _megatron_flops_per_token(h, layers, heads, groups, seq, vocab, dense_ffn, dense_layers,
                              expert_ffn, top_k, shared_ffn, experts) -> float:
    """Megatron-LM's `num_floating_point_operations` (megatron/training/training.py, the
    MoE form with dense, routed and shared FFNs and attention counted in full,
    (1 + groups/heads + s/h) * q/h; Narayanan et al. 2021 Eq. 3 generalised), per token:
    12 L h^2 [attention + FFNs * 3/2 (SwiGLU) / (L h) + V / (2 L h)], plus the router GEMM,
    6 h E per MoE layer, as its MLA variant counts it."""
    moe_layers = layers - dense_layers
    ffn = (dense_ffn * dense_layers + (expert_ffn * top_k + shared_ffn) * moe_layers) * 1.5
    return (12 * layers * h * h * ((1 + groups / heads + seq / h) + ffn / (layers * h)
                                   + vocab / (2 * layers * h))
            + 6 * h * experts * moe_layers)


@pytest.mark.parametrize("moe,flops_args", [
    ({}, dict(expert_ffn=14336, top_k=2, shared_ffn=0, experts=8)),
    ({"ffn_hidden_size": 2048, "shared_experts": 1, "experts": 32, "top_k": 4,
      "score": "sigmoid", "scaling_factor": 2.5},
     dict(expert_ffn=2048, top_k=4, shared_ffn=2048, experts=32)),
    ({"ffn_hidden_size": 2048, "shared_experts": 2, "experts": 32, "top_k": 4,
      "first_dense": 3, "score": "sigmoid"},
     dict(expert_ffn=2048, top_k=4, shared_ffn=4096, experts=32, dense_layers=3)),
])
def test_model_flops_per_token_follow_megatron_formula(moe, flops_args, overrides=()):
    """Mixtral-8x7B as imported, and the same with DeepSeek-style routed experts of their
    own width and shared experts, then with its first 3 layers dense (3 dense + 29 MoE
    layers: not periodic, one program block per layer kind), dropless (no padding): the
    model FLOPs of one iteration
    over its tokens equal the formula (the learned position table and tied head the
    simulator's transformer still adds have no matmul FLOPs)."""
    s = _scenario({"from_hf": "mixtral-8x7b", "seq_length": 4096,
                   "moe": {"capacity_factor": None, **moe}},
                  overrides)
    m = s.model
    got = simulate(s, load_profile("h100-sxm")).model_flops
    tokens = s.training.global_batch_size * m.seq_length
    args = {"dense_layers": 0, **flops_args}
    want = _megatron_flops_per_token(4096, 32, 32, 8, 4096, 32000, 14336, **args)
    assert got / tokens == pytest.approx(want, rel=1e-9)


def test_deepseek_v3_experts_map_to_model_moe():
    """DeepSeek-V3's config (n_shared_experts 1, moe_intermediate_size 2048,
    first_k_dense_replace 3, scoring_func sigmoid, norm_topk_prob, routed_scaling_factor 2.5,
    n_group 8, topk_group 4) as model.moe; its 3 dense + 58 MoE layers as layer kinds."""
    m = parse_scenario({"hardware": "h800-sxm", "model": {"from_hf": "deepseek-v3",
                                                          "seq_length": 4096}}, "s").model
    moe = m.moe
    assert (moe.experts, moe.top_k, moe.ffn_hidden_size, moe.shared_experts, moe.first_dense,
            moe.score, moe.normalized(), moe.scaling_factor, moe.groups, moe.group_top_k) == \
        (256, 8, 2048, 1, 3, "sigmoid", True, 2.5, 8, 4)
    assert m.ffn == 18432
    assert [k.ffn for k in layer_kinds(m)] == ["dense"] * 3 + ["moe"] * 58
