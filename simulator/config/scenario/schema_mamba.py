"""Hybrid state-space layers in the scenario (`model.hybrid_pattern`, `model.mamba`): the
Mamba-2 mixer's dimensions and the rules of a hybrid model (Nemotron-H, arXiv:2504.03624).

`model.hybrid_pattern` is Nemotron-H's `hybrid_override_pattern` (Megatron-LM
--hybrid-override-pattern): one character per layer, 'M' a Mamba-2 mixer, '*' self-attention,
'-' an MLP; `simulator.models.layers.layer_kinds` maps it to the layers' kinds. `model.mamba`
gives the Mamba-2 mixers' dimensions (Megatron-Core MambaMixer: d_state, headdim, ngroups,
d_conv, expand, chunk_size; Nemotron-H config.json: ssm_state_size, mamba_head_dim,
mamba_num_heads, n_groups, conv_kernel, expand, chunk_size)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import Field, StrictInt

from simulator.config.scenario.rule_helpers import Problem, divisors
from simulator.config.scenario.schema_types import _Closed

if TYPE_CHECKING:
    from simulator.config.scenario.schema import Scenario
    from simulator.config.scenario.schema_models import TransformerModel

__all__ = ["MambaSpec", "PATTERN_LAYERS", "mamba_graph_dims", "hybrid_problems",
           "hybrid_context_problems", "hybrid_tensor_nd_problems", "has_mamba"]

# what each character of model.hybrid_pattern makes of its layer (Megatron-LM
# megatron/core/ssm/mamba_hybrid_layer_allocation.py Symbols: MAMBA 'M', ATTENTION '*',
# MLP '-'; its MoE 'E' is not simulated here)
PATTERN_LAYERS = {"M": "a Mamba-2 mixer", "*": "self-attention", "-": "an MLP"}

_Small = Annotated[StrictInt, Field(ge=1, le=65_536)]


class MambaSpec(_Closed):
    """The Mamba-2 mixers of a hybrid model (Dao & Gu 2024, Sec. 7; defaults: mamba_ssm's
    Mamba2 and Megatron-Core's MambaMixer)."""

    state_size: _Small = Field(default=128, description=(
        "SSM state size N per group (Mamba-2 d_state; Nemotron-H ssm_state_size)."))
    head_dim: _Small = Field(default=64, description=(
        "Channels per SSM head P (Mamba-2 headdim; Nemotron-H mamba_head_dim)."))
    num_heads: _Small | None = Field(default=None, description=(
        "SSM heads (Nemotron-H mamba_num_heads); null: expand x hidden_size / head_dim."))
    groups: _Small = Field(default=1, description=(
        "Groups of heads sharing one B and C (Mamba-2 ngroups; Nemotron-H n_groups)."))
    conv_kernel: Annotated[StrictInt, Field(ge=1, le=64)] = Field(default=4, description=(
        "Taps of the causal depthwise convolution (Mamba-2 d_conv; Nemotron-H conv_kernel)."))
    expand: Annotated[StrictInt, Field(ge=1, le=64)] | None = Field(default=None, description=(
        "Inner width over hidden_size when num_heads is null (Mamba-2 expand; null: 2)."))
    chunk_size: _Small = Field(default=128, description=(
        "Tokens per chunk of the chunked SSD scan (Megatron-Core and Nemotron-H: 128)."))

    def heads(self, hidden: int) -> int:
        """SSM heads: num_heads, or expand x hidden / head_dim."""
        return self.num_heads or (self.expand or 2) * hidden // self.head_dim


def has_mamba(m: TransformerModel) -> bool:
    """Whether some layer of `m` is a Mamba-2 mixer."""
    return "M" in (m.hybrid_pattern or "")


def mamba_graph_dims(m: TransformerModel) -> dict[str, Any]:
    """The Mamba-2 fields of the graph's dimensions (`graph.decoder.GptDims`); none without
    Mamba layers."""
    if not has_mamba(m):
        return {}
    spec = m.mamba or MambaSpec()
    return {"mamba_heads": spec.heads(m.hidden_size), "mamba_head_dim": spec.head_dim,
            "mamba_groups": spec.groups, "mamba_state": spec.state_size,
            "mamba_conv": spec.conv_kernel, "mamba_chunk": spec.chunk_size}


def _pattern(m: TransformerModel) -> Iterator[Problem]:
    pattern = m.hybrid_pattern or ""
    bad = next(((i, c) for i, c in enumerate(pattern) if c not in PATTERN_LAYERS), None)
    if bad is not None:
        allowed = ", ".join(f"'{c}' ({what})" for c, what in PATTERN_LAYERS.items())
        yield "model.hybrid_pattern", (
            f"character {bad[1]!r} of layer {bad[0]} is not a layer kind; allowed: {allowed}"
            + (" (Nemotron-H's 'E', a mixture-of-experts layer, is not simulated)"
               if bad[1] == "E" else ""))
    elif len(pattern) != m.layers:
        yield "model.hybrid_pattern", (
            f"has {len(pattern)} characters, one per layer; model.layers is {m.layers}")
    if m.moe is not None:
        yield "model.moe", ("a hybrid model's layers are its pattern's ('M', '*', '-'); a "
                            "mixture of experts in them is not simulated (remove model.moe)")


def _shape(m: TransformerModel, s: Scenario) -> Iterator[Problem]:
    spec = m.mamba or MambaSpec()
    if spec.num_heads is None and (spec.expand or 2) * m.hidden_size % spec.head_dim:
        yield "model.mamba.head_dim", (
            f"{spec.head_dim} must divide expand x hidden_size = "
            f"{(spec.expand or 2) * m.hidden_size} (the inner width is cut into heads)")
        return
    if spec.num_heads is not None and spec.expand is not None \
            and spec.num_heads * spec.head_dim != spec.expand * m.hidden_size:
        yield "model.mamba.expand", (
            f"{spec.expand} x hidden_size = {spec.expand * m.hidden_size} channels, but "
            f"num_heads x head_dim = {spec.num_heads * spec.head_dim}; give one of them")
        return
    heads = spec.heads(m.hidden_size)
    if heads % spec.groups:
        yield "model.mamba.groups", (
            f"{spec.groups} must divide the {heads} SSM heads (valid: {divisors(heads)})")
        return
    t = s.parallel.tensor
    if spec.groups % t:
        # Megatron-Core MambaMixer asserts ngroups % tp == 0 (and nheads % tp == 0)
        yield "parallel.tensor", (
            f"{t} must divide model.mamba.groups={spec.groups}: tensor parallel splits the "
            f"Mamba-2 heads by their groups, as Megatron-Core's MambaMixer does (valid: "
            f"{divisors(spec.groups)})")


def hybrid_problems(m: TransformerModel, s: Scenario) -> Iterator[Problem]:
    """The pattern's characters and length, no experts in a hybrid model, and the Mamba-2
    dims against themselves and the tensor-parallel degree."""
    if m.hybrid_pattern is None:
        if m.mamba is not None:
            yield "model.mamba", ("is set, but no layer is a Mamba-2 mixer: give "
                                  "model.hybrid_pattern with 'M' layers, or remove model.mamba")
        return
    if m.type != "transformer":
        yield "model.hybrid_pattern", (
            f"hybrid layers are simulated in a GPT-style decoder (model.type transformer), "
            f"not in a model of type '{m.type}' (remove the key)")
        return
    yield from _pattern(m)
    if has_mamba(m):
        yield from _shape(m, s)
    elif m.mamba is not None:
        yield "model.mamba", (f"is set, but model.hybrid_pattern {m.hybrid_pattern!r} has no "
                              "'M' (Mamba-2) layer; remove model.mamba")


def hybrid_context_problems(m: TransformerModel, s: Scenario) -> Iterator[Problem]:
    """Context parallel on Mamba-2 layers: refused, with the reason."""
    if has_mamba(m):
        yield "parallel.context", (
            f"{s.parallel.context} is not simulated on Mamba-2 layers: context parallel here "
            "is ring attention over sequence blocks, while the SSD scan carries its state "
            "through the whole sequence; Megatron-Core runs Mamba layers under context "
            "parallel by all-to-alls that trade the sequence split for a head split "
            "(megatron/core/ssm/mamba_context_parallel.py), which is not modelled (allowed: 1)")


def hybrid_tensor_nd_problems(m: TransformerModel, s: Scenario) -> Iterator[Problem]:
    """2-D / 3-D tensor parallel on Mamba-2 layers: refused."""
    if has_mamba(m):
        yield "parallel.tensor_nd", (
            "2-D / 3-D tensor parallel splits attention and FFN weights; the Mamba-2 layers "
            "of model.hybrid_pattern split their heads on parallel.tensor only (remove the key)")
