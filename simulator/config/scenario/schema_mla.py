"""The `model.mla` and `model.mtp` sections of a transformer (`TransformerModel`) and their
rules: multi-head latent attention (DeepSeek-V2 Sec. 2.1; DeepSeek-V3 Sec. 2.1) in every
layer, and multi-token prediction modules (DeepSeek-V3 Sec. 2.2). Key names follow the
Hugging Face DeepSeek-V3 config (config.json: q_lora_rank 1536, kv_lora_rank 512,
qk_nope_head_dim 128, qk_rope_head_dim 64, v_head_dim 128, num_nextn_predict_layers 1)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated

from pydantic import Field, StrictFloat, StrictInt

from simulator.config.scenario.rule_helpers import Problem
from simulator.config.scenario.schema_types import Count, _Closed

if TYPE_CHECKING:
    from simulator.config.scenario.schema import Scenario
    from simulator.config.scenario.schema_models import TransformerModel

__all__ = ["MlaSpec", "MtpSpec", "mla_problems", "mla_context", "mla_tensor_nd"]


class MlaSpec(_Closed):
    """Multi-head latent attention in every layer (DeepSeek-V2 Sec. 2.1, Eq. 9-19): the
    keys and values of num_heads heads up-projected from one normed latent of kv_lora_rank
    per token, the queries from one of q_lora_rank (null: projected from the hidden state,
    as DeepSeek-V2-Lite), and a rotary part of qk_rope_head_dim in every query head beside
    one rotary key all heads share (the decoupled RoPE of Sec. 2.1.3)."""

    q_lora_rank: Count | None = Field(default=None, description=(
        "Width of the query latent (low-rank query compression); null: queries projected "
        "from the hidden state directly (DeepSeek-V2-Lite)."))
    kv_lora_rank: Count = Field(description=(
        "Width of the key/value latent, the only key/value state kept per token besides "
        "the rotary key (DeepSeek-V3: 512)."))
    qk_nope_head_dim: Count = Field(description=(
        "Per-head query/key dims without position, up-projected from the latents "
        "(DeepSeek-V3: 128)."))
    qk_rope_head_dim: Count = Field(description=(
        "Per-head query dims with rotary position, and the width of the one rotary key "
        "every head shares (DeepSeek-V3: 64; even)."))
    v_head_dim: Count = Field(description="Per-head value dims (DeepSeek-V3: 128).")


class MtpSpec(_Closed):
    """Multi-token prediction (DeepSeek-V3 Sec. 2.2, Fig. 3, Eq. 21-25): `depth` sequential
    modules after the last layer; module k normalises the previous depth's hidden state and
    the embedding of the token k ahead, projects their concatenation from 2h to h, runs one
    transformer layer, and predicts the token k + 1 ahead through the shared LM head; the
    mean of their cross-entropies is added to the loss times `loss_weight` (lambda)."""

    depth: Annotated[StrictInt, Field(ge=1, le=64)] = Field(default=1, description=(
        "Multi-token prediction modules (D; DeepSeek-V3: 1)."))
    loss_weight: Annotated[StrictFloat, Field(gt=0.0, le=100.0, allow_inf_nan=False)] = Field(
        default=0.3, description=(
            "Weight lambda of the modules' mean cross-entropy in the loss (DeepSeek-V3: 0.3 "
            "for the first 10T tokens, then 0.1)."))


def mla_problems(m: TransformerModel, s: Scenario) -> Iterator[Problem]:
    """What `model.mla` and `model.mtp` cannot be combined with."""
    mla = m.mla
    if mla is not None:
        if m.type != "transformer":
            yield "model.mla", (f"multi-head latent attention in a {m.type} model is not "
                                f"simulated (allowed: null)")
        if mla.qk_rope_head_dim % 2:
            yield "model.mla.qk_rope_head_dim", (
                f"{mla.qk_rope_head_dim} must be even (rotary position turns pairs of dims)")
        if m.num_kv_heads is not None and m.num_kv_heads != m.num_heads:
            yield "model.num_kv_heads", (
                f"{m.num_kv_heads}: multi-head latent attention has a key and a value per "
                f"head (remove the key or set it to model.num_heads={m.num_heads})")
    if m.mtp is not None and m.type != "transformer":
        yield "model.mtp", (f"multi-token prediction in a {m.type} model is not simulated "
                            f"(allowed: null)")


def mla_context(m: TransformerModel, s: Scenario) -> Iterator[Problem]:
    """Context parallel: refused with MLA (the ring's kernel takes keys and values of one
    head width) and with MTP (its token shift crosses the sequence blocks)."""
    if m.mla is not None:
        yield "parallel.context", (
            f"{s.parallel.context} with model.mla is not simulated yet: ring attention "
            f"exchanges keys and values of one head width (allowed with model.mla: 1)")
    if m.mtp is not None:
        yield "parallel.context", (
            f"{s.parallel.context} with model.mtp is not simulated yet: the shift to the "
            f"next tokens crosses the sequence blocks (allowed with model.mtp: 1)")


def mla_tensor_nd(m: TransformerModel, s: Scenario, nd: list[int]) -> Iterator[Problem]:
    """2-D / 3-D tensor parallel: refused with MLA or MTP (no plan for their GEMMs)."""
    for key in ("mla", "mtp"):
        if getattr(m, key) is not None:
            yield "parallel.tensor_nd", (
                f"{nd}: {len(nd)}-D tensor parallel with model.{key} is not simulated yet "
                f"(remove the key; parallel.tensor splits it as Megatron-Core does)")
