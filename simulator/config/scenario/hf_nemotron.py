"""Nemotron-H configs (`model_type: nemotron_h`): hybrid Mamba-2 / attention / MLP layers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from simulator.config.scenario.hf_model import KEY, HfModel, count, need
from simulator.errors import InputError

__all__ = ["NemotronHModel", "read_nemotron_h"]


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


def read_nemotron_h(cfg: dict[str, Any], src: str) -> NemotronHModel:
    """NemotronHConfig: hybrid_override_pattern over num_hidden_layers, Mamba-2 dims,
    grouped-query attention of attention_head_dim, relu2 MLPs, no biases."""
    pattern = cfg.get("hybrid_override_pattern")
    layers = need(cfg, "num_hidden_layers", src)
    if not isinstance(pattern, str) or len(pattern) != layers or set(pattern) - set("M*-"):
        raise InputError(src, KEY, f"hybrid_override_pattern {pattern!r}: expected {layers} "
                         "characters (num_hidden_layers) of M (Mamba-2), * (attention) and - "
                         "(MLP); E (mixture of experts) is not simulated")
    for key, want in (("mlp_hidden_act", "relu2"), ("use_bias", False), ("mlp_bias", False),
                      ("attention_bias", False)):
        if cfg.get(key, want) != want:
            raise InputError(src, KEY, f"{key}: found {cfg[key]!r}; only {want!r} is "
                             "simulated for nemotron_h")
    h, heads = need(cfg, "hidden_size", src), need(cfg, "num_attention_heads", src)
    return NemotronHModel(
        family="nemotron_h", hidden=h, layers=layers, heads=heads,
        kv_heads=cfg.get("num_key_value_heads") or heads,
        head_dim=cfg.get("attention_head_dim") or cfg.get("head_dim") or h // heads,
        ffn=need(cfg, "intermediate_size", src), activation="relu2",
        vocab=need(cfg, "vocab_size", src), tied=bool(cfg.get("tie_word_embeddings", False)),
        experts=1, max_positions=need(cfg, "max_position_embeddings", src), pattern=pattern,
        mamba_heads=need(cfg, "mamba_num_heads", src),
        mamba_head_dim=need(cfg, "mamba_head_dim", src), groups=count(cfg, "n_groups", src),
        state=need(cfg, "ssm_state_size", src), conv=count(cfg, "conv_kernel", src),
        chunk=count(cfg, "chunk_size", src))
