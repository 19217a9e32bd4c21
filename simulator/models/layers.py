"""The kind of every layer of a transformer scenario (`graph.builders.LayerKind`): the one
place that reads the model keys which make layers differ (the layer frequency of a mixture
of experts today; dense leading layers, attention windows and hybrid patterns as they come),
so that the graph builder, the program and the pipeline split all see the same sequence."""

from __future__ import annotations

from simulator.config.scenario.schema import TransformerModel
from simulator.graph.decoder import LayerKind

__all__ = ["layer_kinds", "HYBRID_LAYERS"]

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
    (`model.hybrid_pattern`, HYBRID_LAYERS); else attention in every layer, and a
    mixture of experts in the FFN of every `moe.every`-th layer, the last of each group
    (GShard's every other layer: 1, 3, 5, ...; Megatron-LM --moe-layer-freq), else dense."""
    if m.hybrid_pattern is not None:
        return tuple(HYBRID_LAYERS[c] for c in m.hybrid_pattern)
    moe = m.moe_spec()
    return tuple(LayerKind(ffn="moe" if moe is not None and (i + 1) % moe.every == 0
                           else "dense")
                 for i in range(m.layers))
