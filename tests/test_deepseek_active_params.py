"""DeepSeek-V3's active parameters (issue 22 item 4), explained term by term.

The published figures: "671B total parameters with 37B activated for each token"
(arXiv:2412.19437, abstract and Sec. 1), and, more precisely, deepseek-ai/DeepSeek-V3
README_WEIGHTS.md, "Main Model Weights": "Activation parameters: 36.7B (including 0.9B for
Embedding and 0.9B for the output Head)"; the MTP module is counted apart ("Activation
parameters: 2.4B (including the shared 0.9B Embedding and 0.9B output Head)").

What a token runs through in the main model, from the bundled config (HF DeepseekV3Config):
the embedding and the untied LM head (V h each), 61 MLA blocks with their two RMSNorm gains,
3 dense SwiGLU FFNs, and in each of the 58 MoE layers 8 routed + 1 shared expert
(3 h f each), the router (E h) and its score-correction bias (E), and the final norm:
37,552,297,472 (37.55B, `param_count(active=True)`). Less the input embedding table (a
lookup reads one row a token): 36.625B, within 0.5% of README_WEIGHTS' 36.7B; the 37B of the
report is that figure rounded. So the count printed includes both tables, as
README_WEIGHTS says it does, and stands 2.3% above its 36.7B; the MTP module is not in it.
"""

from __future__ import annotations

from simulator.config.scenario.hf import load_hf

H, V, N, L, DENSE = 7168, 129280, 128, 61, 3
QL, KVL, DN, DR, DV = 1536, 512, 128, 64, 128
E, TOP, SHARED, F_MOE, F_DENSE = 256, 8, 1, 2048, 18432


def _mla() -> int:
    """One MLA block (DeepSeek-V2 Sec. 2.1): W_DQ, its norm, W_UQ + W_QR; W_DKV + W_KR,
    its norm, W_UK + W_UV; W_O."""
    q = H * QL + QL + QL * N * (DN + DR)
    kv = H * (KVL + DR) + KVL + KVL * N * (DN + DV)
    return q + kv + N * DV * H


def _terms() -> dict[str, int]:
    moe_layers = L - DENSE
    return {
        "embedding": V * H,
        "lm_head": V * H,
        "attention": L * (_mla() + 2 * H),
        "dense_ffn": DENSE * 3 * H * F_DENSE,
        "experts": moe_layers * (TOP + SHARED) * 3 * H * F_MOE,
        "router": moe_layers * E * (H + 1),
        "final_norm": H,
    }


def test_active_parameters_closed_form():
    m = load_hf("deepseek-v3")
    terms = _terms()
    assert m.param_count(active=True) == sum(terms.values()) == 37_552_297_472


def test_active_parameters_against_the_published_figures():
    active = load_hf("deepseek-v3").param_count(active=True)
    without_lookup = active - _terms()["embedding"]
    assert abs(without_lookup - 36.7e9) / 36.7e9 < 0.005       # README_WEIGHTS: 36.7B
    assert round(without_lookup / 1e9) == 37                     # the report's 37B
    assert abs(active - 36.7e9) / 36.7e9 > 0.02                  # both tables: 2.3% above


def test_total_is_the_main_model_without_mtp():
    """671B: the total counts every routed expert and leaves the MTP module out (its 11.5B
    unique parameters are apart, README_WEIGHTS)."""
    m = load_hf("deepseek-v3")
    all_experts = sum(_terms().values()) + (L - DENSE) * (E - TOP) * 3 * H * F_MOE
    assert m.param_count() == all_experts
    assert abs(m.param_count() - 671e9) / 671e9 < 0.005


def test_dropout_is_the_configs_attention_dropout_default_zero():
    """transformers' DeepseekV3Config defaults attention_dropout to 0.0 and the published
    config leaves it out: the model gets 0.0, not the scenario schema's 0.1 default."""
    import json

    import pytest

    from simulator.config.resources import bundled_dir
    from simulator.config.scenario.hf import read_hf_config
    from simulator.errors import InputError

    assert load_hf("deepseek-v3").model_fields()["dropout"] == 0.0
    cfg = json.loads((bundled_dir("scenarios") / "models" / "deepseek-v3.json").read_text())
    assert read_hf_config({**cfg, "attention_dropout": 0.25}, "s").model_fields()[
        "dropout"] == 0.25
    with pytest.raises(InputError, match=r"attention_dropout: found 'x'; expected a number "
                       r"from 0 to below 1"):
        read_hf_config({**cfg, "attention_dropout": "x"}, "s")
