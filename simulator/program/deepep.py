"""DeepEP's FP8 dispatch (`parallel.expert_dispatcher: deepep` under an FP8 recipe).

DeepSeek-V3 quantizes "the activation before MoE up-projections into FP8 and then apply
dispatch components", and likewise "the activation gradient before MoE down-projections";
"for both the forward and backward combine components, we retain them in BF16"
(arXiv:2412.19437 Sec. 3.3.3). DeepEP's dispatch takes FP8 input with one fp32 scale per
128 channels (deepseek-ai/DeepEP README, "FP8 dispatch"; its tests count FP8 bytes as the
BF16 bytes x (1 + 4/128) / 2). So of a MoE layer's four all-to-alls the forward dispatch
(the tokens to the experts' up projections) and the backward one that carries the combine's
gradient to the experts' down projections move FP8 with their scales; the combine and the
dispatch's backward stay BF16. The collectives keep their names and places (what `verify`
proves); only their bytes change.
"""

from __future__ import annotations

from dataclasses import replace

from simulator.cost.specs import CommSpec
from simulator.program.program import Op

__all__ = ["FP8_DISPATCH_FACTOR", "fp8_dispatch"]

FP8_DISPATCH_FACTOR = (1 + 4 / 128) / 2  # FP8 data + an fp32 scale a 128 channels, of BF16
# the all-to-alls carrying tokens (forward) or gradients (backward) to the experts' GEMMs,
# by the op they feed
_INTO_EXPERTS = {"fwd": ".efc1.all_to_all", "bwd": ".efc2.all_to_all"}


def _dispatched(ops: tuple[Op, ...], phase: str) -> tuple[Op, ...]:
    end = _INTO_EXPERTS[phase]
    return tuple(replace(op, bytes=op.bytes * FP8_DISPATCH_FACTOR)
                 if isinstance(op, CommSpec) and op.collective == "all_to_all"
                 and op.axis == "ep" and op.name.endswith(end) else op for op in ops)


def fp8_dispatch(fwd: dict[str, tuple[Op, ...]], bwd: dict[str, tuple[Op, ...]]
                 ) -> tuple[dict[str, tuple[Op, ...]], dict[str, tuple[Op, ...]]]:
    """Each block's forward and backward ops with the expert dispatches in FP8 (module
    doc)."""
    return ({k: _dispatched(v, "fwd") for k, v in fwd.items()},
            {k: _dispatched(v, "bwd") for k, v in bwd.items()})
