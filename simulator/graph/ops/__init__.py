"""Operator families, registered on import. `get_family(name)` looks one up."""

from simulator.graph.ops import (
    attention,
    conv,
    einsum,
    elementwise,
    embedding,
    loss,
    moe,
    norm,
    reduce,
    ring_attention,
    shape,
)
from simulator.graph.ops.base import KernelCtx, LabelView, OpError, OpFamily, families, get_family

__all__ = ["KernelCtx", "LabelView", "OpError", "OpFamily", "families", "get_family"]
_ = (attention, conv, einsum, elementwise, embedding, loss, moe, norm, reduce, ring_attention,
     shape)
