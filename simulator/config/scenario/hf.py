"""Models from Hugging Face `config.json` files, read offline: `model: {from_hf: PATH}`.

PATH is a config.json file (as given, or relative to the scenario's folder) or the name of
a bundled config in `scenarios/models/` (e.g. `llama-2-7b`). The keys each architecture's
transformers class reads (transformers/models/*/configuration_*.py):

    llama, mistral, mixtral, qwen2   hidden_size, num_hidden_layers, num_attention_heads,
                                     num_key_value_heads, intermediate_size, hidden_act
                                     (silu: a SwiGLU FFN), vocab_size, tie_word_embeddings,
                                     max_position_embeddings, head_dim, num_local_experts,
                                     num_experts_per_tok (Mixtral: experts, top_k)
    gpt2                             n_embd, n_layer, n_head, n_inner (None: 4 n_embd),
                                     activation_function, vocab_size, n_positions (tied)
    gpt_neox                         hidden_size, num_hidden_layers, num_attention_heads,
                                     intermediate_size, hidden_act, vocab_size,
                                     tie_word_embeddings, max_position_embeddings
    deepseek_v3, kimi_k2             the multi-head latent attention, multi-token
                                     prediction and expert keys (hf_deepseek.py)
    gpt_oss                          windows, sinks, biased attention and experts
                                     (hf_gptoss.py)

    qwen3_moe                        as llama, with num_experts, num_experts_per_tok,
                                     moe_intermediate_size (each expert's width),
                                     decoder_sparse_step, mlp_only_layers, norm_topk_prob
                                     (transformers' Qwen3MoeConfig)

A mixture of experts (num_local_experts > 1) becomes `model.moe` with `experts` and `top_k`
(num_experts_per_tok) in every layer (transformers' MixtralSparseMoeBlock); Qwen3-MoE's
experts are `moe_intermediate_size` wide (`model.moe.ffn_hidden_size`) in every
`decoder_sparse_step`-th layer, dense layers listed in `mlp_only_layers` taken when they
lead (`model.moe.first_dense`) and refused otherwise; its capacity
factor is the scenario's (`capacity_factor` of `model.moe`, default 1.0): Hugging Face's
Mixtral routes without dropping tokens, which a capacity of `experts / top_k` reproduces.
The model keeps what the config says of its head (tie_word_embeddings), positions (a
learned table for gpt2, rotary otherwise), norm, head size, q/k/v biases and q/k norms,
attention windows and dropout. The dense families of today (llama 3.x, mistral, qwen2,
qwen3, gemma3_text) are read by `hf_dense`, which accounts for every key of the config:
mapped, inert, printed as a note at run time (`hf_notes`), or refused by name. A model
carries linear biases exactly when its FFN is gelu (GPT-2, GPT-NeoX) or on q/k/v alone
(`qkv_bias`). Keys written next to `from_hf` override the config's (e.g. `seq_length`,
`vocab_size`, `dtype`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from simulator.config.resources import bundled_dir
from simulator.config.scenario.hf_deepseek import deepseek_keys
from simulator.config.scenario.hf_dense import DENSE_FAMILIES, read_dense
from simulator.config.scenario.hf_gptoss import read_gpt_oss
from simulator.config.scenario.hf_model import KEY, HfModel, activation, count, need
from simulator.config.scenario.hf_nemotron import read_nemotron_h
from simulator.errors import InputError

__all__ = ["HfModel", "read_hf_config", "load_hf", "expand_from_hf", "bundled_models",
           "hf_notes"]

def _llama(cfg: dict[str, Any], src: str) -> HfModel:
    """LlamaConfig / MistralConfig / MixtralConfig / Qwen2Config."""
    h, heads = need(cfg, "hidden_size", src), need(cfg, "num_attention_heads", src)
    return HfModel(
        family=cfg["model_type"], hidden=h, layers=need(cfg, "num_hidden_layers", src),
        heads=heads, kv_heads=cfg.get("num_key_value_heads") or heads,
        head_dim=cfg.get("head_dim") or h // heads, ffn=need(cfg, "intermediate_size", src),
        activation=activation(cfg.get("hidden_act", "silu"), True, src),
        vocab=need(cfg, "vocab_size", src), tied=bool(cfg.get("tie_word_embeddings", False)),
        experts=count(cfg, "num_local_experts", src),
        top_k=count(cfg, "num_experts_per_tok", src),
        max_positions=need(cfg, "max_position_embeddings", src),
        qkv_bias=cfg["model_type"] == "qwen2" or bool(cfg.get("attention_bias", False)))


def _qwen3_moe(cfg: dict[str, Any], src: str) -> HfModel:
    """Qwen3MoeConfig (transformers/models/qwen3_moe/configuration_qwen3_moe.py): a layer
    is sparse when it is not in mlp_only_layers and (layer + 1) % decoder_sparse_step == 0
    (Qwen3MoeDecoderLayer); no shared experts."""
    dense = cfg.get("mlp_only_layers") or []
    if not isinstance(dense, list) or dense != list(range(len(dense))):
        raise InputError(src, KEY, f"mlp_only_layers: found {dense!r}; only leading dense "
                         "layers [0, 1, ..., k-1] are simulated (model.moe.first_dense)")
    every = count(cfg, "decoder_sparse_step", src)
    if dense and every != 1:
        raise InputError(src, KEY, f"mlp_only_layers {dense} with decoder_sparse_step="
                         f"{every} is not simulated (allowed: one of the two)")
    base = _llama({**cfg, "num_local_experts": None}, src)
    norm = cfg.get("norm_topk_prob", False)
    if not isinstance(norm, bool):
        raise InputError(src, KEY, f"norm_topk_prob: found {norm!r}; expected true or false")
    return replace(base, experts=count(cfg, "num_experts", src),
                   top_k=count(cfg, "num_experts_per_tok", src),
                   expert_ffn=need(cfg, "moe_intermediate_size", src), first_dense=len(dense),
                   moe_every=every, normalize=norm,
                   # Qwen3's attention (Qwen3MoeAttention as Qwen3Attention): its own
                   # head_dim, an RMSNorm of every query and key head, no dropout
                   head_dim_given="head_dim" in cfg, qk_norm=True,
                   rope_theta=float(cfg.get("rope_theta", 10000.0)),
                   dropout=float(cfg.get("attention_dropout", 0.0)))


def _gpt2(cfg: dict[str, Any], src: str) -> HfModel:
    """GPT2Config: learned positions, LayerNorm, biases everywhere, tied head."""
    h, heads = need(cfg, "n_embd", src), need(cfg, "n_head", src)
    return HfModel(
        family="gpt2", hidden=h, layers=need(cfg, "n_layer", src), heads=heads,
        kv_heads=heads, head_dim=h // heads, ffn=cfg.get("n_inner") or 4 * h,
        activation=activation(cfg.get("activation_function", "gelu_new"), False, src),
        vocab=need(cfg, "vocab_size", src), tied=bool(cfg.get("tie_word_embeddings", True)),
        experts=1, max_positions=need(cfg, "n_positions", src), norm="layer", bias=True,
        positions=need(cfg, "n_positions", src))


def _neox(cfg: dict[str, Any], src: str) -> HfModel:
    """GPTNeoXConfig: rotary positions, LayerNorm, biases everywhere, untied head."""
    h, heads = need(cfg, "hidden_size", src), need(cfg, "num_attention_heads", src)
    return HfModel(
        family="gpt_neox", hidden=h, layers=need(cfg, "num_hidden_layers", src), heads=heads,
        kv_heads=heads, head_dim=h // heads, ffn=need(cfg, "intermediate_size", src),
        activation=activation(cfg.get("hidden_act", "gelu"), False, src),
        vocab=need(cfg, "vocab_size", src), tied=bool(cfg.get("tie_word_embeddings", False)),
        experts=1, max_positions=need(cfg, "max_position_embeddings", src), norm="layer",
        bias=True)


def _deepseek_v3(cfg: dict[str, Any], src: str) -> HfModel:
    """DeepseekV3Config (DeepSeek-V3/R1, Kimi-K2): a Llama's keys (intermediate_size: the
    dense layers' FFN, n_routed_experts and num_experts_per_tok: the routed experts) and
    its own (`hf_deepseek.deepseek_keys`)."""
    h, heads = need(cfg, "hidden_size", src), need(cfg, "num_attention_heads", src)
    own = deepseek_keys(cfg, src)
    return HfModel(
        family=str(cfg["model_type"]), hidden=h, layers=need(cfg, "num_hidden_layers", src),
        heads=heads, kv_heads=heads, head_dim=own.qk_nope_head_dim + own.qk_rope_head_dim,
        ffn=need(cfg, "intermediate_size", src),
        activation=activation(cfg.get("hidden_act", "silu"), True, src),
        vocab=need(cfg, "vocab_size", src), tied=bool(cfg.get("tie_word_embeddings", False)),
        experts=count(cfg, "n_routed_experts", src),
        top_k=count(cfg, "num_experts_per_tok", src),
        max_positions=need(cfg, "max_position_embeddings", src), deepseek=own,
        expert_ffn=own.moe_ffn, shared_ffn=own.shared_experts * own.moe_ffn,
        first_dense=own.first_dense, moe_every=own.moe_every, normalize=own.normalize,
        # transformers' DeepseekV3Config: attention_dropout defaults to 0.0 (the published
        # configs leave it out); the model has no other dropout
        dropout=_share(cfg, "attention_dropout", src))


def _share(cfg: dict[str, Any], key: str, src: str) -> float:
    """A probability of the config, 0.0 when absent."""
    value = cfg.get(key, 0.0)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
        raise InputError(src, KEY, f"{key}: found {value!r}; expected a number from 0 to "
                         "below 1")
    return float(value)


READERS: dict[str, Callable[[dict[str, Any], str], HfModel]] = {
    "llama": _llama, "mistral": _llama, "mixtral": _llama, "qwen2": _llama,
    "gpt2": _gpt2, "gpt_neox": _neox,
    "deepseek_v3": _deepseek_v3,
    # Kimi-K2 reuses DeepseekV3ForCausalLM with model_type 'kimi_k2' (Moonshot AI's
    # Kimi-K2 deployment guide: "we set model_type kimi_k2 in config.json")
    "kimi_k2": _deepseek_v3,
    "qwen3_moe": _qwen3_moe,
    "gpt_oss": lambda cfg, src: HfModel(**read_gpt_oss(cfg, src)),
}
# today's dense families: every config key mapped, noted or refused (`hf_dense`)
READERS.update({family: lambda cfg, src: HfModel(**read_dense(cfg, src))
                for family in DENSE_FAMILIES})


def read_hf_config(cfg: dict[str, Any], src: str) -> HfModel:
    """The HfModel of a parsed config.json; InputError naming model.from_hf otherwise."""
    kind = cfg.get("model_type")
    if kind not in READERS:
        raise InputError(src, KEY, f"model_type {kind!r} is not read; allowed: "
                         f"{', '.join(READERS)}")
    return READERS[kind](cfg, src)


_NOTES: dict[str, tuple[str, ...]] = {}  # per scenario source, what its config's import noted


def hf_notes(source: str) -> tuple[str, ...]:
    """What reading the config of scenario `source`'s `model.from_hf` noted: keys that
    change numbers the simulation does not price, and keys it does not read."""
    return tuple(f"model.from_hf: {n}" for n in _NOTES.get(source, ()))


def bundled_models() -> list[str]:
    """Names of the configs in scenarios/models/."""
    return sorted(p.stem for p in (bundled_dir("scenarios") / "models").glob("*.json"))


def _config_path(ref: str, source: str) -> Path:
    for path in (Path(ref), Path(source).parent / ref,
                 bundled_dir("scenarios") / "models" / f"{ref}.json"):
        if path.is_file():
            return path
    raise InputError(source, KEY, f"found {ref!r}, which is neither a config.json file nor a "
                     f"bundled model; bundled: {', '.join(bundled_models())}")


def load_hf(ref: str, source: str = "<scenario>") -> HfModel:
    """The HfModel of a config.json path or bundled model name."""
    path = _config_path(ref, source)
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:  # JSON, UTF-8 and 4300-digit integer errors
        raise InputError(source, KEY, f"{path}: not a readable JSON file ({exc})") from None
    except RecursionError:
        raise InputError(source, KEY, f"{path}: nested too deeply to be a config.json "
                         "(a model config nests 2 or 3 levels)") from None
    if not isinstance(cfg, dict):
        raise InputError(source, KEY, f"{path}: expected a JSON object")
    return read_hf_config(cfg, source)


def expand_from_hf(data: dict[str, Any], source: str) -> dict[str, Any]:
    """`data` with `model.from_hf` replaced by the model keys it reads (keys written beside
    it win; a `moe` written beside it is merged into the config's experts)."""
    model = data.get("model")
    if not isinstance(model, dict) or "from_hf" not in model:
        return data
    ref = model["from_hf"]
    if not isinstance(ref, str):
        raise InputError(source, KEY, f"found {ref!r}; expected a config.json path or a "
                         f"bundled model name ({', '.join(bundled_models())})")
    hf = load_hf(ref, source)
    _NOTES[source] = hf.notes
    fields = hf.model_fields()
    moe = model.get("moe")
    if isinstance(moe, dict) and isinstance(fields.get("moe"), dict):
        model = {**model, "moe": {**fields["moe"], **moe}}
    fields.update({k: v for k, v in model.items() if k != "from_hf"})
    return {**data, "model": fields}


READERS["nemotron_h"] = read_nemotron_h
