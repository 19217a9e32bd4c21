"""The Hugging Face `gpt_oss` config (GptOssConfig, transformers/models/gpt_oss/
configuration_gpt_oss.py; openai/gpt-oss-120b and gpt-oss-20b): a mixture of experts in
every layer with attention sinks, biased projections and alternating 128-token windows.

What GptOssForCausalLM builds (modeling_gpt_oss.py) and how each part is read:
- attention (GptOssAttention): grouped-query, `head_dim` of its own (64: queries 64 x 64 =
  4096 wide over a 2880 residual), q/k/v/o projections with biases when `attention_bias`
  (q/k/v biases: `model.qkv_bias`; the output projection's h-wide bias counted, noted as not
  priced), a learned sink logit per head in the softmax (`sinks`: `model.attention_sinks`),
  RoPE with YaRN scaling (`rope_scaling` of rope_type yarn: `model.yarn_factor`, its factor;
  Megatron-Core runs that rotation as element-wise ops, simulator/program/yarn_rope.py);
- windows: `layer_types` sliding_attention / full_attention alternating from a sliding
  layer, `sliding_window` 128: `model.sliding_window: 128, model.global_every: 2`;
- experts (GptOssExperts, GptOssTopKRouter): `num_local_experts` of `intermediate_size`
  each, `num_experts_per_tok` routed by a softmax over the top-k logits (the renormalised
  top-k of a softmax: `normalize_top_k`, the default for top_k > 1), no shared experts,
  dense layers none; a SwiGLU whose gate and up halves are clamped at `swiglu_limit` with
  a sigmoid gain `swiglu_alpha` and `up + 1` (the same three GEMMs; the clamps as kernels
  of their own: `model.moe.activation_clamp`, simulator/program/clamped_glu.py); biases on
  gate_up (2 x width) and down (hidden) of every expert (`model.moe.expert_bias`: the down
  bias's adds priced) and on the router (one per expert): counted;
- RMSNorm before attention and before the experts and after the last layer, untied head.

`param_count` counts all of it: the published totals of arXiv:2508.10925 (the gpt-oss model
card) Table 1, 116.83B and 20.91B, come out to the digit.
"""

from __future__ import annotations

from typing import Any

from simulator.config.scenario.hf_dense import _INERT, _int, _pattern, _refuse
from simulator.errors import InputError

__all__ = ["read_gpt_oss"]

_KEY = "model.from_hf"

_MAPPED = {"model_type", "hidden_size", "num_hidden_layers", "num_attention_heads",
           "num_key_value_heads", "head_dim", "intermediate_size", "hidden_act",
           "num_local_experts", "num_experts_per_tok", "experts_per_token", "vocab_size",
           "tie_word_embeddings", "max_position_embeddings", "rope_theta", "attention_bias",
           "attention_dropout", "sliding_window", "layer_types"}
_GPT_OSS_INERT = {
    **_INERT,
    "initial_context_length": "YaRN's original context (rope_scaling has it)",
    "output_router_logits": "whether the forward returns the router logits",
    "router_aux_loss_coef": "the weight of the load-balancing loss (a scalar on the router's "
                            "softmax: no GEMM)",
}
_NOTED = {
    "rope_scaling": "rescales the rotary angles (not YaRN: the same cost)",
    "swiglu_limit": "the experts' SwiGLU clamps gate and up and adds 1 to up (GptOssExperts): "
                    "the same three GEMMs; the clamps run as element-wise kernels of their "
                    "own (model.moe.activation_clamp)",
    "quantization_config": "the checkpoint stores its experts in MXFP4; the training dtype "
                           "is model.dtype",
}
BIAS_NOTE = ("gpt_oss: biases on the attention output projection, on every expert's gate_up "
             "and down projections and on the router (counted in the parameters; the experts' "
             "down-projection bias adds priced (model.moe.expert_bias), the others not)")


def _experts(cfg: dict[str, Any], src: str) -> tuple[int, int]:
    """(experts, top_k): num_experts_per_tok, and experts_per_token where the hub's file
    repeats it, must agree."""
    experts, top_k = _int(cfg, "num_local_experts", src), _int(cfg, "num_experts_per_tok", src)
    if experts < 2 or top_k > experts:
        raise _refuse(src, "num_local_experts", experts, f"a mixture of experts needs at "
                      f"least 2 experts and no fewer than num_experts_per_tok ({top_k})")
    again = cfg.get("experts_per_token", top_k)
    if again != top_k:
        raise _refuse(src, "experts_per_token", again, f"it differs from num_experts_per_tok "
                      f"({top_k})")
    return experts, top_k


def _windows(cfg: dict[str, Any], layers: int, src: str) -> tuple[int, int]:
    """(sliding window, global_every): GptOssConfig's default layer_types alternate
    sliding and full layers from a sliding one."""
    if cfg.get("sliding_window") is None:
        return 0, 0
    window = _int(cfg, "sliding_window", src)
    types = cfg.get("layer_types")
    if types is None:
        types = ["sliding_attention" if (i + 1) % 2 else "full_attention"
                 for i in range(layers)]
    if isinstance(types, list) and len(types) != layers:
        raise _refuse(src, "layer_types", f"[{len(types)} entries]",
                      f"expected one per layer (num_hidden_layers {layers})")
    every = _pattern(types, src)
    return (0, 0) if every == 1 else (window, every)  # every layer full: no window


def _clamp(cfg: dict[str, Any], src: str) -> float | None:
    """`swiglu_limit`: the clamp of the experts' SwiGLU halves (null or absent: none)."""
    limit = cfg.get("swiglu_limit")
    if limit is None:
        return None
    if not isinstance(limit, (int, float)) or isinstance(limit, bool) or not limit > 0:
        raise _refuse(src, "swiglu_limit", limit, "expected a positive number")
    return float(limit)


def _yarn(cfg: dict[str, Any], src: str) -> float | None:
    """`rope_scaling` of rope_type (or type) yarn: its factor (`model.yarn_factor`); None
    for no scaling or another kind (noted)."""
    scaling = cfg.get("rope_scaling")
    if not isinstance(scaling, dict) or \
            scaling.get("rope_type", scaling.get("type")) != "yarn":
        return None
    factor = scaling.get("factor")
    if not isinstance(factor, (int, float)) or isinstance(factor, bool) or not factor > 1:
        raise _refuse(src, "rope_scaling", scaling, "a yarn rope_scaling needs a factor "
                      "above 1")
    return float(factor)


def _notes(cfg: dict[str, Any], src: str) -> list[str]:
    notes = [BIAS_NOTE] if cfg.get("attention_bias", True) else []
    noted = {k: v for k, v in _NOTED.items() if k != "rope_scaling" or _yarn(cfg, src) is None}
    notes += [f"{key}: {why}" for key, why in noted.items() if cfg.get(key) is not None]
    notes += [f"config key '{key}' not read (the gpt_oss reader does not know it)"
              for key in sorted(set(cfg) - _MAPPED - set(_GPT_OSS_INERT) - set(_NOTED))]
    return notes


def read_gpt_oss(cfg: dict[str, Any], src: str) -> dict[str, Any]:
    """The fields of an `HfModel` (simulator/config/scenario/hf.py) for a gpt_oss config."""
    if cfg.get("hidden_act", "silu") != "silu":
        raise _refuse(src, "hidden_act", cfg["hidden_act"], "gpt_oss experts are a clamped "
                      "SwiGLU (silu)")
    if cfg.get("tie_word_embeddings", False):
        raise _refuse(src, "tie_word_embeddings", True, "GptOssForCausalLM unties its head")
    dropout = cfg.get("attention_dropout", 0.0)
    if not isinstance(dropout, (int, float)) or isinstance(dropout, bool) \
            or not 0.0 <= dropout < 1.0:
        raise _refuse(src, "attention_dropout", dropout, "expected a probability in [0, 1)")
    bias = cfg.get("attention_bias", True)
    if not isinstance(bias, bool):
        raise InputError(src, _KEY, f"attention_bias: found {bias!r}; expected true or false")
    h, heads = _int(cfg, "hidden_size", src), _int(cfg, "num_attention_heads", src)
    layers = _int(cfg, "num_hidden_layers", src)
    experts, top_k = _experts(cfg, src)
    window, every = _windows(cfg, layers, src)
    ffn = _int(cfg, "intermediate_size", src)
    return dict(
        family="gpt_oss", hidden=h, layers=layers, heads=heads,
        kv_heads=_int(cfg, "num_key_value_heads", src, heads),
        head_dim=_int(cfg, "head_dim", src, 64), head_dim_given=True, ffn=ffn,
        activation="swiglu", vocab=_int(cfg, "vocab_size", src), tied=False,
        experts=experts, top_k=top_k, expert_ffn=ffn,
        max_positions=_int(cfg, "max_position_embeddings", src), qkv_bias=bias,
        out_bias=bias, moe_bias=True, sinks=True, moe_clamp=_clamp(cfg, src),
        rope_theta=float(cfg.get("rope_theta", 150000.0)), sliding_window=window,
        global_every=every, dropout=float(dropout), yarn_factor=_yarn(cfg, src),
        notes=tuple(_notes(cfg, src)))
