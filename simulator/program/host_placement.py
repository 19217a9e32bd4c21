"""Which operators of a `type: graph` model run on the host (MindSpore's
`primitive_target: CPU`), and the bytes their kernels move over the host link: the program's
part of host & device heterogeneous placement (`simulator.lower.host` prices it)."""

from __future__ import annotations

import math
from typing import Any

from simulator.sharding.lower import kernel_of, local_shapes

__all__ = ["HOST_TARGET", "host_placed", "host_kernels"]

HOST_TARGET = "CPU"       # MindSpore's primitive_target value for the host
_BWD_SUFFIXES = (".bwd", ".dgrad", ".wgrad")


def host_placed(op: Any) -> bool:
    """The graph operator runs on the host."""
    return op.attrs.get("primitive_target") == HOST_TARGET


def host_kernels(plan: Any, e: float) -> tuple[tuple[str, float], ...]:
    """(ComputeSpec name, bytes over the host link) of every kernel of a host-placed op:
    forward: its non-parameter inputs down and its output up; backward: the output's
    gradient down and the gradients of its floating inputs produced on the device up."""
    out: list[tuple[str, float]] = []
    tensors = plan.graph.tensors
    for p in plan.ops:
        if not host_placed(p.op):
            continue
        ins, shape = local_shapes(plan, p)
        acts = [(n, s) for n, s in zip(p.op.inputs, ins) if tensors[n].kind != "parameter"]
        down = sum(math.prod(s) for _, s in acts)
        grads = sum(math.prod(s) for n, s in acts if tensors[n].kind not in ("input", "label"))
        name = kernel_of(p)
        out.append((name, e * (down + math.prod(shape))))
        # the backward's copies ride on its first kernel (.bwd, or .dgrad of a GEMM)
        out += [(name + sfx, e * (math.prod(shape) + grads) if sfx != ".wgrad" else 0.0)
                for sfx in _BWD_SUFFIXES]
    return tuple(out)
