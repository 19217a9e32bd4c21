"""Models from Hugging Face config.json: every bundled config loads and its parameter count
equals the published one within 1% (sources: scenarios/models/SOURCES.md); the mapped
transformer simulates; a mixture of experts maps to model.moe."""

from __future__ import annotations

import json

import pytest

from simulator.config.resources import list_bundled
from simulator.config.scenario import parse_scenario
from simulator.config.scenario.hf import bundled_models, load_hf
from simulator.errors import InputError

# Published totals, cited per file in scenarios/models/SOURCES.md.
PUBLISHED = {
    "gpt2": 124e6, "gpt2-medium": 355e6, "gpt2-large": 774e6,
    "pythia-160m": 162_322_944, "pythia-1.4b": 1_414_647_808, "pythia-6.9b": 6_857_302_016,
    "gpt-neox-20b": 20_554_567_680,
    "llama-2-7b": 6.74e9, "llama-2-13b": 13.0e9, "llama-2-70b": 69.0e9, "llama-3-8b": 8.03e9,
    "mistral-7b": 7.3e9, "mixtral-8x7b": 46.7e9, "qwen2-0.5b": 0.494e9, "qwen2-7b": 7.62e9,
    "llama-3.1-405b": 405e9, "qwen3-8b": 8.2e9, "gemma-3-1b": 1.0e9,
    "qwen3-30b-a3b": 30.5e9, "qwen3-235b-a22b": 235e9,
    "nemotron-h-47b": 47e9, "nemotron-h-56b": 56e9,
    "deepseek-v3": 671e9,
    "gpt-oss-120b": 116.83e9, "gpt-oss-20b": 20.91e9,
}


def test_every_bundled_config_is_cited():
    assert bundled_models() == sorted(PUBLISHED)
    assert not any(name.startswith("models/") for name in list_bundled("scenarios"))


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_parameter_count_matches_published(name):
    count = load_hf(name).param_count()
    assert abs(count - PUBLISHED[name]) / PUBLISHED[name] < 0.01, (name, count)


def test_llama_2_7b_closed_form():
    """Touvron et al. 2023 shape: 32 x (4 h^2 + 3 h ffn + 2 h) + 2 V h + h."""
    m = load_hf("llama-2-7b")
    h, f, v = 4096, 11008, 32000
    assert (m.hidden, m.layers, m.heads, m.kv_heads, m.ffn, m.vocab, m.tied) == \
        (h, 32, 32, 32, f, v, False)
    assert m.param_count() == 32 * (4 * h * h + 3 * h * f + 2 * h) + 2 * v * h + h


def _scenario(model: dict, overrides=(), tensor=8):
    return parse_scenario({"hardware": "a100-80gb", "cluster": {"devices_per_node": tensor},
                           "model": model, "parallel": {"data": 1, "tensor": tensor}},
                          "s.yaml", list(overrides))


def test_from_hf_maps_the_model_and_written_keys_win():
    sc = _scenario({"from_hf": "mistral-7b", "seq_length": 4096})
    m = sc.model
    assert (m.layers, m.hidden_size, m.num_heads, m.num_kv_heads, m.ffn_hidden_size,
            m.ffn_activation, m.vocab_size, m.seq_length) == \
        (32, 4096, 32, 8, 14336, "swiglu", 32000, 4096)
    gpt2 = _scenario({"from_hf": "gpt2", "vocab_size": 50304}, tensor=4)
    assert (gpt2.model.ffn_activation, gpt2.model.ffn, gpt2.model.seq_length,
            gpt2.model.vocab_size) == ("gelu", 3072, 1024, 50304)


def test_from_hf_path_relative_to_scenario(tmp_path):
    cfg = {"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 2,
           "num_attention_heads": 8, "intermediate_size": 512, "vocab_size": 1024,
           "max_position_embeddings": 128}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    sc = parse_scenario({"hardware": "a100-80gb", "model": {"from_hf": "config.json"}},
                        str(tmp_path / "s.yaml"))
    assert (sc.model.hidden_size, sc.model.kv_heads, sc.model.seq_length) == (256, 8, 128)


def test_mixture_of_experts_maps_to_model_moe():
    """Mixtral's num_local_experts / num_experts_per_tok are model.moe's experts / top_k; a
    moe written beside from_hf is merged into them."""
    assert (load_hf("mixtral-8x7b").experts, load_hf("mixtral-8x7b").top_k) == (8, 2)
    moe = _scenario({"from_hf": "mixtral-8x7b", "seq_length": 512}).model.moe
    assert (moe.experts, moe.top_k, moe.capacity_factor, moe.every) == (8, 2, 1.0, 1)
    moe = _scenario({"from_hf": "mixtral-8x7b", "seq_length": 512,
                     "moe": {"capacity_factor": 4.0}}).model.moe
    assert (moe.experts, moe.top_k, moe.capacity_factor) == (8, 2, 4.0)


def test_unknown_model_and_override_are_blamed():
    with pytest.raises(InputError, match=r"^s.yaml: model.from_hf: found 'llama-9'"):
        _scenario({"from_hf": "llama-9"})
    with pytest.raises(InputError, match=r"^s.yaml with --set model.from_hf=bert: "
                       r"model.from_hf: found 'bert'"):
        _scenario({"from_hf": "gpt2"}, ["model.from_hf=bert"])


def test_from_hf_simulates_as_the_transcribed_model():
    from simulator.config.hardware.load import load_profile
    from simulator.simulation.simulate import simulate

    hw = load_profile("a100-80gb")
    via_hf = _scenario({"from_hf": "llama-2-7b", "seq_length": 512})
    written = _scenario({"type": "transformer", "layers": 32, "hidden_size": 4096,
                         "num_heads": 32, "num_kv_heads": 32, "ffn_hidden_size": 11008,
                         "ffn_activation": "swiglu", "vocab_size": 32000, "seq_length": 512,
                         "dropout": 0.0})  # Llama 2: attention_dropout 0.0, no dropout
    assert simulate(via_hf, hw).iteration_time_s == simulate(written, hw).iteration_time_s
