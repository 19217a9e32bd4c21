"""Multi-copy parallel (`parallel.overlap.copies = c`; MindSpore's multi-copy / "interleaved
copies" of a micro-batch): the micro-batch is split into c slices along the batch, and the
slices run the same op sequence interleaved on one device, so that the tensor-parallel
collective of one slice runs on the communication stream while another slice computes.

Simulated, not a closed form: a small event simulation (`engine.interleave`) per op
sequence with two resources, the device's compute units and its tensor-parallel link. Each
copy runs its ops in order (op j waits for its op j-1: a collective for the kernel that
produced its input, a kernel for the collective that delivers it); the compute stream
serves the copies' kernels in the order they become ready (first come, first served; copy
order on ties), as does the link. A slice's kernel takes 1/c of the whole kernel's time
(the same efficiency: an approximation for GEMMs whose token dimension shrinks), a slice's
collective moves 1/c of the bytes, priced with its own latency. The exposed communication
is the makespan minus the kernel time.
"""

from __future__ import annotations

from simulator.cost.specs import CommSpec, ComputeSpec, GroupSpec
from simulator.engine.interleave import interleaved_makespan
from simulator.lower.costs import CostModel, Priced, merge_volumes
from simulator.program.program import Op

__all__ = ["multi_copy"]


def _durations(ops: tuple[Op, ...], costs: CostModel, groups: dict[str, GroupSpec],
               copies: int) -> list[tuple[str, float]]:
    """(resource, seconds of one slice) per op: 'compute' or 'link'."""
    out = []
    for op in ops:
        if isinstance(op, ComputeSpec):
            out.append(("compute", costs.compute_s(op) / copies))
        else:
            out.append(("link", costs.collective_s(op.collective, op.bytes / copies,
                                                   groups[op.axis])))
    return out


def multi_copy(ops: tuple[Op, ...], costs: CostModel, groups: dict[str, GroupSpec],
               copies: int) -> Priced:
    """`ops` of one micro-batch run as `copies` interleaved slices: the kernel time, the
    communication left exposed, and the bytes moved (the same as unsplit)."""
    steps = _durations(ops, costs, groups, copies)
    compute = copies * sum(s for r, s in steps if r == "compute")
    makespan = interleaved_makespan(steps, copies) if steps else 0.0
    volumes = tuple((op.collective, op.bytes) for op in ops if isinstance(op, CommSpec))
    return Priced(compute, max(0.0, makespan - compute), merge_volumes(volumes))
