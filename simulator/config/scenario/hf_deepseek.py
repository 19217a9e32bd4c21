"""The keys of the Hugging Face `deepseek_v3` config (DeepseekV3Config, transformers/models/
deepseek_v3/configuration_deepseek_v3.py; DeepSeek-V3, DeepSeek-R1 and Kimi-K2 share it)
beyond a Llama's, which `hf.HfModel.deepseek` carries: multi-head latent attention
(`model.mla`: q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim),
multi-token prediction (`model.mtp`: num_nextn_predict_layers modules), and the mixture of
experts' own keys.

Used as a scenario's model (`model_fields`), its experts become `model.moe`: their width
(moe_intermediate_size as ffn_hidden_size), the shared experts (n_shared_experts, as wide),
the leading dense layers (first_k_dense_replace as first_dense), the score function
(scoring_func), the renormalisation and scale of the top-k weights (norm_topk_prob,
routed_scaling_factor) and group-limited routing (n_group, topk_group as groups,
group_top_k). What the simulated transformer cannot express is refused by its config key: a
layer frequency (moe_layer_freq other than 1), another score function. The score-
correction bias of `noaux_tc` shifts only which experts are chosen and is not modelled
(the route may differ; the FLOPs and the balanced all-to-all bytes do not). `param_count`
counts the real model
all the same (DeepseekV3ForCausalLM's modules: the MLA projections and their norms, the
dense and MoE FFNs, the router and its score-correction bias of `noaux_tc`), without the
MTP modules, as the published 671B does; `active_params` counts the top-k routed experts
and the shared ones; `mtp_params` one module as the checkpoint stores it. YaRN's
`rope_scaling` changes the softmax scale and the rotary angles only: no cost.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from simulator.errors import InputError

if TYPE_CHECKING:
    from simulator.config.scenario.hf import HfModel

__all__ = ["DeepseekKeys", "deepseek_keys"]

_KEY = "model.from_hf"


@dataclass(frozen=True)
class DeepseekKeys:
    """A deepseek_v3 config's own keys (the HfModel it belongs to has the rest: its `ffn`
    is the dense layers' width, `experts` and `top_k` the routed experts)."""

    q_lora_rank: int  # 0: queries projected from the hidden state (DeepSeek-V2-Lite)
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    mtp_depth: int = 0
    moe_ffn: int = 0
    shared_experts: int = 0
    first_dense: int = 0
    moe_every: int = 1
    scoring: str = "softmax"
    groups: int = 1
    top_groups: int = 1
    normalize: bool = False
    scale: float = 1.0
    source: str = ""

    def attention_params(self, m: HfModel) -> int:
        """One layer's MLA (DeepSeek-V2 Sec. 2.1): W_DQ, its norm, W_UQ + W_QR (or the
        plain query projection); W_DKV + W_KR, its norm, W_UK + W_UV; W_O."""
        h, n, qk = m.hidden, m.heads, self.qk_nope_head_dim + self.qk_rope_head_dim
        q = h * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * n * qk \
            if self.q_lora_rank else h * n * qk
        kv = h * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank \
            + self.kv_lora_rank * n * (self.qk_nope_head_dim + self.v_head_dim)
        return q + kv + n * self.v_head_dim * h

    def _moe_layer(self, m: HfModel, routed: int) -> int:
        """An MoE FFN with `routed` routed experts and the shared ones, its router and
        (noaux_tc) the per-expert score-correction bias."""
        expert = 3 * m.hidden * self.moe_ffn
        return (routed + self.shared_experts) * expert + m.experts * (m.hidden + 1)

    def _moe_layers(self, m: HfModel) -> int:
        if m.experts <= 1:
            return 0
        return sum(1 for i in range(self.first_dense, m.layers) if i % self.moe_every == 0)

    def count(self, m: HfModel, routed: int) -> int:
        """Parameters of the model with `routed` routed experts per MoE layer (all of
        them: its size; top_k: those a token runs through), without the MTP modules."""
        h, moe_layers = m.hidden, self._moe_layers(m)
        dense = (m.layers - moe_layers) * 3 * h * m.ffn
        blocks = m.layers * (self.attention_params(m) + 2 * h)
        embed = m.vocab * h * (1 if m.tied else 2)
        return embed + blocks + dense + moe_layers * self._moe_layer(m, routed) + h

    def mtp_params(self, m: HfModel) -> int:
        """One MTP module as the checkpoint stores it (model.layers.61.*): enorm, hnorm,
        eh_proj, one MoE layer, shared_head.norm, and its copies of the embedding and the
        LM head (the modules share them in training, DeepSeek-V3 Sec. 2.2)."""
        h = m.hidden
        layer = self.attention_params(m) + 2 * h + self._moe_layer(m, m.experts)
        return 2 * h + 2 * h * h + layer + h + 2 * m.vocab * h

    def model_fields(self, m: HfModel, fields: dict[str, Any]) -> dict[str, Any]:
        """`fields` (a Llama's `model:` keys) with MLA and MTP; InputError naming the first
        config key the simulated model cannot express."""
        for problem in self._unexpressed(m):
            raise InputError(self.source, _KEY, problem)
        fields = {k: v for k, v in fields.items() if k != "num_kv_heads"}  # MLA: per head
        fields["mla"] = {"q_lora_rank": self.q_lora_rank or None,
                         "kv_lora_rank": self.kv_lora_rank,
                         "qk_nope_head_dim": self.qk_nope_head_dim,
                         "qk_rope_head_dim": self.qk_rope_head_dim,
                         "v_head_dim": self.v_head_dim}
        if self.mtp_depth:
            fields["mtp"] = {"depth": self.mtp_depth}
        if m.dropout is not None:
            fields["dropout"] = m.dropout
        if m.experts > 1:
            fields["moe"] = {**fields["moe"], **self._moe_fields(m)}
        return fields

    def _moe_fields(self, m: HfModel) -> dict[str, Any]:
        """The `model.moe` keys of DeepSeekMoE (DeepSeek-V3 Sec. 2.1.2): the routed experts'
        width, the shared experts (as wide), the leading dense layers, the score function,
        the renormalisation and scale of the top-k weights, group-limited routing."""
        keys: dict[str, Any] = {"score": self.scoring, "normalize_top_k": self.normalize}
        if self.moe_ffn and self.moe_ffn != m.ffn:
            keys["ffn_hidden_size"] = self.moe_ffn
        if self.shared_experts:
            keys["shared_experts"] = self.shared_experts
        if self.first_dense:
            keys["first_dense"] = self.first_dense
        if self.scale != 1.0:
            keys["scaling_factor"] = self.scale
        if self.groups > 1:
            keys.update(groups=self.groups, group_top_k=self.top_groups)
        return keys

    def _unexpressed(self, m: HfModel) -> list[str]:
        if m.experts <= 1:
            return []
        # transformers' DeepseekV3 makes layer i sparse when i >= first_k_dense_replace and
        # i % moe_layer_freq == 0, which model.moe.every (the last of each group) is not
        checks: list[tuple[str, object, object, str]] = [
            ("moe_layer_freq", self.moe_every, 1, "a layer frequency")]
        if self.scoring not in ("softmax", "sigmoid"):
            checks.append(("scoring_func", self.scoring, "softmax or sigmoid",
                           "other score functions"))
        return [f"the config's {key} is {value!r}: {what} are not simulated yet (allowed: "
                f"{ok!r})" for key, value, ok, what in checks if value != ok]


def _size(cfg: dict[str, Any], key: str, src: str, default: int | None = None,
          low: int = 1) -> int:
    """An integer of the config from `low` to 100000; `default` when absent or null (None:
    required)."""
    value = cfg.get(key)
    if value is None and default is not None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= 100_000:
        raise InputError(src, _KEY, f"{key}: found {value!r}; expected an integer from "
                         f"{low} to 100000 (a deepseek_v3 config.json needs it)")
    return value


def deepseek_keys(cfg: dict[str, Any], src: str) -> DeepseekKeys:
    """The keys of a DeepseekV3Config (DeepSeek-V3's config.json: q_lora_rank 1536,
    kv_lora_rank 512, qk_nope_head_dim 128, qk_rope_head_dim 64, v_head_dim 128,
    num_nextn_predict_layers 1, n_shared_experts 1, moe_intermediate_size 2048,
    first_k_dense_replace 3, scoring_func sigmoid, n_group 8)."""
    return DeepseekKeys(
        q_lora_rank=_size(cfg, "q_lora_rank", src, 0),
        kv_lora_rank=_size(cfg, "kv_lora_rank", src),
        qk_nope_head_dim=_size(cfg, "qk_nope_head_dim", src),
        qk_rope_head_dim=_size(cfg, "qk_rope_head_dim", src),
        v_head_dim=_size(cfg, "v_head_dim", src),
        mtp_depth=_size(cfg, "num_nextn_predict_layers", src, 0, low=0),
        moe_ffn=_size(cfg, "moe_intermediate_size", src, 0),
        shared_experts=_size(cfg, "n_shared_experts", src, 0, low=0),
        first_dense=_size(cfg, "first_k_dense_replace", src, 0, low=0),
        moe_every=_size(cfg, "moe_layer_freq", src, 1),
        scoring=str(cfg.get("scoring_func", "softmax")),
        groups=_size(cfg, "n_group", src, 1), top_groups=_size(cfg, "topk_group", src, 1),
        normalize=_flag(cfg, "norm_topk_prob", src),
        scale=_factor(cfg, "routed_scaling_factor", src), source=src)


def _flag(cfg: dict[str, Any], key: str, src: str) -> bool:
    """A boolean of the config (false when absent, as DeepseekV3Config's default)."""
    value = cfg.get(key, False)
    if not isinstance(value, bool):
        raise InputError(src, _KEY, f"{key}: found {value!r}; expected true or false")
    return value


def _factor(cfg: dict[str, Any], key: str, src: str) -> float:
    """A positive number of the config up to 1000 (1.0 when absent or null)."""
    value = cfg.get(key)
    if value is None:
        return 1.0
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1000:
        raise InputError(src, _KEY, f"{key}: found {value!r}; expected a number in (0, 1000]")
    return float(value)
