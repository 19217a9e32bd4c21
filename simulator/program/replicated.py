"""The kernels of a planned transformer block that every tensor-parallel rank runs whole:
GEMMs whose inputs and output are all replicated on the `tp` axis (multi-head latent
attention's down-projections without sequence parallel: Megatron-Core builds them as a
TELinear of parallel_mode 'duplicated', megatron/core/models/gpt/gpt_layer_specs.py). The
program's per-device FLOPs times the tensor degree count such a kernel once per rank; the
model FLOPs count it once (`program.flops`), the hardware FLOPs per rank (they run)."""

from __future__ import annotations

from collections.abc import Callable

from simulator.sharding.placement import B
from simulator.sharding.plan import ShardingPlan

__all__ = ["tp_replicated_kernels"]


def tp_replicated_kernels(plan: ShardingPlan, select: Callable[[str], bool]
                          ) -> frozenset[str]:
    """Kernel names of the selected ops all of whose GEMMs are replicated on `tp` (a kernel
    that also holds a split op is not one)."""
    if "tp" not in plan.mesh.names or plan.mesh.shape[plan.mesh.axis_index("tp")] == 1:
        return frozenset()
    axis = plan.mesh.axis_index("tp")
    whole: dict[str, bool] = {}
    for p in plan.ops:
        if not select(p.op.name) or p.op.family.kind != "gemm":
            continue
        sig = p.sig.axes[axis]
        kernel = str(p.op.attrs.get("kernel", p.op.name))
        replicated = sig.output == B and all(x == B for x in sig.inputs)
        whole[kernel] = whole.get(kernel, True) and replicated
    return frozenset(k for k, rep in whole.items() if rep)
