"""Transformer parallel plans written in the sharding algebra, keyed on op roles.

- data parallel: the batch label split on `dp`; weights broadcast, so their gradients come
  out Partial on `dp` and need a reduction;
- Megatron tensor parallel (Shoeybi et al. 2019): heads (g) and the FFN dim (f) split on
  `tp`, the vocabulary split in the embedding and LM head; the row-parallel outputs stay
  Partial until the residual add needs them whole (an all-reduce, inserted by the planner);
- sequence parallel (Korthikanti et al. 2022): norms, dropouts and residual adds split on
  the sequence on `tp`, so the planner inserts all-gathers before the column-parallel GEMMs
  and reduce-scatters after the row-parallel ones in place of the all-reduces.
"""

from __future__ import annotations

import dataclasses

from simulator.graph.graph import Graph, OpNode
from simulator.sharding.plan import Strategy

__all__ = ["transformer_choices", "apply_transformer_plan"]

_ROLE_TP: dict[str, tuple[str, str]] = {
    # role: (tp choice without SP, with SP)
    "embed": ("v", "v"), "q": ("g", "g"), "k": ("g", "g"), "v": ("g", "g"),
    "scores": ("g", "g"), "scale": ("d1", "d1"), "mask": ("d1", "d1"),
    "softmax": ("d1", "d1"), "attn_drop": ("d1", "d1"), "context": ("g", "g"),
    "proj": ("g", "g"), "proj_drop": ("P0", "d1"), "fc1": ("f", "f"), "fc3": ("f", "f"),
    "act": ("d2", "d2"), "glu": ("d2", "d2"), "fc2": ("f", "f"), "fc2_drop": ("P0", "d1"),
    "head": ("v", "v"),
}
_SEQ_REGION = ("embed_pos", "embed_drop", "ln1", "ln2", "lnf", "res1", "res2", "ce", "loss")
_DP_LABEL = {"embed": "i0", "q": "b", "k": "b", "v": "b", "scores": "b", "context": "b",
             "proj": "b", "fc1": "b", "fc3": "b", "fc2": "b", "head": "b"}


def transformer_choices(role: str, sequence_parallel: bool) -> dict[str, str]:
    """The per-mesh-axis choice for an op of this role."""
    if role in _ROLE_TP:
        tp = _ROLE_TP[role][1 if sequence_parallel else 0]
    elif role in _SEQ_REGION:
        tp = "d1" if sequence_parallel else "B"
    else:
        raise KeyError(f"no transformer plan for op role {role!r}")
    return {"dp": _DP_LABEL.get(role, "d0"), "tp": tp}


def apply_transformer_plan(graph: Graph, sequence_parallel: bool) -> Graph:
    """The graph with every op's strategy set for a (dp, tp) mesh."""
    ops: list[OpNode] = []
    for op in graph.ops:
        role = op.name.split(".")[-1]
        choices = transformer_choices(role, sequence_parallel)
        ops.append(dataclasses.replace(op, strategy=Strategy(axes=choices)))
    return Graph(graph.tensors, tuple(ops))
