"""Dense decoders of today's Hugging Face configs (transformers/models/*/configuration_*.py):
llama (Llama 2 / 3.x), mistral, qwen2, qwen3 and gemma3_text. Every key of their
config.json is accounted for: read into the model (`_MAPPED`), inert for a training
simulation with the reason (`_INERT`), read with a note printed at run time where the key
changes numbers the simulation does not price (`_NOTED`), or refused by name where its value
cannot be expressed. A key none of these name is printed as a note ("not read"), never
dropped silently.

What each family adds to a Llama decoder (RMSNorm, RoPE, SwiGLU, untied head unless
tie_word_embeddings):
- mistral: `sliding_window` on every layer (null: none);
- qwen2: q/k/v biases (Qwen2Attention: q_proj, k_proj, v_proj with bias=True);
  `use_sliding_window` windows the layers from `max_window_layers` on: refused (per-layer);
- qwen3: `head_dim` of its own and an RMSNorm of every query and key head (Qwen3Attention
  q_norm / k_norm), no biases;
- gemma3_text: head_dim, q/k norms, tied head (Gemma3TextConfig tie_word_embeddings True),
  GeGLU (gelu_pytorch_tanh gate: priced as SwiGLU, the same three GEMMs), sliding-window
  layers with every `sliding_window_pattern`-th layer global (5 local : 1 global), and two
  more RMSNorms per layer (post-attention and post-FFN: their 2h gains counted, their
  kernels noted as not priced).
"""

from __future__ import annotations

from typing import Any

from simulator.errors import InputError

__all__ = ["read_dense", "DENSE_FAMILIES"]

_KEY = "model.from_hf"

DENSE_FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "gemma3_text")

_MAPPED = {"model_type", "hidden_size", "num_hidden_layers", "num_attention_heads",
           "num_key_value_heads", "intermediate_size", "hidden_act", "hidden_activation",
           "vocab_size", "tie_word_embeddings", "max_position_embeddings", "head_dim",
           "rope_theta", "attention_bias", "mlp_bias", "attention_dropout", "sliding_window",
           "use_sliding_window", "max_window_layers", "sliding_window_pattern", "layer_types",
           "final_logit_softcapping", "attn_logit_softcapping"}
_INERT = {
    "architectures": "the class name (model_type decides)",
    "transformers_version": "the library version that wrote the file",
    "torch_dtype": "the checkpoint's dtype (model.dtype decides the training dtype)",
    "dtype": "the checkpoint's dtype (model.dtype decides the training dtype)",
    "bos_token_id": "a token id", "eos_token_id": "a token id", "pad_token_id": "a token id",
    "initializer_range": "initialisation", "rms_norm_eps": "a norm's epsilon",
    "use_cache": "the inference cache", "cache_implementation": "the inference cache",
    "pretraining_tp": "Llama 2's checkpoint slicing of the inference matmuls",
}
_NOTED = {
    "rope_scaling": "rescales the rotary angles (long-context extension): same cost",
    "query_pre_attn_scalar": "sets the attention scale (1/sqrt of it): same cost",
    "rope_local_base_freq": "the rotary base of the local layers: same cost",
}


def _int(cfg: dict[str, Any], key: str, src: str, default: int | None = None) -> int:
    value = cfg.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 100_000_000:
        raise InputError(src, _KEY, f"the config's '{key}' is {value!r}; expected a positive "
                         "integer")
    return value


def _refuse(src: str, key: str, value: Any, why: str) -> InputError:
    return InputError(src, _KEY, f"config key '{key}': {value!r} cannot be simulated: {why}")


def _activation(cfg: dict[str, Any], family: str, src: str) -> tuple[str, list[str]]:
    """('swiglu', notes): SiLU gates are SwiGLU; Gemma's tanh-GELU gate is priced as it."""
    key = "hidden_activation" if family == "gemma3_text" else "hidden_act"
    value = cfg.get(key, "gelu_pytorch_tanh" if family == "gemma3_text" else "silu")
    if value == "silu":
        return "swiglu", []
    if family == "gemma3_text" and value in ("gelu_pytorch_tanh", "gelu"):
        return "swiglu", [f"{key} {value}: a gated GELU (GeGLU), priced as SwiGLU (the same "
                          "three GEMMs; the gate's elementwise kernel differs)"]
    raise _refuse(src, key, value, "a gated FFN with silu (SwiGLU) is simulated"
                  + (", or gelu_pytorch_tanh for gemma3_text" if family == "gemma3_text" else ""))


def _windows(cfg: dict[str, Any], family: str, layers: int, src: str) -> tuple[int, int]:
    """(sliding window, global_every) of the config's attention layers."""
    window = cfg.get("sliding_window")
    if family in ("qwen2", "qwen3"):
        if not cfg.get("use_sliding_window", False):
            return 0, 0
        first = cfg.get("max_window_layers", layers)
        if first < layers:
            raise _refuse(src, "use_sliding_window", True, f"windows on layers "
                          f"{first}..{layers - 1} only (max_window_layers {first}) differ "
                          "from layer to layer as no pattern of model.global_every does")
    if window is None:
        return 0, 0
    window = _int(cfg, "sliding_window", src)
    if family != "gemma3_text":
        return window, 0
    types = cfg.get("layer_types")
    every = _int(cfg, "sliding_window_pattern", src, 6)
    if types is not None:
        every = _pattern(types, src)
    return window, every


def _pattern(types: Any, src: str) -> int:
    """global_every of a `layer_types` list: sliding layers with every k-th full."""
    if not isinstance(types, list) or not types:
        raise _refuse(src, "layer_types", types, "expected a list of layer types")
    full = [i for i, t in enumerate(types) if t == "full_attention"]
    every = full[0] + 1 if full else 0
    want = ["full_attention" if every and (i + 1) % every == 0 else "sliding_attention"
            for i in range(len(types))]
    if types != want:
        raise _refuse(src, "layer_types", "[...]", "only sliding layers with every k-th layer "
                      "full (model.global_every) are simulated")
    return every


def _checks(cfg: dict[str, Any], family: str, src: str) -> list[str]:
    """Refusals of values that cannot be expressed, and the notes of the rest."""
    notes: list[str] = []
    if cfg.get("mlp_bias"):
        raise _refuse(src, "mlp_bias", True, "FFN biases in a model without other biases")
    if cfg.get("attention_bias") and family != "qwen2":
        raise _refuse(src, "attention_bias", True, "a bias on the output projection too "
                      "(model.qkv_bias covers q, k and v alone)")
    for key in ("final_logit_softcapping", "attn_logit_softcapping"):
        if cfg.get(key) is not None:
            notes.append(f"{key} {cfg[key]}: tanh capping of the logits, an elementwise "
                         "kernel not priced")
    for key, why in _NOTED.items():
        if cfg.get(key) is not None:
            notes.append(f"{key}: {why}")
    for key in sorted(set(cfg) - _MAPPED - set(_INERT) - set(_NOTED)):
        notes.append(f"config key '{key}' not read (the {family} reader does not know it)")
    return notes


def read_dense(cfg: dict[str, Any], src: str) -> dict[str, Any]:
    """The fields of an `HfModel` (simulator/config/scenario/hf.py) for a dense config."""
    family = cfg["model_type"]
    h, heads = _int(cfg, "hidden_size", src), _int(cfg, "num_attention_heads", src)
    layers = _int(cfg, "num_hidden_layers", src)
    activation, notes = _activation(cfg, family, src)
    window, every = _windows(cfg, family, layers, src)
    gemma = family == "gemma3_text"
    if gemma:
        notes.append("gemma3_text: post-attention and post-FFN RMSNorms (counted, kernels "
                     "not priced) and the embedding scaled by sqrt(hidden) (no cost)")
    head_dim = cfg.get("head_dim")
    dropout = cfg.get("attention_dropout", 0.0)
    if not isinstance(dropout, (int, float)) or isinstance(dropout, bool) \
            or not 0.0 <= dropout < 1.0:
        raise _refuse(src, "attention_dropout", dropout, "expected a probability in [0, 1)")
    return dict(
        family=family, hidden=h, layers=layers, heads=heads,
        kv_heads=cfg.get("num_key_value_heads") or heads,
        head_dim=_int(cfg, "head_dim", src, 256 if gemma else h // heads),
        head_dim_given=head_dim is not None or gemma,
        ffn=_int(cfg, "intermediate_size", src), activation=activation,
        vocab=_int(cfg, "vocab_size", src),
        tied=bool(cfg.get("tie_word_embeddings", gemma)),
        experts=1, max_positions=_int(cfg, "max_position_embeddings", src),
        qkv_bias=family == "qwen2" or bool(cfg.get("attention_bias", False)),
        qk_norm=family in ("qwen3", "gemma3_text"), extra_norms=2 if gemma else 0,
        rope_theta=float(cfg.get("rope_theta", 10000.0)), sliding_window=window,
        global_every=every, dropout=float(dropout), notes=tuple(_checks(cfg, family, src)
                                                                + notes))
