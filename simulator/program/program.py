"""What one device computes and communicates for ONE micro-batch: the `TransformerProgram`.

A program is plain data: tuples of `ComputeSpec` / `CommSpec` (the shared currency of
`simulator.cost.specs`) for one transformer layer forward and backward, the embedding (first
pipeline stage) and the LM head with its loss (last stage), plus the per-device parameter
counts and the activation bytes a micro-batch keeps alive for its backward pass.

It is derived from the planned operator graph that `verify` executes
(`schedule.model_program`); the fields below are the whole interface: nothing else is read
by the lowering.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.config.scenario.schema import DTYPE_BYTES
from simulator.cost.specs import CommSpec, ComputeSpec

__all__ = ["Op", "TransformerProgram", "TpOverlap", "GraphUnit", "GraphStages", "compute_ops",
           "comm_ops", "total_flops", "saved_bytes"]

Op = ComputeSpec | CommSpec


@dataclass(frozen=True)
class TpOverlap:
    """Tensor-parallel collectives pipelined against the GEMM next to them (Transformer
    Engine userbuffers, used by Megatron-Core --tp-comm-overlap), by TE's default methods
    (transformer_engine/pytorch/module/base.py `initialize_ub`): the all-gathers ring-exchange
    their `chunks` (= tensor degree) pieces peer to peer on the copy engines, one SM each
    (`ring_sm_fraction`: num_sm 1, no SM margin); the forward reduce-scatters are pipelined
    in `rs_splits` (4) pieces and the backward ones run in bulk beside the wgrad GEMM, both
    on 16 SMs carved from the GEMM (`sm_fraction`: num_sm 16, set_sm_margin)."""

    chunks: int
    sm_fraction: float
    ring_sm_fraction: float = 0.0
    rs_splits: int = 4


@dataclass(frozen=True)
class GraphUnit:
    """One unit of an operator graph that pipeline stages are cut between: a layer of an mlp
    (its MatMul and activation), a conv block or an FC layer of a resnet, one operator of a
    `type: graph` model (`schedule.graph_stages`). All sizes per device, one micro-batch.

    fwd / bwd: its ops (its operators' kernels and the collectives the plan runs for them);
    params: elements of the parameters it is the first to read; grad_sync: their gradient
    reductions on the non-dp axes; extra_bytes: saved bytes of its ops beyond their kept
    tensors (masks, statistics, the kept collective outputs of a recompute).
    recompute: the forward its recomputed operators run again before its backward
    (`schedule.graph_recompute`); working_bytes: what that re-run makes again; regen_at:
    the unit whose backward the re-run comes before (itself, or a later unit reading a
    recomputed output)."""

    ops: tuple[str, ...]
    fwd: tuple[Op, ...]
    bwd: tuple[Op, ...]
    params: int
    grad_sync: tuple[CommSpec, ...] = ()
    extra_bytes: float = 0.0
    recompute: tuple[Op, ...] = ()
    working_bytes: float = 0.0
    regen_at: int = 0


@dataclass(frozen=True)
class GraphStages:
    """An operator graph as a sequence of units that a pipeline cuts into contiguous stages
    (MindSpore's `pipeline_stage` of cells, GPipe's partition of a layer sequence).

    kept: (bytes, units keeping it) of every tensor saved for the backward (a stage holds a
    tensor when any of its units keeps it, a received boundary tensor included).
    cut_fwd_bytes[k] / cut_bwd_bytes[k]: bytes per device a stage ending after unit k sends
    forward (the activations produced up to unit k and read after it, in the layout they
    are kept in) and receives back (their gradient contributions, in the layouts the later
    consumers produce them), per micro-batch; cut_tensors[k] names them.
    fixed: units per virtual stage set by the operators' `attrs.pipeline_stage` (None: not
    given). spans: (parameter, first unit, last unit) of parameters read by several units,
    which must not be cut apart (a stage holds its own parameters)."""

    units: tuple[GraphUnit, ...]
    kept: tuple[tuple[float, frozenset[int]], ...]
    cut_fwd_bytes: tuple[float, ...]
    cut_bwd_bytes: tuple[float, ...]
    cut_tensors: tuple[tuple[str, ...], ...]
    fixed: tuple[int, ...] | None = None
    spans: tuple[tuple[str, int, int], ...] = ()

    def activation_bytes(self, first: int, stop: int) -> float:
        """Bytes saved for the backward by units first..stop-1 (one stage)."""
        mine = frozenset(range(first, stop))
        return (sum(b for b, keepers in self.kept if keepers & mine)
                + sum(u.extra_bytes for u in self.units[first:stop]))

    def unit_activation_bytes(self, first: int, stop: int) -> tuple[float, ...]:
        """`activation_bytes(first, stop)` by unit: each tensor with the last unit of the
        stage that keeps it (the first backward to read it), each unit's extras with it."""
        out = [u.extra_bytes for u in self.units[first:stop]]
        for b, keepers in self.kept:
            mine = [k for k in keepers if first <= k < stop]
            if mine:
                out[max(mine) - first] += b
        return tuple(out)

    def working_bytes(self, first: int, stop: int) -> float:
        """Bytes a recomputing stage (units first..stop-1) holds beyond its saved
        activations at the peak of its backward: the most any unit's re-run makes again,
        less what the backward of the units after its re-run point has freed by then
        (tensors kept by those units only, and their extras)."""
        most = 0.0
        for u in range(first, stop):
            unit = self.units[u]
            if not unit.working_bytes:
                continue
            at = min(max(unit.regen_at, u), stop - 1)
            freed = sum(b for b, keepers in self.kept
                        if keepers and min(keepers) > at and max(keepers) < stop)
            freed += sum(v.extra_bytes for v in self.units[at + 1:stop])
            most = max(most, unit.working_bytes - freed)
        return most


@dataclass(frozen=True)
class TransformerProgram:
    """One device's work for one micro-batch, per building block (all sizes per device).

    Op tuples (in execution order; CommSpecs on axis 'tp' sit on the critical path):
      layer_fwd / layer_bwd    one transformer layer, forward and backward
      layer_recompute          what recompute re-runs before a layer's backward (phase
                               'recompute'): the whole layer_fwd for `full`, the attention
                               core for `selective`, nothing for `none`
      embed_fwd / embed_bwd    vocabulary-parallel embedding (first stage only)
      head_fwd / head_bwd      final norm, vocabulary-parallel LM head and cross-entropy
                               (last stage only)

    Parameters (counts of elements held by one device, after tensor-parallel sharding):
      params_per_layer, params_embedding (token + position tables), params_head (final
      norm), params_output (the LM-head matrix, tied to the token embedding as in
      Megatron-LM: held a second time only when the last stage is not the first).
      param_tensors_per_layer: how many separate tensors a layer has (fusion mode 'none').

    Activations (bytes kept for backward by one micro-batch, under the scenario's recompute
    mode): activation_bytes_per_layer, embed_activation_bytes, head_activation_bytes;
    layer_working_bytes is one layer's full saved set, alive while a recomputed layer runs
    its backward. boundary_bytes is the activation (and its gradient) passed between
    pipeline stages, s*b*h*dtype (divided by t under sequence parallelism).

    grad_elem_bytes: bytes of one gradient element in the gradient buffer and the
    data-parallel reduction (None: the model dtype's). tp_overlap: how tensor-parallel
    collectives overlap their GEMMs (None: they run on the critical path).
    single_block: the program is the whole model as one block (an operator graph without a
    pipeline). staged: the units of an operator graph that a pipeline partitions
    (`GraphStages`); the lowering prices each stage from them instead of the layer fields.
    grad_sync_*: gradient reductions on mesh axes other than `dp` (a layer's, the
    embedding's, the head's), run once per iteration before the optimizer step.
    layers_per_block: model layers one "layer" of the program stands for (a mixture of
    experts every k layers repeats in blocks of k: k - 1 dense layers and one MoE layer);
    the per-layer fields above are per block. expert_slot_fill: share of the expert GEMMs'
    slots that carry tokens under balanced routing (the rest is the capacity factor's
    padding: hardware FLOPs, not model FLOPs). expert_load: how many times the mean tokens
    the program's expert kernels and all-to-alls carry (model.moe.imbalance: the busiest
    expert-parallel rank's share, which sets the step time).
    """

    layer_fwd: tuple[Op, ...]
    layer_bwd: tuple[Op, ...]
    layer_recompute: tuple[Op, ...]
    embed_fwd: tuple[Op, ...]
    embed_bwd: tuple[Op, ...]
    head_fwd: tuple[Op, ...]
    head_bwd: tuple[Op, ...]
    params_per_layer: int
    params_embedding: int
    params_head: int
    params_output: int
    param_tensors_per_layer: int
    activation_bytes_per_layer: float
    embed_activation_bytes: float
    head_activation_bytes: float
    layer_working_bytes: float
    boundary_bytes: float
    dtype: str
    grad_elem_bytes: float | None = None
    tp_overlap: TpOverlap | None = None
    single_block: bool = False
    grad_sync_layer: tuple[CommSpec, ...] = ()
    grad_sync_embed: tuple[CommSpec, ...] = ()
    grad_sync_head: tuple[CommSpec, ...] = ()
    layers_per_block: int = 1
    # parameter elements the optimizer keeps whole (`parallel.optimizer_threshold_kb`): of
    # one layer (block), of the embedding, of the head
    unsharded_per_layer: int = 0
    unsharded_embedding: int = 0
    unsharded_head: int = 0
    expert_slot_fill: float = 1.0
    expert_load: float = 1.0
    # (kernel name, bytes over the host link) of operators placed on the host CPU
    # (`schedule.host`: a graph's `primitive_target: CPU`); priced on the host profile
    host_kernels: tuple[tuple[str, float], ...] = ()
    host_params: int = 0  # parameters those operators keep in host memory
    staged: GraphStages | None = None
    # (memory category, bytes) held on each device for the whole iteration besides the
    # model states: a graph's loaded input batch (the dataset's buffer, a graph input alive
    # until the step ends; `sharding.lower.loaded_bytes`)
    resident: tuple[tuple[str, float], ...] = ()
    # figures of the program's own strategy for the summary (run --json): a graph's dataset
    # strategy and the bytes each device loads (`sharding.model_graph.dataset_summary`)
    extras: tuple[tuple[str, object], ...] = ()
    # pipeline sends block the compute stream: the stage computes nothing until its send
    # and receive are done (Megatron's p2p `_communicate` ends in torch.cuda.synchronize())
    p2p_blocking: bool = False

    @property
    def grad_bytes(self) -> float:
        """Bytes per gradient element (buffer and reduction)."""
        return self.grad_elem_bytes or float(DTYPE_BYTES[self.dtype])

    def __str__(self) -> str:
        return (f"TransformerProgram(layer: {len(self.layer_fwd)} fwd / {len(self.layer_bwd)} "
                f"bwd ops, {self.params_per_layer} params, "
                f"{self.activation_bytes_per_layer:.4g} B activations)")


def compute_ops(ops: tuple[Op, ...]) -> tuple[ComputeSpec, ...]:
    """The ComputeSpecs of `ops`, in order."""
    return tuple(op for op in ops if isinstance(op, ComputeSpec))


def comm_ops(ops: tuple[Op, ...]) -> tuple[CommSpec, ...]:
    """The CommSpecs of `ops`, in order."""
    return tuple(op for op in ops if isinstance(op, CommSpec))


def total_flops(ops: tuple[Op, ...], kind: str | None = None) -> float:
    """Sum of FLOPs of the compute ops of `ops` (only those of `kind` when given)."""
    return sum(op.flops for op in compute_ops(ops) if kind is None or op.kind == kind)


def saved_bytes(ops: tuple[Op, ...]) -> float:
    """Sum of `saved_bytes` (activations kept for backward) of the compute ops of `ops`."""
    return sum(op.saved_bytes for op in compute_ops(ops))
