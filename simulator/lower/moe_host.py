"""Host-bound mixture-of-experts layers: the token dispatcher's device-to-host sync and the
kernels Transformer Engine launches per local expert.

What the stack's code does (Megatron-Core core_v0.15.0, the NeMo 25.11 / Megatron-Bridge
25.11 stack; Transformer Engine v2.9):

- **One sync per MoE layer's forward.** `MoEAlltoAllTokenDispatcher` (megatron/core/
  transformer/moe/token_dispatcher.py) in dropless mode (no capacity factor, so not
  `drop_and_pad`): `preprocess` counts the tokens per expert on the device and all-gathers
  the counts over the expert group, then marks `_maybe_update_cuda_sync_point(
  "before_ep_alltoall")` (EP > 1; "before_finish" otherwise); `_maybe_dtoh_and_synchronize`
  copies the counts to the host (`maybe_move_tensor_to_cpu`, `.to("cpu", non_blocking=True)`
  on `cuda_dtoh_stream` at "before_permutation_1") and, at the sync point,
  `self.d2h_event.synchronize()`: the host waits for the device to finish every kernel
  queued before the copy. The expert GEMMs need the counts on the host (`TEGroupedMLP.
  forward`: `tokens_per_expert.tolist()` as TE's `m_splits`). The backward reuses the host
  values: it has no sync.
- **Kernels per local expert.** TE's `GroupedLinear` (transformer_engine/pytorch/module/
  grouped_linear.py, `_GroupedLinear.forward` / `.backward`) runs `general_grouped_gemm`
  (cpp_extensions/gemm.py) -> `te_general_grouped_gemm` (csrc/extensions/gemm.cpp) ->
  `nvte_multi_tensor_gemm` -> `multi_stream_cublas_gemm` (common/gemm/cublaslt_gemm.cu): a
  loop of one cuBLASLt GEMM per local expert (`for (int i = 0; i < num_gemms; i++)
  nvte_cublas_gemm_v2(...)`, each with its own heuristic query), so a grouped GEMM is
  N launches: forward 1, backward dgrad + wgrad, per GroupedLinear (fc1, fc2). Under MXFP8
  `te_general_grouped_gemm` also swizzles both operands' block scales
  (`multi_tensor_swizzle_scaling_factors`, one kernel per operand list: 2 per call), and
  `tex.split_quantize` of the input (forward) and of the output gradient (backward)
  quantizes each expert's split on its own (csrc/extensions/cast.cpp
  `multi_tensor_quantize_impl`: a fused multi-tensor kernel for delayed-scaling FP8 only,
  "Quantize kernels individually" otherwise): N launches each.

- **GPT-OSS's clamped GLU syncs too.** `weighted_bias_quick_geglu_impl` (megatron/core/
  fusions/fused_bias_geglu.py, called by `TEGroupedMLP.forward`'s `bias_act_func` for a
  quick-GELU GLU: Megatron-Bridge's `GPTOSSProvider`) makes its linear offset a CUDA tensor
  from a Python float on every call, `torch.tensor(linear_offset, dtype=input.dtype,
  device=input.device)`: a host-to-device copy with non_blocking false
  (torch/csrc/utils/tensor_new.cpp `internal_new_from_data`), which PyTorch runs as
  `at::cuda::memcpy_and_sync`, cudaMemcpyAsync then cudaStreamSynchronize
  (aten/src/ATen/native/cuda/Copy.cu `copy_kernel_cuda`). The host waits for the device
  before each such layer's fused activation (`ACT`: after fc1 and the clamps are queued),
  and again in the backward where `recompute_modules: [moe_act]` re-runs the activation
  (`CheckpointWithoutOutput`'s hook on fc2's output, before fc2's backward:
  `RECOMPUTED_ACT`). Its model: `activation_clamp` set (GPT-OSS's experts), on the stacks
  this rule applies to (Megatron-Core's experts).

The model: after a sync the device's queue is empty, so the forward of an MoE layer from its
sync point to the next layer's is a fixed sequence on two machines, the host launching and
the device running each kernel in order; it takes (Johnson 1954, the makespan of a given
order in a two-stage flow shop; S. M. Johnson, "Optimal two- and three-stage production
schedules with setup times included", Naval Research Logistics Quarterly 1(1), 1954)

    T = max over j of ( sum_{i <= j} host_i + sum_{i >= j} gpu_i ),

which is at least max(sum host, sum gpu) and approaches their sum when the host-heavy
kernels (the experts') come first and the device-heavy ones (the next layer's attention)
last. The layer is priced as that segment (the layer's ops rotated to start at the sync;
repeated layers make the rotation exact; a run of several layers is cut at each sync). A
recomputed layer runs its dispatcher again, and syncs again. The backward has no sync: the
host runs ahead, and a layer's backward takes at least its launches' host time (as
`price_ops` floors every run of ops). `host_i` is launches(op) times the stack's measured
host time per launched kernel in a layer (framework profile `moe_host.host_us_per_kernel`,
with its source).

Before each sync the dispatcher launches its own bookkeeping (`preprocess`: the counts per
expert and their sums, the all-gather of the counts over the expert group, then the
device-to-host copies), which no priced op stands for: the stack's `moe_host.
dispatcher_kernels` launches, host time only. Not modelled: the device time of that
bookkeeping and the sync's own latency (the event wake-up, the copy), the probabilities'
second all-to-all, and the 2-3 kernels a priced non-expert op launches (counted once each).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from simulator.cost.specs import CommSpec, ComputeSpec, GroupSpec
from simulator.lower.costs import CostModel, Priced, price_ops
from simulator.lower.cuda_graphs import DTOH_COPIES, Graphs, captured_names, host_times
from simulator.program.clamped_glu import LAUNCHES as GLU_LAUNCHES
from simulator.program.program import Op, TpOverlap

__all__ = ["MoeHost", "moe_host", "launches", "loop_launches", "op_host_s", "host_s",
           "sync_segment_s", "sync_points", "price_synced", "price_unsynced", "is_moe_layer",
           "ACT", "RECOMPUTED_ACT"]

# the expert operands' FP8 casts of a forward input and a backward output gradient
# (`program.fp8`: `{op}.fp8_cast_input`, `{op}.dgrad.fp8_cast_grad`)
_SPLIT_CASTS = (".fp8_cast_input", ".fp8_cast_grad")
_MX_SWIZZLES = 2  # te_general_grouped_gemm: multi_tensor_swizzle_scaling_factors of A and B
# HybridEP's dropless dispatch syncs the host as the all-to-all dispatcher's does, at the
# same place (before any token moves): Megatron-LM 92c8482e (Megatron-Bridge @00b7660b's
# submodule) `_HybridEPManager` passes `num_dispatched_tokens` / `num_permuted_tokens` None
# unless drop_and_pad ("-1 means no up-bound, which will cause a CPU sync"), and fused_a2a.py
# `hybrid_ep_dispatch` then sets `use_host_meta` ("HybridEP obtains the size from a GPU
# tensor, which causes a D2H synchronization"); the experts' launches are TE's either way
_FLEX_SYNC = ("hybridep",)


@dataclass(frozen=True)
class MoeHost:
    """How one MoE layer's kernels load the host: seconds per launched kernel, the local
    experts each grouped GEMM loops over, whether the expert operands' FP8 casts quantize
    each expert's split alone, the scale-swizzle kernels of each grouped GEMM call, and
    whether the dispatcher waits for the device each forward (dropless routing), and the
    dispatcher's launches before each sync."""

    kernel_s: float
    local_experts: int
    split_quantize: bool = False
    swizzles: int = 0
    sync: bool = True
    # launches of the dispatcher's own bookkeeping before each sync (the counts per expert,
    # their all-gather, the device-to-host copies), which no priced op stands for
    before_sync: int = 0
    # the experts' clamped GLU waits for the device before its activation (module doc), and
    # the activation is recomputed in the backward (moe_act), where it waits again
    act_sync: bool = False
    act_recomputed: bool = False
    # the run's CUDA graphs (`lower.cuda_graphs`): a captured run of kernels costs the host
    # one graph launch
    graphs: Graphs | None = None
    # seconds of a GEMM and of another kernel that a C++ loop issues inside one Python
    # operator (`loop_launches`); None: `kernel_s`, as any other launch
    loop_gemm_s: float | None = None
    loop_kernel_s: float | None = None


ACT = "expert_act"  # the forward waits before the fused activation of a clamped GLU
RECOMPUTED_ACT = "expert_fc2.dgrad"  # the backward before fc2's, where moe_act re-runs it


def moe_host(scenario: Any, costs: CostModel) -> MoeHost | None:
    """The host rule of `scenario`'s MoE layers, or None where it does not apply: a stack
    without the figure (`costs.moe_host_kernel_s` 0), no MoE, or DeepEP (not modelled).
    With token dropping Megatron-Core's drop-and-pad path skips the copy and the sync
    (`sync` false): the experts' launches remain. HybridEP syncs too (`_FLEX_SYNC`), after
    bookkeeping of its own that is not counted (`before_sync` 0)."""
    moe = getattr(scenario.model, "moe", None)
    p = scenario.parallel
    synced = ("alltoall",) + _FLEX_SYNC
    if not costs.moe_host_kernel_s or moe is None or p.expert_dispatcher not in synced:
        return None
    before = costs.moe_dispatcher_kernels if p.expert_dispatcher == "alltoall" else 0
    if costs.graphs is not None and (costs.graphs.preprocess or costs.graphs.whole):
        # the bookkeeping is captured; its device-to-host copies follow the graph eagerly
        before = min(before, DTOH_COPIES)
    mx = scenario.model.dtype == "fp8" and scenario.training.fp8_scaling == "mxfp8"
    clamped = getattr(moe, "activation_clamp", None) is not None
    recomputed = p.recompute == "selective" and "moe_act" in (p.recompute_modules or ())
    return MoeHost(costs.moe_host_kernel_s, max(1, moe.experts // p.expert), mx,
                   _MX_SWIZZLES if mx else 0, moe.dropless, before,
                   clamped, clamped and recomputed, costs.graphs, *costs.moe_loop_s)


def launches(op: Op, host: MoeHost) -> int:
    """Kernels the host launches for `op`: one per local expert for a grouped GEMM and for
    a split-quantized expert cast, plus an FP8 GEMM's scale swizzles (MXFP8), one for any
    other op that does work, none for an op without FLOPs or bytes."""
    if isinstance(op, CommSpec):
        return 1
    if op.flops <= 0 and op.bytes_accessed <= 0:
        return 0
    if op.kind == "gemm":
        # an FP8 GEMM under MXFP8 swizzles both operands' block scales first (te_gemm and
        # te_general_grouped_gemm alike, csrc/extensions/gemm.cpp)
        swizzles = host.swizzles if op.dtype == "fp8" else 0
        return (host.local_experts if op.grouped else 1) + swizzles
    if host.split_quantize and op.name.startswith("expert_") and op.name.endswith(_SPLIT_CASTS):
        return host.local_experts
    if op.name in GLU_LAUNCHES:  # GPT-OSS's clamps and per-expert bias (program.clamped_glu)
        per_expert, once = GLU_LAUNCHES[op.name]
        return per_expert * host.local_experts + once
    return 1


def loop_launches(op: Op, host: MoeHost) -> tuple[int, int]:
    """(GEMMs, other kernels) of `op`'s `launches` that a C++ loop issues after the Python
    operator's own launch: a grouped GEMM's other N - 1 experts (`multi_stream_cublas_gemm`),
    an FP8 GEMM's scale swizzles (inside `te_gemm` / `te_general_grouped_gemm`), a split
    quantize's other N - 1 splits (`multi_tensor_quantize_impl`). GPT-OSS's per-expert bias
    kernels are Python's own (a list comprehension: `program.clamped_glu`), so none."""
    if isinstance(op, CommSpec) or (op.flops <= 0 and op.bytes_accessed <= 0):
        return 0, 0
    if op.kind == "gemm":
        swizzles = host.swizzles if op.dtype == "fp8" else 0
        return (host.local_experts - 1 if op.grouped else 0), swizzles
    if host.split_quantize and op.name.startswith("expert_") and op.name.endswith(_SPLIT_CASTS):
        return 0, host.local_experts - 1
    return 0, 0


def op_host_s(op: Op, host: MoeHost) -> float:
    """Host seconds to launch `op`'s kernels: each Python-level launch `kernel_s`, each of a
    C++ loop's `loop_gemm_s` (a GEMM) or `loop_kernel_s` (another kernel), where given."""
    gemms, others = loop_launches(op, host)
    g = host.kernel_s if host.loop_gemm_s is None else host.loop_gemm_s
    k = host.kernel_s if host.loop_kernel_s is None else host.loop_kernel_s
    return (launches(op, host) - gemms - others) * host.kernel_s + gemms * g + others * k


def host_s(seq: Sequence[Op], host: MoeHost, captured: frozenset[str] = frozenset()
           ) -> list[float]:
    """Host seconds per op of `seq` in the host's order: `op_host_s`, a run of ops in
    `captured` (the layer's CUDA-graphed ops) one graph launch."""
    return host_times(seq, captured, host.graphs, lambda op: op_host_s(op, host))


def captured(ops: tuple[Op, ...], host: MoeHost) -> frozenset[str]:
    """Names of the ops of an MoE layer's forward or backward `ops` its CUDA graphs capture."""
    return frozenset() if host.graphs is None else captured_names(ops, host.graphs, True)


def sync_segment_s(host_s: Sequence[float], gpu_s: Sequence[float]) -> float:
    """Seconds from a sync (an empty device queue) until the device has run every kernel of
    the segment: max over j of (host time to launch kernels 1..j) + (device time of kernels
    j..n); 0 for no kernels."""
    assert len(host_s) == len(gpu_s)
    best, launched, rest = 0.0, 0.0, float(sum(gpu_s))
    for h, g in zip(host_s, gpu_s, strict=True):
        launched += h
        best = max(best, launched + rest)
        rest -= g
    return best


def is_moe_layer(ops: tuple[Op, ...]) -> bool:
    """Whether `ops` hold a mixture of experts' grouped expert GEMMs."""
    return any(isinstance(op, ComputeSpec) and op.grouped for op in ops)


def _first_expert_after(ops: tuple[Op, ...], i: int) -> bool:
    """Whether the next compute op after position i is an expert's."""
    nxt = next((op for op in ops[i + 1:] if isinstance(op, ComputeSpec)), None)
    return nxt is not None and nxt.name.startswith("expert_")


def sync_points(ops: tuple[Op, ...]) -> list[int]:
    """Where the dispatcher makes the host wait, one per MoE layer in `ops`: before each
    dispatch all-to-all over the expert axis (the one the experts' ops follow:
    'before_ep_alltoall'), or without expert parallelism before each layer's first expert
    op ('before_finish')."""
    points = [i for i, op in enumerate(ops) if isinstance(op, CommSpec)
              and op.collective == "all_to_all" and op.axis == "ep" and _first_expert_after(ops, i)]
    if points:
        return points
    return [i for i, op in enumerate(ops) if op.name.startswith("expert_")
            and (i == 0 or not ops[i - 1].name.startswith("expert_"))]


def _named(ops: tuple[Op, ...], name: str) -> list[int]:
    return [i for i, op in enumerate(ops) if op.name == name]


def _gpu_s(op: Op, costs: CostModel, groups: dict[str, GroupSpec]) -> float:
    if isinstance(op, CommSpec):
        return costs.collective_s(op.collective, op.bytes, groups[op.axis])
    return costs.compute_s(op)


def price_synced(ops: tuple[Op, ...], costs: CostModel, groups: dict[str, GroupSpec],
                 host: MoeHost, tp_overlap: TpOverlap | None = None) -> Priced:
    """MoE layers' forward (or its re-run under recompute) as sync segments (module doc):
    the ops rotated to start at the first sync and cut at every other, each segment at least
    `sync_segment_s` of its launches and device times; what exceeds the device's own time
    is counted as compute, as `price_ops` counts its launch floor."""
    base = price_ops(ops, replace(costs, host_kernel_s=0.0), groups, tp_overlap)
    dispatch = sync_points(ops)
    if not dispatch:
        return price_unsynced(ops, costs, groups, host, tp_overlap)
    acts = _named(ops, ACT) if host.act_sync else []
    total = _segments_s(ops, dispatch + acts, set(dispatch), costs, groups, host)
    # the expert all-to-all's share stays named, for moe_a2a's pairs (`lower.a2a_overlap`)
    return Priced(max(base.compute_s, total - base.comm_s), base.comm_s, base.comm, base.a2a_s)


def _segments_s(ops: tuple[Op, ...], points: list[int], dispatch: set[int], costs: CostModel,
                groups: dict[str, GroupSpec], host: MoeHost) -> float:
    """Seconds of `ops` rotated to start at the first sync point and cut at every other,
    each segment `sync_segment_s` of its launches and device times; a segment that ends at
    a dispatcher's sync (`dispatch`) ends with that dispatcher's bookkeeping launches."""
    points = sorted(set(points))
    k, n = points[0], len(ops)
    seq = ops[k:] + ops[:k]
    cuts = [p - k for p in points] + [n]
    names = captured(ops, host)
    total = 0.0
    for a, b in zip(cuts, cuts[1:], strict=False):
        # the bookkeeping: host launches of tiny kernels before the next dispatch sync
        tail = host.before_sync * host.kernel_s if (b + k) % n in dispatch else 0.0
        total += sync_segment_s(host_s(seq[a:b], host, names) + [tail],
                                [_gpu_s(op, costs, groups) for op in seq[a:b]] + [0.0])
    return total


def price_unsynced(ops: tuple[Op, ...], costs: CostModel, groups: dict[str, GroupSpec],
                   host: MoeHost, tp_overlap: TpOverlap | None = None) -> Priced:
    """A run of ops with no dispatcher sync (an MoE layer's backward): at least their
    launches' host time, the shortfall counted as compute (`price_ops`); cut into sync
    segments where a recomputed clamped GLU waits (`RECOMPUTED_ACT`)."""
    base = price_ops(ops, replace(costs, host_kernel_s=0.0), groups, tp_overlap)
    waits = _named(ops, RECOMPUTED_ACT) if host.act_recomputed else []
    if host.graphs is not None:
        floor = sum(host_s(ops, host, captured(ops, host)))
    elif host.loop_gemm_s is None and host.loop_kernel_s is None:
        floor = sum(launches(op, host) for op in ops) * host.kernel_s
    else:
        floor = sum(op_host_s(op, host) for op in ops)
    if waits:
        floor = max(floor, _segments_s(ops, waits, set(), costs, groups, host))
    return Priced(max(base.compute_s, floor - base.comm_s), base.comm_s, base.comm, base.a2a_s)
