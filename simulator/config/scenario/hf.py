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
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from simulator.config.resources import bundled_dir
from simulator.config.scenario.hf_deepseek import DeepseekKeys, deepseek_keys
from simulator.config.scenario.hf_dense import DENSE_FAMILIES, read_dense
from simulator.config.scenario.hf_gptoss import read_gpt_oss
from simulator.errors import InputError

__all__ = ["HfModel", "read_hf_config", "load_hf", "expand_from_hf", "bundled_models",
           "hf_notes"]

_KEY = "model.from_hf"


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
    sliding_window: int = 0
    global_every: int = 0
    dropout: float | None = None
    notes: tuple[str, ...] = ()
    # gpt_oss (hf_gptoss): a bias on the attention output projection, biases on every
    # expert's projections and on the router, a learned sink logit per attention head
    out_bias: bool = False
    moe_bias: bool = False
    sinks: bool = False

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
        return keys


def _get(cfg: dict[str, Any], key: str, src: str) -> int:
    """A size the config must give: a positive integer (0 heads would divide by zero)."""
    if key not in cfg or cfg[key] is None:
        raise InputError(src, _KEY, f"the config has no '{key}'; a {cfg.get('model_type')} "
                         f"config.json needs it")
    value = cfg[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(src, _KEY, f"the config's '{key}' is {value!r}; expected a positive "
                         "integer")
    return value


def _count(cfg: dict[str, Any], key: str, src: str) -> int:
    """A positive integer of the config (1 when absent or null): int() would take 0 as a
    dense model, 1.5 as 1 and fail on 'x' or inf."""
    value = cfg.get(key)
    if value is None:
        return 1
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 100_000:
        raise InputError(src, _KEY, f"{key}: found {value!r}; expected an integer from 1 "
                         "to 100000 (a range a real system could have)")
    return value


def _activation(name: str, gated: bool, src: str) -> str:
    gelus = ("gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh")
    if gated and name == "silu":
        return "swiglu"
    if not gated and name in gelus:
        return "gelu"
    raise InputError(src, _KEY, f"activation '{name}' is not simulated; allowed: silu (gated, "
                     f"SwiGLU) for llama-like models, {', '.join(gelus)} for gpt2/gpt_neox")


def _llama(cfg: dict[str, Any], src: str) -> HfModel:
    """LlamaConfig / MistralConfig / MixtralConfig / Qwen2Config."""
    h, heads = _get(cfg, "hidden_size", src), _get(cfg, "num_attention_heads", src)
    return HfModel(
        family=cfg["model_type"], hidden=h, layers=_get(cfg, "num_hidden_layers", src),
        heads=heads, kv_heads=cfg.get("num_key_value_heads") or heads,
        head_dim=cfg.get("head_dim") or h // heads, ffn=_get(cfg, "intermediate_size", src),
        activation=_activation(cfg.get("hidden_act", "silu"), True, src),
        vocab=_get(cfg, "vocab_size", src), tied=bool(cfg.get("tie_word_embeddings", False)),
        experts=_count(cfg, "num_local_experts", src),
        top_k=_count(cfg, "num_experts_per_tok", src),
        max_positions=_get(cfg, "max_position_embeddings", src),
        qkv_bias=cfg["model_type"] == "qwen2" or bool(cfg.get("attention_bias", False)))


def _qwen3_moe(cfg: dict[str, Any], src: str) -> HfModel:
    """Qwen3MoeConfig (transformers/models/qwen3_moe/configuration_qwen3_moe.py): a layer
    is sparse when it is not in mlp_only_layers and (layer + 1) % decoder_sparse_step == 0
    (Qwen3MoeDecoderLayer); no shared experts."""
    dense = cfg.get("mlp_only_layers") or []
    if not isinstance(dense, list) or dense != list(range(len(dense))):
        raise InputError(src, _KEY, f"mlp_only_layers: found {dense!r}; only leading dense "
                         "layers [0, 1, ..., k-1] are simulated (model.moe.first_dense)")
    every = _count(cfg, "decoder_sparse_step", src)
    if dense and every != 1:
        raise InputError(src, _KEY, f"mlp_only_layers {dense} with decoder_sparse_step="
                         f"{every} is not simulated (allowed: one of the two)")
    base = _llama({**cfg, "num_local_experts": None}, src)
    norm = cfg.get("norm_topk_prob", False)
    if not isinstance(norm, bool):
        raise InputError(src, _KEY, f"norm_topk_prob: found {norm!r}; expected true or false")
    return replace(base, experts=_count(cfg, "num_experts", src),
                   top_k=_count(cfg, "num_experts_per_tok", src),
                   expert_ffn=_get(cfg, "moe_intermediate_size", src), first_dense=len(dense),
                   moe_every=every, normalize=norm,
                   # Qwen3's attention (Qwen3MoeAttention as Qwen3Attention): its own
                   # head_dim, an RMSNorm of every query and key head, no dropout
                   head_dim_given="head_dim" in cfg, qk_norm=True,
                   rope_theta=float(cfg.get("rope_theta", 10000.0)),
                   dropout=float(cfg.get("attention_dropout", 0.0)))


def _gpt2(cfg: dict[str, Any], src: str) -> HfModel:
    """GPT2Config: learned positions, LayerNorm, biases everywhere, tied head."""
    h, heads = _get(cfg, "n_embd", src), _get(cfg, "n_head", src)
    return HfModel(
        family="gpt2", hidden=h, layers=_get(cfg, "n_layer", src), heads=heads,
        kv_heads=heads, head_dim=h // heads, ffn=cfg.get("n_inner") or 4 * h,
        activation=_activation(cfg.get("activation_function", "gelu_new"), False, src),
        vocab=_get(cfg, "vocab_size", src), tied=bool(cfg.get("tie_word_embeddings", True)),
        experts=1, max_positions=_get(cfg, "n_positions", src), norm="layer", bias=True,
        positions=_get(cfg, "n_positions", src))


def _neox(cfg: dict[str, Any], src: str) -> HfModel:
    """GPTNeoXConfig: rotary positions, LayerNorm, biases everywhere, untied head."""
    h, heads = _get(cfg, "hidden_size", src), _get(cfg, "num_attention_heads", src)
    return HfModel(
        family="gpt_neox", hidden=h, layers=_get(cfg, "num_hidden_layers", src), heads=heads,
        kv_heads=heads, head_dim=h // heads, ffn=_get(cfg, "intermediate_size", src),
        activation=_activation(cfg.get("hidden_act", "gelu"), False, src),
        vocab=_get(cfg, "vocab_size", src), tied=bool(cfg.get("tie_word_embeddings", False)),
        experts=1, max_positions=_get(cfg, "max_position_embeddings", src), norm="layer",
        bias=True)


def _deepseek_v3(cfg: dict[str, Any], src: str) -> HfModel:
    """DeepseekV3Config (DeepSeek-V3/R1, Kimi-K2): a Llama's keys (intermediate_size: the
    dense layers' FFN, n_routed_experts and num_experts_per_tok: the routed experts) and
    its own (`hf_deepseek.deepseek_keys`)."""
    h, heads = _get(cfg, "hidden_size", src), _get(cfg, "num_attention_heads", src)
    own = deepseek_keys(cfg, src)
    return HfModel(
        family=str(cfg["model_type"]), hidden=h, layers=_get(cfg, "num_hidden_layers", src),
        heads=heads, kv_heads=heads, head_dim=own.qk_nope_head_dim + own.qk_rope_head_dim,
        ffn=_get(cfg, "intermediate_size", src),
        activation=_activation(cfg.get("hidden_act", "silu"), True, src),
        vocab=_get(cfg, "vocab_size", src), tied=bool(cfg.get("tie_word_embeddings", False)),
        experts=_count(cfg, "n_routed_experts", src),
        top_k=_count(cfg, "num_experts_per_tok", src),
        max_positions=_get(cfg, "max_position_embeddings", src), deepseek=own,
        expert_ffn=own.moe_ffn, shared_ffn=own.shared_experts * own.moe_ffn,
        first_dense=own.first_dense, moe_every=own.moe_every, normalize=own.normalize)


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
        raise InputError(src, _KEY, f"model_type {kind!r} is not read; allowed: "
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
    raise InputError(source, _KEY, f"found {ref!r}, which is neither a config.json file nor a "
                     f"bundled model; bundled: {', '.join(bundled_models())}")


def load_hf(ref: str, source: str = "<scenario>") -> HfModel:
    """The HfModel of a config.json path or bundled model name."""
    path = _config_path(ref, source)
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:  # JSON, UTF-8 and 4300-digit integer errors
        raise InputError(source, _KEY, f"{path}: not a readable JSON file ({exc})") from None
    except RecursionError:
        raise InputError(source, _KEY, f"{path}: nested too deeply to be a config.json "
                         "(a model config nests 2 or 3 levels)") from None
    if not isinstance(cfg, dict):
        raise InputError(source, _KEY, f"{path}: expected a JSON object")
    return read_hf_config(cfg, source)


def expand_from_hf(data: dict[str, Any], source: str) -> dict[str, Any]:
    """`data` with `model.from_hf` replaced by the model keys it reads (keys written beside
    it win; a `moe` written beside it is merged into the config's experts)."""
    model = data.get("model")
    if not isinstance(model, dict) or "from_hf" not in model:
        return data
    ref = model["from_hf"]
    if not isinstance(ref, str):
        raise InputError(source, _KEY, f"found {ref!r}; expected a config.json path or a "
                         f"bundled model name ({', '.join(bundled_models())})")
    hf = load_hf(ref, source)
    _NOTES[source] = hf.notes
    fields = hf.model_fields()
    moe = model.get("moe")
    if isinstance(moe, dict) and isinstance(fields.get("moe"), dict):
        model = {**model, "moe": {**fields["moe"], **moe}}
    fields.update({k: v for k, v in model.items() if k != "from_hf"})
    return {**data, "model": fields}


# ---- nemotron_h: hybrid Mamba-2 / attention / MLP layers -------------------------------


@dataclass(frozen=True)
class NemotronHModel(HfModel):
    """A Nemotron-H config (NVIDIA 2025, arXiv:2504.03624; transformers' NemotronHConfig):
    `pattern` its hybrid_override_pattern (one character per layer: 'M' a Mamba-2 mixer,
    '*' self-attention, '-' a non-gated squared-ReLU MLP), each layer one RMSNorm and its
    block; the Mamba-2 dims as NemotronHMamba2Mixer reads them (d_inner = mamba_num_heads x
    mamba_head_dim, conv over x, B, C with a bias, A_log, D, dt_bias per head, a gated
    RMSNorm of d_inner)."""

    pattern: str = ""
    mamba_heads: int = 0
    mamba_head_dim: int = 0
    groups: int = 1
    state: int = 0
    conv: int = 4
    chunk: int = 128

    def param_count(self, active: bool = False) -> int:
        """Parameters as transformers' NemotronH builds them (no experts: all active)."""
        h, q, kv = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim
        d_in = self.mamba_heads * self.mamba_head_dim
        conv_dim = d_in + 2 * self.groups * self.state
        mamba = (h * (2 * d_in + 2 * self.groups * self.state + self.mamba_heads)
                 + conv_dim * (self.conv + 1) + 3 * self.mamba_heads + d_in + d_in * h)
        block = {"M": mamba, "*": h * (q + 2 * kv) + q * h, "-": 2 * h * self.ffn}
        layers = sum(block[c] + h for c in self.pattern)
        return self.vocab * h * (1 if self.tied else 2) + layers + h

    def model_fields(self) -> dict[str, Any]:
        """The transformer's keys with the pattern and `mamba`: squared-ReLU MLPs without
        biases (`relu2`), no position embedding (NemotronHModel has no rotary or learned
        positions: its Mamba-2 layers carry the order), RMSNorm, the head untied unless
        tie_word_embeddings."""
        return {**super().model_fields(), "tie_embeddings": self.tied, "position": "none",
                "norm": "rmsnorm", "hybrid_pattern": self.pattern,
                "mamba": {"state_size": self.state, "head_dim": self.mamba_head_dim,
                          "num_heads": self.mamba_heads, "groups": self.groups,
                          "conv_kernel": self.conv, "chunk_size": self.chunk}}


def _nemotron_h(cfg: dict[str, Any], src: str) -> NemotronHModel:
    """NemotronHConfig: hybrid_override_pattern over num_hidden_layers, Mamba-2 dims,
    grouped-query attention of attention_head_dim, relu2 MLPs, no biases."""
    pattern = cfg.get("hybrid_override_pattern")
    layers = _get(cfg, "num_hidden_layers", src)
    if not isinstance(pattern, str) or len(pattern) != layers or set(pattern) - set("M*-"):
        raise InputError(src, _KEY, f"hybrid_override_pattern {pattern!r}: expected {layers} "
                         "characters (num_hidden_layers) of M (Mamba-2), * (attention) and - "
                         "(MLP); E (mixture of experts) is not simulated")
    for key, want in (("mlp_hidden_act", "relu2"), ("use_bias", False), ("mlp_bias", False),
                      ("attention_bias", False)):
        if cfg.get(key, want) != want:
            raise InputError(src, _KEY, f"{key}: found {cfg[key]!r}; only {want!r} is "
                             "simulated for nemotron_h")
    h, heads = _get(cfg, "hidden_size", src), _get(cfg, "num_attention_heads", src)
    return NemotronHModel(
        family="nemotron_h", hidden=h, layers=layers, heads=heads,
        kv_heads=cfg.get("num_key_value_heads") or heads,
        head_dim=cfg.get("attention_head_dim") or cfg.get("head_dim") or h // heads,
        ffn=_get(cfg, "intermediate_size", src), activation="relu2",
        vocab=_get(cfg, "vocab_size", src), tied=bool(cfg.get("tie_word_embeddings", False)),
        experts=1, max_positions=_get(cfg, "max_position_embeddings", src), pattern=pattern,
        mamba_heads=_get(cfg, "mamba_num_heads", src),
        mamba_head_dim=_get(cfg, "mamba_head_dim", src), groups=_count(cfg, "n_groups", src),
        state=_get(cfg, "ssm_state_size", src), conv=_count(cfg, "conv_kernel", src),
        chunk=_count(cfg, "chunk_size", src))


READERS["nemotron_h"] = _nemotron_h
