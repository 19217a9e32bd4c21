"""The `transformer` family: GPT-style decoder layers (`graph.builders.build_gpt`; dense or
mixture-of-experts FFN), planned by the sharding algebra keyed on op roles
(`models.transformer_plan`), its program one block repeated per layer. Its verification
case keeps the scenario's dims where small, else shrinks them keeping every split of the
parallel configuration."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import numpy as np

from simulator.config.scenario.schema import Scenario, TransformerModel
from simulator.graph.builders import build_gpt
from simulator.graph.decoder import GptDims
from simulator.graph.graph import Graph
from simulator.models.family import ModelFamily, VerifyCase
from simulator.models.layers import layer_kinds, layer_plan, shrunk_kinds, shrunk_split
from simulator.models.transformer_plan import (
    gpt_dims,
    planned_transformer,
    uses_flash,
    with_moe,
)

__all__ = ["FAMILY", "staged_pipeline", "transformer_model", "small_gpt", "gpt_case",
           "shrunk_pipeline_layers"]

# a unit (block) starts at the embedding, at each layer's first norm and at the final norm
_UNIT_START = re.compile(r"embed|l\d+\.ln1|lnf")


def transformer_model(m: Any) -> TransformerModel:
    """`m`, a transformer's model section (for code of the transformer program only)."""
    assert isinstance(m, TransformerModel), f"a transformer model, not {m.type!r}"
    return m


def staged_pipeline(s: Scenario) -> bool:
    """Whether `verify` runs a transformer's pipeline stages on devices of their own."""
    return isinstance(s.model, TransformerModel) and s.parallel.pipeline > 1


def _chunk_layers(m: TransformerModel, s: Scenario) -> int:
    """Layers a shrunk model keeps: 2 or one of each distinct layer kind, or when the
    pipeline stages run on devices of their own that rounded up to whole groups of its
    layer plan (one MoE period) on every virtual stage (a 3-kind hybrid on 2 stages: 4
    layers), or the shrunk `parallel.pipeline_layers` (`models.layers.shrunk_split`: an
    uneven split stays uneven)."""
    kinds = layer_kinds(m)
    least = min(m.layers, max(2, len(set(kinds))))
    if not staged_pipeline(s):
        return least
    p = s.parallel
    kept = shrunk_pipeline_layers(s)
    if kept is not None:
        return max(least, sum(kept))
    chunks = p.pipeline * (p.virtual_stages if p.schedule == "interleaved_1f1b" else 1)
    step = chunks * layer_plan(kinds).unit  # every virtual stage the same whole groups
    return -(-least // step) * step


def _fits(m: TransformerModel, s: Scenario) -> bool:
    moe = m.moe
    return (m.hidden_size <= 128 and m.layers <= 4 and m.seq_length <= 32 and
            m.vocab_size <= 256 and m.ffn <= 512 and s.training.micro_batch_size <= 4
            and (moe is None or (moe.experts <= 16 and moe.expert_ffn(m.ffn) <= 512
                                 and moe.shared_ffn(m.ffn) <= 512)))


def _small_moe(dims: GptDims, m: TransformerModel, s: Scenario) -> tuple[GptDims, str]:
    """A shrunk model's experts: as many as the scenario's up to 2 per expert-parallel rank
    (at least 2), with the same top_k, capacity factor, routing and MoE layer frequency (at
    most every 2nd layer, so that the 2 layers kept hold one MoE layer); routed and shared
    experts of a width of their own keep one (half the shrunk FFN's, still split by
    tensor)."""
    moe = m.moe
    if moe is None:
        return dims, ""
    ep = s.parallel.expert
    experts = min(moe.experts, max(2, 2 * ep))
    half = dims.ffn // 2 if dims.ffn % (2 * s.parallel.tensor) == 0 else dims.ffn
    small = moe.model_copy(update={
        "experts": experts, "top_k": min(moe.top_k, experts),
        "every": min(moe.every, dims.layers),
        "ffn_hidden_size": half if moe.ffn_hidden_size else None,
        "shared_ffn_hidden_size": half if moe.shared_ffn_hidden_size else None,
        "shared_experts": min(moe.shared_experts, 2), **_small_groups(moe, experts)})
    dims = with_moe(dims, small, exact=True)
    return dims, (f" experts={dims.experts} top_k={dims.top_k} capacity={dims.capacity} "
                  f"every={dims.moe_every}")


def _small_groups(moe, experts: int) -> dict[str, int]:
    """Group-limited routing of a shrunk model's `experts`: as many groups as divide them
    in groups of 2 or more, up to the model's, the same number of best groups where they
    hold top_k experts (else every group)."""
    if moe.groups <= 1:
        return {}
    groups = min(moe.groups, experts // 2)
    while experts % groups:
        groups -= 1
    top = min(moe.group_top_k, groups)
    if top * (experts // groups) < min(moe.top_k, experts):
        top = groups
    return {"groups": groups, "group_top_k": top}


def small_gpt(m: TransformerModel, s: Scenario, flash: bool) -> tuple[GptDims, list[str]]:
    """The scenario's own dims (as `run` plans them) when small; else the smallest dims that
    keep every split of the parallel configuration (heads and key/value groups divisible by
    tensor, and the sequence by tensor under sequence parallel and into two chunks per
    context-parallel rank)."""
    p = s.parallel
    own = dataclasses.replace(gpt_dims(s, flash), batch=s.training.micro_batch_size)
    if _fits(m, s):
        return with_moe(own, m.moe, exact=True), []
    t = _head_split(p)
    groups = max(t, 2)
    heads = groups * (2 if m.kv_heads < m.num_heads else 1)
    unit = t * (2 * p.context if p.context > 1 else 1)  # two chunks per context rank
    seq = -(-8 // unit) * unit
    layers = _chunk_layers(m, s)
    dims = dataclasses.replace(own, layers=layers, kinds=shrunk_kinds(own.kinds, layers),
                               hidden=heads * 4, heads=heads, kv_heads=groups, ffn=8 * t,
                               seq=seq, vocab=8 * t,
                               batch=min(s.training.micro_batch_size, _samples(p)))
    dims = small_attention(dims, seq)
    dims, experts = _small_moe(dims, m, s)
    windows = sorted({k.window for k in dims.kinds if k.window} | ({dims.window} - {0}))
    experts += (f" head_dim={dims.head_size}" if dims.head_size else "") + \
        (f" window={'/'.join(map(str, windows))}" if windows else "")
    ep = f" expert={p.expert}" if m.moe else ""
    ep += f" context={p.context}" if p.context > 1 else ""
    nd = f" tensor_nd={p.tensor_nd}" if p.tensor_nd else ""
    return dims, [f"shrunk to layers={dims.layers} hidden={dims.hidden} heads={dims.heads} "
                  f"kv_heads={dims.kv_heads} ffn={dims.ffn} seq={dims.seq} "
                  f"vocab={dims.vocab} micro_batch={dims.batch}{experts} (same parallel "
                  f"configuration: data={p.data} tensor={p.tensor}{ep}{nd} "
                  f"sequence_parallel={str(p.sequence_parallel).lower()})"] + _split_note(m, s)


def shrunk_pipeline_layers(s: Scenario) -> tuple[int, ...] | None:
    """Layers per virtual stage a shrunk case keeps of `parallel.pipeline_layers`
    (`models.layers.shrunk_split` in groups of the layer plan); None where it is not given
    or the stages do not run on devices of their own."""
    given = s.parallel.pipeline_layers
    if not staged_pipeline(s) or given is None:
        return None
    return shrunk_split(given, layer_plan(layer_kinds(transformer_model(s.model))).unit)


def _split_note(m: TransformerModel, s: Scenario) -> list[str]:
    """What a shrunk case keeps of `parallel.pipeline_layers` (`_chunk_layers`)."""
    small = shrunk_pipeline_layers(s)
    if small is None:
        return []
    return [f"parallel.pipeline_layers {list(s.parallel.pipeline_layers or ())} kept as "
            f"{list(small)}: each stage's layers beyond the fewest, plus one group"]


def small_attention(dims: GptDims, seq: int) -> GptDims:
    """A shrunk model's head size and windows: a head of its own width (8, beside hidden /
    heads = 4) where the scenario sets one, and each layer kind's window one that still
    masks (half the shrunk sequence, at least 2) where it has one."""
    def small(window: int) -> int:
        return min(window, max(2, seq // 2)) if window else 0

    return dataclasses.replace(
        dims, head_size=8 if dims.head_size else 0, window=small(dims.window),
        kinds=tuple(dataclasses.replace(k, window=small(k.window)) for k in dims.kinds))


def _head_split(p) -> int:
    """The ways a shrunk model's heads, FFN dim, vocabulary and sequence split: tensor, or
    under 3-D tensor parallel x*y (z splits the samples)."""
    return p.tensor_nd[0] * p.tensor_nd[1] if p.tensor_nd and len(p.tensor_nd) == 3 \
        else p.tensor


def _samples(p) -> int:
    """Samples a shrunk micro-batch keeps: 2, or 3-D tensor parallel's z, which splits
    them (a divisor of the micro-batch, `axis_rules.tensor_nd`)."""
    return max(2, p.tensor_nd[2]) if p.tensor_nd and len(p.tensor_nd) == 3 else 2


def _case(s: Scenario, fused_attention: bool) -> VerifyCase:
    """The verification case of a transformer scenario (`ModelFamily.case`)."""
    m = s.model
    assert isinstance(m, TransformerModel)
    dims, notes = small_gpt(m, s, uses_flash(s, fused_attention))
    return gpt_case(s, dims, notes)


def gpt_case(s: Scenario, dims: GptDims, notes: list[str]) -> VerifyCase:
    """The verification case of a transformer scenario whose graph (one micro-batch of one
    data-parallel replica) has dimensions `dims` (`notes`: how they were shrunk): the
    Megatron plan on the scenario's parallel configuration, up to 2 micro-batches."""
    p = s.parallel
    micro = min(s.grad_accum_steps, 2)
    if micro < s.grad_accum_steps:
        notes.append(f"{micro} of {s.grad_accum_steps} gradient-accumulation steps run")
    per_micro = dims.batch * p.data
    sharded, mesh = planned_transformer(dataclasses.replace(dims, batch=per_micro), p.data,
                                        p.tensor, p.sequence_parallel, p.expert_axis,
                                        tuple(p.tensor_nd) if p.tensor_nd else None)
    graph = build_gpt(dataclasses.replace(dims, batch=per_micro))
    whole = build_gpt(dataclasses.replace(dims, batch=per_micro * micro))
    return VerifyCase(sharded, whole, graph, mesh, micro, tuple(notes), np.float64)


def _graph(s: Any, batch: int) -> Graph:
    return build_gpt(dataclasses.replace(gpt_dims(s, uses_flash(s)), batch=batch))


def _block_layers(m: Any) -> int:
    return layer_plan(layer_kinds(transformer_model(m))).unit


FAMILY = ModelFamily("transformer", layered=True, unplanned=_graph,
                     unit_start=lambda name: _UNIT_START.fullmatch(name) is not None,
                     case=_case, block_layers=_block_layers)
