"""GPT-OSS from its Hugging Face config (`model_type: gpt_oss`, simulator/config/scenario/
hf_gptoss.py): parameters against OpenAI's published totals and active counts, the mapping
to the scenario's keys (windows of 128 on every other layer, sinks, q/k/v biases, 128
experts of top 4), what cannot be expressed refused by its key, and the model FLOPs per
token of the bundled 64 x H100 scenario against Megatron-LM's formula."""

from __future__ import annotations

import json

import pytest
import yaml

from simulator.config.hardware import load_profile
from simulator.config.resources import bundled_dir, resolve_yaml
from simulator.config.scenario import parse_scenario
from simulator.config.scenario.hf import load_hf, read_hf_config
from simulator.errors import InputError
from simulator.simulation.simulate import simulate

# OpenAI, "gpt-oss-120b & gpt-oss-20b Model Card" (arXiv:2508.10925), Table 1: total and
# active parameters, 120b and 20b
PUBLISHED = {"gpt-oss-120b": (116.83e9, 5.13e9), "gpt-oss-20b": (20.91e9, 3.61e9)}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_total_and_active_parameters_match_the_model_card(name):
    """Totals within 0.5% (they agree to the card's four digits: 116,829,156,672 and
    20,914,757,184, sinks and every bias counted). The card's active count is per token
    of the forward pass: the top-4 experts, attention, router, norms and the unembedding,
    without the embedding table, which a token reads one row of (its Table 1: 5.13B = the
    model less 124 of 128 experts per layer less 0.58B of embedding); `param_count(active=
    True)` counts the embedding as model cards of Mixtral and Qwen do, so the table's rows
    are taken off here."""
    m = load_hf(name)
    total, active = PUBLISHED[name]
    assert abs(m.param_count() - total) / total < 0.005
    assert round(m.param_count() / 1e7) == round(total / 1e7)
    per_token = m.param_count(active=True) - m.vocab * m.hidden
    assert abs(per_token - active) / active < 0.005
    assert round(per_token / 1e7) == round(active / 1e7)


def test_gpt_oss_closed_form():
    """One layer (GptOssDecoderLayer): q/k/v/o with biases, 64 sinks, two RMSNorms, the
    router with its bias, 128 experts of a 2880 x 5760 gate_up and a 2880 x 2880 down with
    their biases; the card's split (Table 1): MLP 114.71B, attention 0.96B, embedding and
    unembedding 1.16B."""
    h, q, kv, f, v, experts = 2880, 64 * 64, 8 * 64, 2880, 201088, 128
    attention = h * (q + 2 * kv) + q * h + (q + 2 * kv) + h + 64
    mlp = h * experts + experts + experts * (3 * h * f + 2 * f + h)
    assert load_hf("gpt-oss-120b").param_count() == 2 * v * h + 36 * (attention + mlp + 2 * h) + h
    assert round(36 * mlp / 1e7) == 11471
    assert round(36 * attention / 1e7) == 96
    assert round(2 * v * h / 1e7) == 116


def _bundled(name: str, overrides=()):
    path = resolve_yaml(name, "scenarios")
    return parse_scenario(yaml.safe_load(path.read_text()), str(path), list(overrides))


def test_gpt_oss_maps_to_the_scenario_keys():
    m = _bundled("gpt-oss-120b-64-h100").model
    assert (m.layers, m.hidden_size, m.num_heads, m.kv_heads, m.head_size, m.ffn,
            m.vocab_size, m.tied, m.positions, m.norm_kind, m.rope_theta) == \
        (36, 2880, 64, 8, 64, 2880, 201088, False, "rope", "rmsnorm", 150000.0)
    assert (m.qkv_bias, m.attention_sinks, m.sliding_window, m.global_every, m.dropout) == \
        (True, True, 128, 2, 0.0)
    assert [m.layer_window(i) for i in range(4)] == [128, 0, 128, 0]
    moe = m.moe
    assert (moe.experts, moe.top_k, moe.expert_ffn(m.ffn), moe.shared_experts,
            moe.first_dense, moe.every, moe.score, moe.normalized(), moe.dropless) == \
        (128, 4, 2880, 0, 0, 1, "softmax", True, True)


def _cfg(**extra) -> dict:
    path = bundled_dir("scenarios") / "models" / "gpt-oss-120b.json"
    return {**json.loads(path.read_text(encoding="utf-8")), **extra}


def test_what_is_not_priced_is_noted_and_unknown_keys_are_named():
    notes = read_hf_config(_cfg(new_key=1), "c.json").notes
    assert any(n.startswith("gpt_oss: biases on the attention output projection") for n in notes)
    assert any(n.startswith("swiglu_limit: ") for n in notes)
    assert notes[-1] == "config key 'new_key' not read (the gpt_oss reader does not know it)"
    for extra in ({"sliding_window": None}, {"layer_types": ["full_attention"] * 36}):
        full = read_hf_config(_cfg(**extra), "c.json").model_fields()
        assert "sliding_window" not in full and "global_every" not in full


@pytest.mark.parametrize("extra,message", [
    ({"experts_per_token": 2}, "config key 'experts_per_token': 2 cannot be simulated: it "
                               "differs from num_experts_per_tok (4)"),
    ({"hidden_act": "gelu"}, "config key 'hidden_act': 'gelu' cannot be simulated: gpt_oss "
                             "experts are a clamped SwiGLU (silu)"),
    ({"tie_word_embeddings": True}, "config key 'tie_word_embeddings': True cannot be "
                                    "simulated: GptOssForCausalLM unties its head"),
    ({"layer_types": ["full_attention", "sliding_attention"] * 18},
     "config key 'layer_types': '[...]' cannot be simulated: only sliding layers with every "
     "k-th layer full (model.global_every) are simulated"),
    ({"layer_types": ["sliding_attention", "full_attention"]},
     "config key 'layer_types': '[2 entries]' cannot be simulated: expected one per layer "
     "(num_hidden_layers 36)"),
    ({"num_local_experts": 1}, "config key 'num_local_experts': 1 cannot be simulated: a "
     "mixture of experts needs at least 2 experts and no fewer than num_experts_per_tok (4)"),
    ({"attention_bias": "yes"}, "attention_bias: found 'yes'; expected true or false"),
])
def test_what_gpt_oss_cannot_express_is_refused_by_name(extra, message):
    with pytest.raises(InputError) as err:
        read_hf_config(_cfg(**extra), "c.json")
    assert str(err.value) == f"c.json: model.from_hf: {message}"


def test_model_flops_per_token_follow_megatron_formula_with_the_window():
    """Megatron-LM's `num_floating_point_operations` (megatron/training/training.py; the
    MoE form of tests/test_hf_moe.py: every GEMM 6 x its size per token, core attention
    counted in full, 12 s q per layer, the router 6 h E) with the window in place of the
    sequence in the 18 windowed layers (Megatron-Bridge's flop_utils counts the full and
    sliding-window layers apart the same way, swa_context = min(window, s)): 128 keys a
    query, not 4096. Biases and sinks add no matmul FLOPs."""
    s = _bundled("gpt-oss-120b-64-h100")
    got = simulate(s, load_profile("h100-sxm")).model_flops
    tokens = s.training.global_batch_size * s.model.seq_length
    h, layers, q, kv, f, v, seq, window = 2880, 36, 4096, 512, 2880, 201088, 4096, 128
    gemms = layers * (h * (q + 2 * kv) + q * h + 4 * 3 * h * f + 128 * h) + v * h
    core = 12 * q * (layers // 2 * seq + layers // 2 * min(window, seq))
    assert got / tokens == pytest.approx(6 * gemms + core, rel=1e-12)


def test_a_pipeline_cuts_between_any_two_layers_as_megatron_does():
    """The windowed and full layers differ in their window alone, so a stage may hold an
    odd number of them: Megatron-Core's even split of 36 layers over 4 stages is 9 each
    (the Megatron-Bridge 25.11 H100 recipe); the program runs one block per kind,
    alternating (`models.layers.windows_only`). 36 stages hold one layer each; 37 have
    not one each."""
    from simulator.models.layers import layer_kinds, layer_plan
    from simulator.models.transformer import transformer_model

    s = _bundled("gpt-oss-120b-64-h100", ["parallel.pipeline_layers=[9,9,9,9]"])
    lp = layer_plan(layer_kinds(transformer_model(s.model)))
    assert (lp.unit, lp.runs) == (1, ((0, 1), (1, 1)) * 18)
    assert [k.window for g, _ in lp.groups for k in g] == [128, 0]
    with pytest.raises(InputError) as err:
        _bundled("gpt-oss-120b-64-h100", ["parallel.pipeline=37", "parallel.pipeline_layers=null",
                                          "parallel.data=1",
                                          "parallel.expert=1", "cluster.nodes=37",
                                          "cluster.devices_per_node=1"])
    assert err.value.key == "parallel.pipeline"
    assert "37 stages x 1 chunks need at least 37 layers" in err.value.message
    assert tuple(simulate(s, load_profile("h100-sxm")).plan.stage_layers) == (9, 9, 9, 9)
