"""Hugging Face import of today's dense families (simulator/config/scenario/hf_dense.py):
the bundled configs' parameter counts match the published totals within 0.5% and their
FLOPs per token PaLM's formula; every key of a config is mapped, noted at run time or
refused by name, never dropped."""

from __future__ import annotations

import json

import pytest

from simulator.config.resources import bundled_dir
from simulator.config.scenario import parse_scenario
from simulator.config.scenario.hf import load_hf, read_hf_config
from simulator.errors import InputError

# Published totals (scenarios/models/SOURCES.md): Meta's model card / hub page for Llama 3
# 8B (8.03B) and Llama 3.1 405B (405B; Dubey et al. 2024, Table 3); the Qwen3-8B model
# card (8.2B, 6.95B non-embedding); the Gemma 3 technical report (arXiv:2503.19786), Table
# 1, Gemma 3 1B: 302M embedding + 698M non-embedding parameters.
STRICT = {"llama-3-8b": 8.03e9, "llama-3.1-405b": 405e9, "qwen3-8b": 8.2e9,
          "gemma-3-1b": 1.000e9}
NON_EMBEDDING = {"qwen3-8b": 6.95e9, "gemma-3-1b": 698e6}


@pytest.mark.parametrize("name", sorted(STRICT))
def test_parameters_match_the_published_totals_within_half_a_percent(name):
    count = load_hf(name).param_count()
    assert abs(count - STRICT[name]) / STRICT[name] < 0.005, (name, count)


@pytest.mark.parametrize("name", sorted(NON_EMBEDDING))
def test_non_embedding_parameters_match(name):
    m = load_hf(name)
    non_embedding = m.param_count() - m.vocab * m.hidden * (1 if m.tied else 2)
    assert abs(non_embedding - NON_EMBEDDING[name]) / NON_EMBEDDING[name] < 0.005


def _scenario(model: dict, overrides=(), tensor=8):
    return parse_scenario({"hardware": "h100-sxm", "cluster": {"devices_per_node": tensor},
                           "model": model, "training": {"global_batch_size": 8},
                           "parallel": {"data": 1, "tensor": tensor}}, "s.yaml",
                          list(overrides))


def _palm_flops_per_token(m, seq):
    """PaLM (Chowdhery et al. 2022, App. B): 6N + 12 L H Q T per token, N the GEMM
    parameters (every layer's projections and the LM head; not the input embedding, the
    norms and the biases), T the keys a query sees: summed over the layers, each layer's
    window where it is shorter than the sequence (every `global_every`-th layer global)."""
    q, kv = m.heads * m.head_dim, m.kv_heads * m.head_dim
    gemm = m.layers * (2 * m.hidden * q + 2 * m.hidden * kv + 3 * m.hidden * m.ffn)
    gemm += m.vocab * m.hidden  # the LM head, one GEMM whether tied or not
    keys = sum(seq if not m.sliding_window or (m.global_every and (i + 1) % m.global_every == 0)
               else min(m.sliding_window, seq) for i in range(m.layers))
    return 6 * gemm + 12 * m.heads * m.head_dim * keys


@pytest.mark.parametrize(("name", "seq", "layers"), [
    ("llama-3-8b", 8192, 4), ("qwen3-8b", 4096, 4), ("mistral-7b", 8192, 4),
    ("qwen2-7b", 4096, 4), ("gemma-3-1b", 4096, 12)])
def test_flops_per_token_follow_palm(name, seq, layers):
    """Mistral windows 4096 of 8192 keys in every layer; Gemma 3 512 in 10 of 12 layers."""
    from simulator.config.hardware.load import load_profile
    from simulator.simulation.simulate import simulate

    tensor = 1 if name == "gemma-3-1b" else 4
    s = _scenario({"from_hf": name, "seq_length": seq, "layers": layers}, tensor=tensor)
    got = simulate(s, load_profile("h100-sxm")).model_flops / (8 * seq)
    m = load_hf(name)
    want = _palm_flops_per_token(type(m)(**{**m.__dict__, "layers": layers}), seq)
    assert got == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("name", ["llama-3.1-405b", "qwen3-8b", "gemma-3-1b"])
def test_every_key_of_the_bundled_configs_is_read(name):
    assert not any("not read" in n for n in load_hf(name).notes)


def _cfg(name: str) -> dict:
    return json.loads((bundled_dir("scenarios") / "models" / f"{name}.json").read_text())


def _llama(**extra):
    return {**_cfg("llama-3.1-405b"), **extra}


def test_an_unknown_key_is_noted_and_the_notes_are_printed_at_run_time(invoke_cli, tmp_path):
    (tmp_path / "c.json").write_text(json.dumps(_llama(num_hidden_layers=2, hidden_size=256,
                                                       num_attention_heads=8,
                                                       intermediate_size=512,
                                                       vocab_size=512, shiny_new_key=3)))
    (tmp_path / "s.yaml").write_text(
        "hardware: h100-sxm\ncluster: {devices_per_node: 8}\n"
        "model: {from_hf: c.json, seq_length: 128}\nparallel: {data: 8}\n"
        "training: {global_batch_size: 8}\n")
    res = invoke_cli("run", str(tmp_path / "s.yaml"), "--json")
    assert res.exit_code == 0, res.stderr
    assert "note: model.from_hf: config key 'shiny_new_key' not read" in res.stderr
    assert "note: model.from_hf: rope_scaling: rescales the rotary angles" in res.stderr


@pytest.mark.parametrize(("cfg", "key"), [
    (_llama(mlp_bias=True), "mlp_bias"),
    (_llama(attention_bias=True), "attention_bias"),
    (_llama(hidden_act="gelu"), "hidden_act"),
    ({**_cfg("qwen3-8b"),
      "use_sliding_window": True, "sliding_window": 4096, "max_window_layers": 28},
     "use_sliding_window"),
    ({**_cfg("gemma-3-1b"),
      "layer_types": ["sliding_attention", "full_attention", "full_attention"]},
     "layer_types"),
])
def test_what_a_config_holds_that_cannot_be_simulated_is_refused_by_key(cfg, key):
    with pytest.raises(InputError) as err:
        read_hf_config(cfg, "c.json")
    assert f"config key '{key}'" in str(err.value)


def test_the_dense_keys_reach_the_model():
    m = _scenario({"from_hf": "qwen3-8b", "seq_length": 4096}).model
    assert (m.head_dim, m.qk_norm, m.tied, m.positions, m.norm_kind, m.rope_theta,
            m.dropout) == (128, True, False, "rope", "rmsnorm", 1e6, 0.0)
    q2 = _scenario({"from_hf": "qwen2-7b", "seq_length": 4096}, tensor=4).model
    assert q2.qkv_bias and q2.sliding_window is None
    mistral = _scenario({"from_hf": "mistral-7b", "seq_length": 8192}).model
    assert (mistral.sliding_window, mistral.global_every) == (4096, 0)
    gemma = load_hf("gemma-3-1b").model_fields()
    assert (gemma["sliding_window"], gemma["global_every"], gemma["tie_embeddings"],
            gemma["head_dim"]) == (512, 6, True, 256)


def test_the_bundled_405b_on_gb300_is_the_published_model():
    """scenarios/llama31-405b-576-gb300.yaml: 405.85B parameters, 126 = 9 x 14 layers."""
    from simulator.models.params import transformer_params

    path = bundled_dir("scenarios") / "llama31-405b-576-gb300.yaml"
    import yaml
    s = parse_scenario(yaml.safe_load(path.read_text()), str(path))
    assert transformer_params(s.model).total == load_hf("llama-3.1-405b").param_count()
    assert s.hardware == "gb300-nvl72" and s.parallel.pipeline * s.parallel.tensor == 72
