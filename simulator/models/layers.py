"""The kind of every layer of a transformer scenario (`graph.decoder.LayerKind`), and how a
program stands for them: the one place that reads the model keys which make layers differ
(the layer frequency of a mixture of experts today; dense leading layers, attention windows
and hybrid patterns as they come), so that the graph builder, the program, the parameter
counts, the pipeline split and `verify`'s shrunk case all see the same sequence.

A program does not plan every layer: it plans a representative graph and derives one Block
per distinct group of layers (`LayerPlan`):

- a sequence that repeats with period `unit` (every layer alike: 1; a mixture of experts
  every k-th layer: k) is one group of `unit` layers, repeated L / unit times, planned as the
  middle one of three groups (its neighbours are layers on both sides), as the whole model
  when it has fewer than three groups;
- a sequence whose layers differ in their attention window alone (`windows_only`: GPT-OSS,
  Gemma-3) and any other sequence (DeepSeek-V3's three dense layers before 58 MoE layers,
  Nemotron-H's Mamba, attention and MLP layers) has groups of one layer, one per distinct kind, each
  planned between two layers (the first kind before them all, the last after), and the
  model is their runs in layer order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from simulator.config.scenario.schema import TransformerModel
from simulator.graph.decoder import LayerKind

__all__ = ["layer_kinds", "HYBRID_LAYERS", "period", "LayerPlan", "layer_plan", "windows_only",
           "shrunk_kinds", "shrunk_split"]

Group = tuple[LayerKind, ...]

# Nemotron-H's hybrid_override_pattern (`model.hybrid_pattern`): each character one layer, a
# Mamba-2 mixer, self-attention or an MLP, each with its own pre-norm and residual
# (megatron/core/ssm/mamba_block.py builds MambaLayer, TransformerLayer with attention
# only, TransformerLayer with an MLP only)
HYBRID_LAYERS: dict[str, LayerKind] = {
    "M": LayerKind(mixer="mamba", ffn="none"),
    "*": LayerKind(mixer="attention", ffn="none"),
    "-": LayerKind(mixer="none", ffn="dense"),
}


def layer_kinds(m: TransformerModel) -> tuple[LayerKind, ...]:
    """One LayerKind per layer of `m`, first layer first: a hybrid model's pattern
    (`model.hybrid_pattern`, HYBRID_LAYERS); else attention in every layer (multi-head
    latent attention with `model.mla`) over the layer's window
    (`TransformerModel.layer_window`: a sliding window but on every `global_every`-th
    layer), and a mixture of experts in the FFN of every `moe.every`-th layer after the
    `moe.first_dense` dense ones, the last of each group (GShard's every other layer: 1, 3,
    5, ...; Megatron-LM --moe-layer-freq; DeepSeek's first_k_dense_replace), else dense."""
    if m.hybrid_pattern is not None:
        return tuple(HYBRID_LAYERS[c] for c in m.hybrid_pattern)
    moe = m.moe_spec()
    mixer = "mla" if m.mla is not None else "attention"  # graph.mla in every layer
    return tuple(LayerKind(mixer=mixer, window=m.layer_window(i),
                           ffn="moe" if moe is not None and moe.is_moe(i) else "dense")
                 for i in range(m.layers))


def period(kinds: tuple[LayerKind, ...]) -> int:
    """The least p dividing len(kinds) with kinds[i] == kinds[i % p] for every i (the
    length itself when the sequence does not repeat)."""
    n = len(kinds)
    for p in range(1, n + 1):
        if n % p == 0 and all(kinds[i] == kinds[i % p] for i in range(n)):
            return p
    return n


@dataclass(frozen=True)
class LayerPlan:
    """How a program stands for the layers `kinds` (see the module docstring).

    unit: layers per group; graph: the kinds of the representative graph's layers;
    groups: the distinct groups, each with the index of its first layer in that graph;
    runs: (group index, consecutive copies) in model order."""

    kinds: tuple[LayerKind, ...]
    unit: int
    graph: tuple[LayerKind, ...]
    groups: tuple[tuple[Group, int], ...]
    runs: tuple[tuple[int, int], ...]


def windows_only(kinds: tuple[LayerKind, ...]) -> bool:
    """Whether `kinds` differ in their attention window alone (GPT-OSS's alternating
    128-token and full layers, Gemma-3's 5 local : 1 global): layers a pipeline may cut
    between one by one, as Megatron-Core does (its stages hold num_layers / pp layers
    whatever their windows: transformer_block.py get_num_layers_to_build)."""
    return len({(k.mixer, k.ffn) for k in kinds}) == 1 and len({k.window for k in kinds}) > 1


def layer_plan(kinds: tuple[LayerKind, ...]) -> LayerPlan:
    """The `LayerPlan` of a model whose layers are `kinds`."""
    n, p = len(kinds), period(kinds)
    if (p < n or n == 1) and not (p > 1 and windows_only(kinds[:p])):
        first = p if n >= 3 * p else 0
        graph = kinds[:3 * p] if n >= 3 * p else kinds
        return LayerPlan(kinds, p, graph, ((kinds[:p], first),), ((0, n // p),))
    distinct = tuple(dict.fromkeys(kinds))
    if n > len(distinct) + 2:
        graph = (distinct[0],) + distinct + (distinct[-1],)
        at = {k: i + 1 for i, k in enumerate(distinct)}
    else:
        graph = kinds
        at = {k: kinds.index(k) for k in distinct}
    index = {k: i for i, k in enumerate(distinct)}
    runs: list[tuple[int, int]] = []
    for k in kinds:
        if runs and runs[-1][0] == index[k]:
            runs[-1] = (index[k], runs[-1][1] + 1)
        else:
            runs.append((index[k], 1))
    return LayerPlan(kinds, 1, graph, tuple(((k,), at[k]) for k in distinct), tuple(runs))


def shrunk_kinds(kinds: tuple[LayerKind, ...], layers: int) -> tuple[LayerKind, ...]:
    """The kinds of a model shrunk to `layers` layers (`verify`'s small case): its first
    layers when they are whole periods of a repeating sequence (or the whole model), else
    its distinct kinds in the order they first come, repeated, so that every kind is kept
    while `layers` allows."""
    if layers >= len(kinds):
        return kinds[:layers]
    if layers % period(kinds) == 0:
        return kinds[:layers]
    distinct = tuple(dict.fromkeys(kinds))
    return tuple(distinct[i % len(distinct)] for i in range(layers))


def shrunk_split(layers: Sequence[int], unit: int) -> tuple[int, ...]:
    """Layers per virtual stage of a shrunk model whose stages held `layers` (groups of
    `unit` layers): each stage keeps one group, and as many more as it held beyond the
    stage that held fewest, so an uneven split stays as uneven stage to stage
    ([19, 21, 20, 20] -> [1, 3, 2, 2]) and an even one becomes one group per stage."""
    groups = [n // unit for n in layers]
    least = min(groups)
    return tuple((g - least + 1) * unit for g in groups)
