"""The kind of every layer of a transformer scenario (`graph.builders.LayerKind`): the one
place that reads the model keys which make layers differ (the layer frequency of a mixture
of experts today; dense leading layers, attention windows and hybrid patterns as they come),
so that the graph builder, the program and the pipeline split all see the same sequence."""

from __future__ import annotations

from simulator.config.scenario.schema import TransformerModel
from simulator.graph.decoder import LayerKind

__all__ = ["layer_kinds"]


def layer_kinds(m: TransformerModel) -> tuple[LayerKind, ...]:
    """One LayerKind per layer of `m`, first layer first: attention in every layer (over
    the layer's window, `TransformerModel.layer_window`: a sliding window but on every
    `global_every`-th layer), and a
    mixture of experts in the FFN of every `moe.every`-th layer, the last of each group
    (GShard's every other layer: 1, 3, 5, ...; Megatron-LM --moe-layer-freq), else dense."""
    moe = m.moe_spec()
    return tuple(LayerKind(window=m.layer_window(i),
                           ffn="moe" if moe is not None and (i + 1) % moe.every == 0
                           else "dense")
                 for i in range(m.layers))
