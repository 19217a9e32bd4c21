"""The shape of a model as its Hugging Face config.json gives it (`HfModel`), and the
readers' checks of the config's values: every family reader (`hf`, `hf_dense`,
`hf_deepseek`, `hf_gptoss`, `hf_nemotron`) builds an HfModel with them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from simulator.config.scenario.hf_deepseek import DeepseekKeys
from simulator.config.scenario.hf_dense import DENSE_FAMILIES
from simulator.errors import InputError

__all__ = ["HfModel", "KEY", "need", "count", "activation"]

KEY = "model.from_hf"


@dataclass(frozen=True)
class HfModel:
    """The shape of a decoder-only model as its config.json gives it.

    norm: 'rms' (weight only) or 'layer' (weight and bias); bias: biases on every linear
    layer (GPT-2, GPT-NeoX); qkv_bias: biases on q, k, v only (Qwen2); positions: the
    learned position table's rows (0 with rotary embeddings)."""

    family: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    activation: str  # 'swiglu' | 'gelu' | 'relu2'
    vocab: int
    tied: bool
    experts: int
    max_positions: int
    top_k: int = 1
    # a mixture of experts: each routed expert's width (0: ffn), the shared experts' total
    # width, the leading dense layers, the MoE layer frequency, whether the top-k weights
    # are renormalised (None: the simulator's default, when top_k > 1)
    expert_ffn: int = 0
    shared_ffn: int = 0
    first_dense: int = 0
    moe_every: int = 1
    normalize: bool | None = None
    norm: str = "rms"
    bias: bool = False
    qkv_bias: bool = False
    positions: int = 0
    # a deepseek_v3 config's own keys (MLA, MTP, its experts' shape: hf_deepseek)
    deepseek: DeepseekKeys | None = None
    # the dense families of `hf_dense` (llama 3.x, mistral, qwen2, qwen3, gemma3_text):
    # whether the config sets its own head_dim, q/k head norms, more norms per layer than
    # two (Gemma's post-norms), the rotary base, the attention window of the windowed
    # layers and the period of the global ones, the dropout, and the run-time notes
    head_dim_given: bool = False
    qk_norm: bool = False
    extra_norms: int = 0
    rope_theta: float = 10000.0
    yarn_factor: float | None = None  # rope_scaling of rope_type yarn (gpt_oss)
    sliding_window: int = 0
    global_every: int = 0
    dropout: float | None = None
    notes: tuple[str, ...] = ()
    # gpt_oss (hf_gptoss): a bias on the attention output projection, biases on every
    # expert's projections and on the router, a learned sink logit per attention head
    out_bias: bool = False
    moe_bias: bool = False
    sinks: bool = False
    moe_clamp: float | None = None  # swiglu_limit: the experts' clamped SwiGLU

    def param_count(self, active: bool = False) -> int:
        """Parameters of the model as the transformers class builds it (embedding, blocks,
        final norm, LM head unless tied); `active`: those one token uses (a mixture of
        experts' top_k routed experts, its shared experts and router, every other
        parameter), the "activated parameters" model cards publish."""
        if self.deepseek is not None:
            return self.deepseek.count(self, self.top_k if active else self.experts)
        h, q, kv = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim
        attn = h * (q + 2 * kv) + q * h
        attn += (q + 2 * kv + h) * self.bias + (q + 2 * kv) * self.qkv_bias
        attn += h * self.out_bias + self.heads * self.sinks
        mats = 3 if self.activation == "swiglu" else 2
        ffn = mats * h * self.ffn + (self.ffn + h) * self.bias
        norm = h * (2 if self.norm == "layer" else 1)
        block = attn + (2 + self.extra_norms) * norm + 2 * self.head_dim * self.qk_norm
        embed = self.vocab * h * (1 if self.tied else 2) + self.positions * h
        if self.experts <= 1:
            return embed + self.layers * (block + ffn) + norm
        moe_layers = (self.layers - self.first_dense) // self.moe_every
        used = self.top_k if active else self.experts
        width = self.expert_ffn or self.ffn
        moe = (used * mats * h * width + mats * h * self.shared_ffn
               + h * self.experts)  # routed and shared experts, router
        moe += (used * ((mats - 1) * width + h) + self.experts) * self.moe_bias
        return (embed + self.layers * block + (self.layers - moe_layers) * ffn
                + moe_layers * moe + norm)

    def model_fields(self) -> dict[str, Any]:
        """The `model:` keys of the simulator's transformer."""
        fields = {"type": "transformer", "layers": self.layers, "hidden_size": self.hidden,
                  "num_heads": self.heads, "num_kv_heads": self.kv_heads,
                  "ffn_hidden_size": self.ffn, "ffn_activation": self.activation,
                  "vocab_size": self.vocab, "seq_length": self.max_positions}
        if self.experts > 1:
            fields["moe"] = {"experts": self.experts, "top_k": self.top_k, **self._moe_keys()}
        if self.deepseek is not None:
            return self.deepseek.model_fields(self, fields)
        if self.family in DENSE_FAMILIES + ("gpt2", "gpt_neox", "qwen3_moe", "gpt_oss"):
            fields.update(self._dense_fields())
        return fields

    def _dense_fields(self) -> dict[str, Any]:
        """The dense-fidelity keys as the config gives them (head, tied head, positions,
        norm, biases, q/k norms, windows, dropout)."""
        out: dict[str, Any] = {
            "tie_embeddings": self.tied, "norm": "rmsnorm" if self.norm == "rms" else "layernorm",
            "position": "learned" if self.positions else "rope"}
        if self.head_dim_given:
            out["head_dim"] = self.head_dim
        if self.rope_theta != 10000.0:
            out["rope_theta"] = self.rope_theta
        if self.yarn_factor is not None:
            out["yarn_factor"] = self.yarn_factor
        out.update({k: True for k in ("qkv_bias", "qk_norm") if getattr(self, k)})
        if self.sinks:
            out["attention_sinks"] = True
        if self.sliding_window:
            out["sliding_window"] = self.sliding_window
        if self.global_every:
            out["global_every"] = self.global_every
        if self.dropout is not None:
            out["dropout"] = self.dropout
        return out

    def _moe_keys(self) -> dict[str, Any]:
        """The `model.moe` keys beyond experts and top_k that this model sets."""
        keys: dict[str, Any] = {}
        if self.expert_ffn and self.expert_ffn != self.ffn:
            keys["ffn_hidden_size"] = self.expert_ffn
        if self.first_dense:
            keys["first_dense"] = self.first_dense
        if self.moe_every != 1:
            keys["every"] = self.moe_every
        if self.normalize is not None and self.normalize != (self.top_k > 1):
            keys["normalize_top_k"] = self.normalize
        if self.moe_clamp is not None:
            keys["activation_clamp"] = self.moe_clamp
        if self.moe_bias:
            keys["expert_bias"] = True
        return keys


def need(cfg: dict[str, Any], key: str, src: str) -> int:
    """A size the config must give: a positive integer (0 heads would divide by zero)."""
    if key not in cfg or cfg[key] is None:
        raise InputError(src, KEY, f"the config has no '{key}'; a {cfg.get('model_type')} "
                         f"config.json needs it")
    value = cfg[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(src, KEY, f"the config's '{key}' is {value!r}; expected a positive "
                         "integer")
    return value


def count(cfg: dict[str, Any], key: str, src: str) -> int:
    """A positive integer of the config (1 when absent or null): int() would take 0 as a
    dense model, 1.5 as 1 and fail on 'x' or inf."""
    value = cfg.get(key)
    if value is None:
        return 1
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 100_000:
        raise InputError(src, KEY, f"{key}: found {value!r}; expected an integer from 1 "
                         "to 100000 (a range a real system could have)")
    return value


def activation(name: str, gated: bool, src: str) -> str:
    gelus = ("gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh")
    if gated and name == "silu":
        return "swiglu"
    if not gated and name in gelus:
        return "gelu"
    raise InputError(src, KEY, f"activation '{name}' is not simulated; allowed: silu (gated, "
                     f"SwiGLU) for llama-like models, {', '.join(gelus)} for gpt2/gpt_neox")
