"""The cost functions the lowering prices tasks with, bundled so tests can inject their own.

`CostModel.from_hardware(hw)` binds the pure functions of `simulator.cost` to a hardware
profile; tests pass plain lambdas (zero-cost communication, unit compute, ...). Nothing here
keeps state: pricing an op tuple is a pure sum.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from simulator.cost import collective_time_s, compute_time_s, send_recv_time_s
from simulator.cost.specs import CommSpec, ComputeSpec, GroupSpec
from simulator.lower.cuda_graphs import Graphs, captured_names, host_times
from simulator.program.program import Op, TpOverlap

__all__ = ["CostModel", "Priced", "price_ops", "merge_volumes", "eager_launch_s", "eager_loop_s"]


@dataclass(frozen=True)
class CostModel:
    """Seconds for a kernel, a collective over a group, and a point-to-point message."""

    compute_s: Callable[[ComputeSpec], float]
    collective_s: Callable[[str, float, GroupSpec], float]
    send_recv_s: Callable[[float, bool], float]
    copy_s: Callable[[float], float] = lambda nbytes: 0.0  # host <-> device, one direction
    hardware: Any = None  # the profile priced (for costs outside the device: servers)
    # a point-to-point message between two given ranks (nbytes, intra, sender, receiver),
    # where the two ends may differ (lower.device_costs); None: send_recv_s
    peer_send_s: Callable[[float, bool, int, int], float] | None = None
    # compute kernels run this fraction slower while a collective runs beside them
    overlap_slowdown: float = 0.0
    # host seconds the training stack spends launching one kernel (its framework profile's
    # `launch`): a run of kernels takes at least their count times this (`price_ops`)
    host_kernel_s: float = 0.0
    # host seconds per launched kernel in a mixture-of-experts layer whose token dispatcher
    # makes the host wait for the device each forward (framework profile `moe_host`;
    # `lower.moe_host`); 0: the stack's dispatcher does not sync
    moe_host_kernel_s: float = 0.0
    moe_dispatcher_kernels: int = 0  # the dispatcher's launches before each sync (moe_host)
    # host seconds of a GEMM and of another kernel that a C++ loop issues inside one Python
    # operator in such a layer (Transformer Engine's per-expert launches); None: as any other
    moe_loop_s: tuple[float | None, float | None] = (None, None)
    # host seconds per CUDA graph launch (framework profile `launch.graph_launch_us`), and
    # the regions the run captures (scenario `training.cuda_graphs`, `lower.cuda_graphs`;
    # set per scenario by `lower.stages`)
    graph_launch_s: float = 0.0
    graphs: Graphs | None = None
    # a node's NVMe drives, all at once: seconds to read / write nbytes (lower.nvme); None
    # where the profile gives no NVMe figures
    nvme_read_s: Callable[[float], float] | None = None
    nvme_write_s: Callable[[float], float] | None = None

    @classmethod
    def from_hardware(cls, hw: Any, host_kernel_s: float = 0.0,
                      moe_host: tuple[Any, ...] = (0.0, 0),
                      graph_launch_s: float = 0.0) -> CostModel:
        """The cost model of `simulator.cost` for hardware profile `hw` (and a stack that
        spends `host_kernel_s` of host time per kernel it launches; `moe_host`: per kernel
        of an MoE layer whose dispatcher syncs, and the dispatcher's launches before each
        sync, and optionally the C++ loop's per-GEMM and per-kernel seconds (`moe_loop_s`);
        `graph_launch_s`: per CUDA graph launch). The eager per-kernel figures, which
        the stacks measured on x86 hosts, are scaled by the profile's
        `host.launch_cost_factor` (`eager_launch_s`); a graph launch is not."""

        pcie = float(hw.pcie_bandwidth_bytes_per_s)

        @lru_cache(maxsize=4096)
        def collective(coll: str, nbytes: float, group: GroupSpec) -> float:
            # pure in its arguments: gradient buckets repeat one size hundreds of times
            return collective_time_s(coll, nbytes, group, hw)

        return cls(
            compute_s=lambda spec: compute_time_s(spec, hw),
            collective_s=collective,
            send_recv_s=lambda nbytes, intra: send_recv_time_s(nbytes, intra, hw),
            copy_s=lambda nbytes: nbytes / pcie,
            hardware=hw,
            overlap_slowdown=float(hw.efficiency.overlap_compute_slowdown),
            host_kernel_s=eager_launch_s(hw, host_kernel_s),
            moe_host_kernel_s=eager_launch_s(hw, moe_host[0]),
            moe_dispatcher_kernels=moe_host[1],
            moe_loop_s=eager_loop_s(hw, moe_host[2] if len(moe_host) > 2 else (None, None)),
            graph_launch_s=graph_launch_s,
            nvme_read_s=_per_byte(hw.nvme_read_bytes_per_s),
            nvme_write_s=_per_byte(hw.nvme_write_bytes_per_s),
        )


def eager_launch_s(hw: Any, seconds: float) -> float:
    """Host seconds per eagerly launched kernel on `hw`'s host: a stack's figure (measured on
    an x86 host) times the profile's `host.launch_cost_factor` (1 where it gives none)."""
    factor = getattr(getattr(hw, "host", None), "launch_cost_factor", None)
    return seconds * (factor or 1.0)


def eager_loop_s(hw: Any, loop: tuple[float | None, float | None]
                 ) -> tuple[float | None, float | None]:
    """`eager_launch_s` of each of a C++ loop's figures (None stays None)."""
    g, k = (None if s is None else eager_launch_s(hw, s) for s in loop)
    return g, k


def _per_byte(bandwidth: float) -> Callable[[float], float] | None:
    """nbytes -> seconds at `bandwidth` bytes/s; None for no bandwidth (0)."""
    if not bandwidth:
        return None
    return lambda nbytes: nbytes / bandwidth


@dataclass(frozen=True)
class Priced:
    """Seconds of an op sequence on one device: kernels, and critical-path collectives."""

    compute_s: float
    comm_s: float
    comm: tuple[tuple[str, float], ...]  # (collective, total bytes), one entry per kind
    # the part of comm_s that is the expert-parallel all-to-all (dispatch and combine: the
    # `ep` all_to_alls), which `parallel.overlap.moe_a2a` hides (`lower.a2a_overlap`)
    a2a_s: float = 0.0

    def __add__(self, other: Priced) -> Priced:
        return Priced(self.compute_s + other.compute_s, self.comm_s + other.comm_s,
                      merge_volumes(self.comm + other.comm), self.a2a_s + other.a2a_s)

    def scaled(self, k: int) -> Priced:
        """The same ops run k times in a row."""
        return Priced(self.compute_s * k, self.comm_s * k,
                      tuple((c, b * k) for c, b in self.comm), self.a2a_s * k)


def merge_volumes(pairs: tuple[tuple[str, float], ...]) -> tuple[tuple[str, float], ...]:
    """(collective, bytes) pairs summed per collective, in first-seen order."""
    out: dict[str, float] = {}
    for coll, nbytes in pairs:
        out[coll] = out.get(coll, 0.0) + nbytes
    return tuple(out.items())


def _gemm_partner(ops: tuple[Op, ...], i: int) -> int | None:
    """Index of the GEMM a tensor-parallel collective at i pipelines against: the GEMM that
    consumes it (next op) or else the one that produced it (previous op)."""
    for j in (i + 1, i - 1):
        op = ops[j] if 0 <= j < len(ops) else None
        if isinstance(op, ComputeSpec) and op.kind == "gemm":
            return j
    return None


def _overlapped(comm_s: float, gemm_s: float, tp: TpOverlap, op: CommSpec
                ) -> tuple[float, float]:
    """(extra compute seconds, exposed comm seconds) of a collective of comm_s overlapped
    with a GEMM of gemm_s: while both run, the GEMM has 1 - (the collective's SM share) of
    the compute units; what the GEMM cannot cover stays exposed. An all-gather ring-
    exchanges its chunks on the copy engines (the local chunk's GEMM needs nothing, each
    step hides the next chunk: max(0, c - g)); a forward reduce-scatter is pipelined in
    rs_splits pieces, the last piece after the last GEMM piece (+ min(c, g) / rs_splits); a
    backward one runs in bulk beside the wgrad GEMM; any other collective is pipelined in
    `chunks` pieces (TpOverlap)."""
    both = min(comm_s, gemm_s)
    if op.collective == "all_gather":
        sm, tail = tp.ring_sm_fraction, 0.0
    elif op.collective == "reduce_scatter":
        sm, tail = tp.sm_fraction, (both / tp.rs_splits if op.phase == "fwd" else 0.0)
    else:
        sm, tail = tp.sm_fraction, both / tp.chunks
    return both * sm / (1.0 - sm), max(0.0, comm_s - gemm_s) + tail


def price_ops(ops: tuple[Op, ...], costs: CostModel, groups: dict[str, GroupSpec],
              tp_overlap: TpOverlap | None = None) -> Priced:
    """Price `ops` run back to back: collectives on axis a use group `groups[a]`. With
    `tp_overlap`, each collective on axis 'tp' next to a GEMM overlaps that GEMM. The host
    issues the ops one kernel each, `costs.host_kernel_s` apiece, ahead of the device: the
    sequence takes at least their sum (kernels shorter than their launch leave the device
    waiting; the shortfall is counted as compute)."""
    compute = comm = a2a = 0.0
    volumes: list[tuple[str, float]] = []
    times = [costs.compute_s(op) if isinstance(op, ComputeSpec) else 0.0 for op in ops]
    for i, op in enumerate(ops):
        if isinstance(op, CommSpec):
            seconds = costs.collective_s(op.collective, op.bytes, groups[op.axis])
            partner = _gemm_partner(ops, i) if tp_overlap and op.axis == "tp" else None
            if partner is not None and tp_overlap is not None:
                slower, seconds = _overlapped(seconds, times[partner], tp_overlap, op)
                compute += slower
            comm += seconds
            if op.axis == "ep" and op.collective == "all_to_all":
                a2a += seconds
            volumes.append((op.collective, op.bytes))
        else:
            compute += times[i]
    compute = max(compute, _launch_floor_s(ops, costs) - comm)
    return Priced(compute, comm, merge_volumes(tuple(volumes)), a2a)


def _launch_floor_s(ops: tuple[Op, ...], costs: CostModel) -> float:
    """Host seconds to issue `ops`: `costs.host_kernel_s` per op that launches work, a run of
    ops the run's CUDA graphs capture one graph launch (`lower.cuda_graphs`)."""
    if not costs.host_kernel_s:
        return 0.0

    def eager(op: Op) -> float:
        works = isinstance(op, CommSpec) or op.flops > 0 or op.bytes_accessed > 0
        return costs.host_kernel_s if works else 0.0
    g = costs.graphs
    if g is None:
        return sum(1 for op in ops if eager(op)) * costs.host_kernel_s
    moe = any(isinstance(op, ComputeSpec) and op.grouped for op in ops)
    return sum(host_times(ops, captured_names(ops, g, moe), g, eager))
