"""The Hugging Face `deepseek_v3` config (DeepseekV3Config, transformers/models/deepseek_v3/
configuration_deepseek_v3.py; DeepSeek-V3, DeepSeek-R1 and Kimi-K2 share it) read into a
transformer's keys: multi-head latent attention (`model.mla`: q_lora_rank, kv_lora_rank,
qk_nope_head_dim, qk_rope_head_dim, v_head_dim) and multi-token prediction (`model.mtp`:
num_nextn_predict_layers modules), its routed experts into `model.moe` (n_routed_experts,
num_experts_per_tok).

What the simulated transformer cannot express yet is refused by its config key when the
config is used as a scenario's model (`model_fields`): shared experts (n_shared_experts),
an expert FFN width of its own (moe_intermediate_size), leading dense layers
(first_k_dense_replace), a layer frequency (moe_layer_freq), sigmoid scores
(scoring_func) and group-limited routing (n_group, topk_group). `param_count` counts the
real model all the same (DeepseekV3ForCausalLM's modules: the MLA projections and their
norms, the dense and MoE FFNs, the router and its score-correction bias of `noaux_tc`),
without the MTP modules, as the published 671B does; `active_params` counts the top-k
routed experts and the shared ones; `mtp_params` one module as the checkpoint stores it.
YaRN's `rope_scaling` changes the softmax scale and the rotary angles only: no cost.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from simulator.config.scenario.hf import HfModel, _activation, _count, _get
from simulator.errors import InputError

__all__ = ["DeepseekV3", "read_deepseek_v3"]

_KEY = "model.from_hf"


@dataclass(frozen=True)
class DeepseekV3(HfModel):
    """A deepseek_v3 config: HfModel's fields (ffn: the dense layers' width) and its own."""

    q_lora_rank: int = 0  # 0: queries projected from the hidden state (V2-Lite)
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    mtp_depth: int = 0
    moe_ffn: int = 0
    shared_experts: int = 0
    first_dense: int = 0
    moe_every: int = 1
    scoring: str = "softmax"
    groups: int = 1
    source: str = ""

    def attention_params(self) -> int:
        """One layer's MLA (DeepSeek-V2 Sec. 2.1): W_DQ, its norm, W_UQ + W_QR (or the
        plain query projection); W_DKV + W_KR, its norm, W_UK + W_UV; W_O."""
        h, n, qk = self.hidden, self.heads, self.qk_nope_head_dim + self.qk_rope_head_dim
        q = h * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * n * qk \
            if self.q_lora_rank else h * n * qk
        kv = h * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank \
            + self.kv_lora_rank * n * (self.qk_nope_head_dim + self.v_head_dim)
        return q + kv + n * self.v_head_dim * h

    def _moe_layer(self, routed: int) -> int:
        """An MoE FFN with `routed` routed experts and the shared ones, its router and
        (noaux_tc) the per-expert score-correction bias."""
        expert = 3 * self.hidden * self.moe_ffn
        return (routed + self.shared_experts) * expert + self.experts * (self.hidden + 1)

    def _count(self, routed: int) -> int:
        h, moe_layers = self.hidden, self._moe_layers()
        dense = (self.layers - moe_layers) * 3 * h * self.ffn
        blocks = self.layers * (self.attention_params() + 2 * h)
        embed = self.vocab * h * (1 if self.tied else 2)
        return embed + blocks + dense + moe_layers * self._moe_layer(routed) + h

    def _moe_layers(self) -> int:
        if self.experts <= 1:
            return 0
        return sum(1 for i in range(self.first_dense, self.layers) if i % self.moe_every == 0)

    def param_count(self) -> int:
        return self._count(self.experts)

    def active_params(self) -> int:
        """Parameters a token runs through: top_k routed experts (and the embedding row
        and LM head counted whole)."""
        return self._count(self.top_k)

    def mtp_params(self) -> int:
        """One MTP module as the checkpoint stores it (model.layers.61.*): enorm, hnorm,
        eh_proj, one MoE layer, shared_head.norm, and its copies of the embedding and the
        LM head (the modules share them in training, DeepSeek-V3 Sec. 2.2)."""
        h = self.hidden
        layer = self.attention_params() + 2 * h + self._moe_layer(self.experts)
        return 2 * h + 2 * h * h + layer + h + 2 * self.vocab * h

    def model_fields(self) -> dict[str, Any]:
        for problem in self._unexpressed():
            raise InputError(self.source, _KEY, problem)
        fields = super().model_fields()
        fields.pop("num_kv_heads")  # MLA: a key and a value per head
        fields["mla"] = {"q_lora_rank": self.q_lora_rank or None,
                         "kv_lora_rank": self.kv_lora_rank,
                         "qk_nope_head_dim": self.qk_nope_head_dim,
                         "qk_rope_head_dim": self.qk_rope_head_dim,
                         "v_head_dim": self.v_head_dim}
        if self.mtp_depth:
            fields["mtp"] = {"depth": self.mtp_depth}
        return fields

    def _unexpressed(self) -> list[str]:
        if self.experts <= 1:
            return []
        checks = [
            ("n_shared_experts", self.shared_experts, 0, "shared experts"),
            ("moe_intermediate_size", self.moe_ffn, self.ffn,
             "an expert FFN width apart from intermediate_size"),
            ("first_k_dense_replace", self.first_dense, 0, "leading dense layers"),
            ("moe_layer_freq", self.moe_every, 1, "a layer frequency"),
            ("scoring_func", self.scoring, "softmax", "sigmoid router scores"),
            ("n_group", self.groups, 1, "group-limited routing")]
        return [f"the config's {key} is {value!r}: {what} are not simulated yet (allowed: "
                f"{ok!r})" for key, value, ok, what in checks if value != ok]


def _dim(cfg: dict[str, Any], key: str, src: str) -> int:
    """0 for a null or absent rank (q_lora_rank: none in DeepSeek-V2-Lite), else positive."""
    return 0 if cfg.get(key) is None else _get(cfg, key, src)


def read_deepseek_v3(cfg: dict[str, Any], src: str) -> DeepseekV3:
    """DeepseekV3Config (DeepSeek-V3's config.json: q_lora_rank 1536, kv_lora_rank 512,
    qk_nope_head_dim 128, qk_rope_head_dim 64, v_head_dim 128, num_nextn_predict_layers
    1, n_routed_experts 256, num_experts_per_tok 8, n_shared_experts 1,
    moe_intermediate_size 2048, first_k_dense_replace 3)."""
    h, heads = _get(cfg, "hidden_size", src), _get(cfg, "num_attention_heads", src)
    nope, rope = _get(cfg, "qk_nope_head_dim", src), _get(cfg, "qk_rope_head_dim", src)
    experts = 1 if cfg.get("n_routed_experts") is None else _count(cfg, "n_routed_experts", src)
    depth = cfg.get("num_nextn_predict_layers") or 0
    if isinstance(depth, bool) or not isinstance(depth, int) or not 0 <= depth <= 64:
        raise InputError(src, _KEY, f"num_nextn_predict_layers: found {depth!r}; expected "
                         "an integer from 0 to 64")
    return DeepseekV3(
        family=str(cfg["model_type"]), hidden=h, layers=_get(cfg, "num_hidden_layers", src),
        heads=heads, kv_heads=heads, head_dim=nope + rope,
        ffn=_get(cfg, "intermediate_size", src),
        activation=_activation(cfg.get("hidden_act", "silu"), True, src),
        vocab=_get(cfg, "vocab_size", src), tied=bool(cfg.get("tie_word_embeddings", False)),
        experts=experts, top_k=_count(cfg, "num_experts_per_tok", src),
        max_positions=_get(cfg, "max_position_embeddings", src),
        q_lora_rank=_dim(cfg, "q_lora_rank", src),
        kv_lora_rank=_get(cfg, "kv_lora_rank", src), qk_nope_head_dim=nope,
        qk_rope_head_dim=rope, v_head_dim=_get(cfg, "v_head_dim", src), mtp_depth=depth,
        moe_ffn=_dim(cfg, "moe_intermediate_size", src),
        shared_experts=cfg.get("n_shared_experts") or 0,
        first_dense=cfg.get("first_k_dense_replace") or 0,
        moe_every=_count(cfg, "moe_layer_freq", src),
        scoring=str(cfg.get("scoring_func", "softmax")), groups=_count(cfg, "n_group", src),
        source=src)
