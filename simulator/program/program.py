"""What one device computes and communicates for ONE micro-batch: the `Program`, a tuple of
`Block`s.

A program is plain data: per block, tuples of `ComputeSpec` / `CommSpec` (the shared
currency of `simulator.cost.specs`) for its forward, backward and recompute, its parameters,
the bytes a micro-batch keeps alive for its backward, and its gradient reductions. Every
model family has this one shape: a transformer is its embedding, one layer Block repeated L
times and its head; an operator graph is its units, or one Block for the whole graph.

It is derived from the planned operator graph that `verify` executes
(`program.model_program`); the fields below are the whole interface: nothing else is read by
the lowering, which cuts `Program.sequence()` into pipeline stages (`lower.stages`).
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.config.scenario.schema import DTYPE_BYTES
from simulator.cost.specs import CommSpec, ComputeSpec

__all__ = ["Op", "Program", "Block", "TpOverlap", "runs", "coalesce", "compute_ops",
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
class Block:
    """One block of a model as one device runs it for one micro-batch (sizes per device):
    a transformer's embedding, its layer (one Block standing for every layer: `repeat`),
    its head with the loss; a unit of an operator graph (an mlp layer, a conv block, one
    operator of a `type: graph` model, `program.graph_stages`); or a whole graph kept as
    one block.

    fwd / bwd / recompute: its ops in execution order (CommSpecs on axis 'tp' sit on the
    critical path); recompute is what it runs again before its backward (phase
    'recompute'). repeat: consecutive copies of it in the model; layers: model layers one
    copy stands for (what `parallel.pipeline_layers` counts; a mixture of experts every k
    layers repeats in blocks of k); pinned: 'first' / 'last' for a block that joins the
    first / last virtual stage and is not counted in a split (Megatron's embedding and
    LM head), None for the blocks a pipeline cuts between.

    params: parameter elements it is the first to read (after sharding); tied_params:
    elements of a parameter it shares with another block (a tied LM head's table), held
    again only when the model is cut into pipeline stages; param_tensors: how many
    separate tensors (fusion mode 'none'); unsharded: elements the optimizer keeps whole
    (`parallel.optimizer_threshold_kb`); worker_params: elements the workers all-reduce and
    update themselves beside parameter servers that hold the rest
    (`parallel.parameter_server.parameters`); grad_sync: its gradient reductions on mesh axes
    other than `dp`, run once per iteration before the optimizer step.

    saved_bytes: bytes kept for its backward (beyond `Program.shared_saved`);
    working_bytes: what a recompute makes again, alive while its backward runs after the
    re-run (`regen_at`: the copy, counted over the cut sequence, whose backward the re-run
    comes before); recomputes: a recompute pass runs before its backward;
    transient_bytes: what its backward allocates beyond the saved set (the loss's gradient
    buffers). send_fwd_bytes / send_bwd_bytes: bytes a stage ending after it sends to the
    next one (activations) and receives back (their gradients), per micro-batch.
    ops: the operators it is made of (by name; a graph's units)."""

    name: str
    fwd: tuple[Op, ...]
    bwd: tuple[Op, ...]
    recompute: tuple[Op, ...] = ()
    repeat: int = 1
    layers: int = 1
    pinned: str | None = None
    params: int = 0
    tied_params: int = 0
    param_tensors: int = 0
    unsharded: int = 0
    worker_params: int = 0
    # elements of expert parameters (split on the expert-parallel axis `ep`), whose
    # optimizer states shard over the expert-data-parallel ranks, not all data ranks
    expert_params: int = 0
    grad_sync: tuple[CommSpec, ...] = ()
    saved_bytes: float = 0.0
    working_bytes: float = 0.0
    regen_at: int = 0
    recomputes: bool = False
    transient_bytes: float = 0.0
    send_fwd_bytes: float = 0.0
    send_bwd_bytes: float = 0.0
    ops: tuple[str, ...] = ()
    # kernels every tensor-parallel rank runs whole (replicated GEMMs: MLA's down-
    # projections without sequence parallel, Megatron-Core's duplicated TELinear): their
    # model FLOPs are counted once, not per rank (`program.flops`)
    tp_replicated: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Program:
    """One device's work for one micro-batch: a tuple of Blocks in forward order, and what
    holds for the whole program (all sizes per device).

    shared_saved: (bytes, copies keeping it) of saved tensors several blocks read (an
    operator graph's units; copies counted over `sequence()`): a stage holds one when any of
    its blocks keeps it. fixed: copies per virtual stage set by the model itself (graph
    operators' `attrs.pipeline_stage`; None: not given). spans: (parameter, first copy,
    last copy) of parameters read by several blocks, which a pipeline must not cut apart.
    whole_grads: without a pipeline the data-parallel reduction waits for the whole
    backward (an operator graph cut into units only for recompute or offload), instead of
    leaving block by block.

    dtype: the compute dtype; grad_elem_bytes: bytes of one gradient element in the buffer
    and the data-parallel reduction (None: the dtype's); gather_elem_bytes: mean bytes of one
    parameter element in the sharded optimizer's parameter all-gather (None: the dtype's;
    less with FP8 weights, `lower.framework_apply.fp8_gather_bytes`); tp_overlap: how
    tensor-parallel collectives overlap their GEMMs (None: on the critical path).
    expert_slot_fill: share of the expert GEMMs' slots that carry tokens under balanced
    routing (the rest is the capacity factor's padding: hardware FLOPs, not model FLOPs);
    expert_load: how many times the mean tokens the expert kernels and all-to-alls carry
    (model.moe.imbalance).
    host_kernels: (kernel name, bytes over the host link) of operators placed on the host
    CPU (`program.host_placement`), priced on the host profile; host_params: parameters
    they keep in host memory. resident: (memory category, bytes) held for the whole
    iteration besides the model states (a graph's loaded input batch). extras: figures of
    the program's own strategy for the summary. p2p_blocking: pipeline sends block the
    compute stream (Megatron's p2p `_communicate` ends in torch.cuda.synchronize()).
    state_layout: how the stack lays out the states of stage 3 (`lower.state.STATE_LAYOUTS`:
    "zero", or "fsdp2": fp32 shards as master copy, gradients from backward to step).
    grad_buffer_passes: element reads + writes the stack makes over the device's whole
    gradient buffer each iteration besides the backward and the optimizer step, and more
    where it reduces over several data-parallel ranks (framework profile
    `grad_reduction.buffer_passes`, `.buffer_passes_dp`; `lower.step`)."""

    blocks: tuple[Block, ...]
    dtype: str
    shared_saved: tuple[tuple[float, frozenset[int]], ...] = ()
    fixed: tuple[int, ...] | None = None
    spans: tuple[tuple[str, int, int], ...] = ()
    whole_grads: bool = False
    grad_elem_bytes: float | None = None
    gather_elem_bytes: float | None = None
    tp_overlap: TpOverlap | None = None
    expert_slot_fill: float = 1.0
    expert_load: float = 1.0
    host_kernels: tuple[tuple[str, float], ...] = ()
    host_params: int = 0
    resident: tuple[tuple[str, float], ...] = ()
    extras: tuple[tuple[str, object], ...] = ()
    p2p_blocking: bool = False
    state_layout: str = "zero"
    grad_buffer_passes: tuple[float, float] = (0.0, 0.0)

    @property
    def grad_bytes(self) -> float:
        """Bytes per gradient element (buffer and reduction)."""
        return self.grad_elem_bytes or float(DTYPE_BYTES[self.dtype])

    @property
    def gather_bytes(self) -> float:
        """Mean bytes per parameter element in the sharded optimizer's all-gather."""
        return self.gather_elem_bytes or float(DTYPE_BYTES[self.dtype])

    def block(self, name: str) -> Block:
        """The block called `name` (KeyError if none)."""
        for b in self.blocks:
            if b.name == name:
                return b
        raise KeyError(name)

    def sequence(self) -> tuple[Block, ...]:
        """The copies a pipeline cuts between, in forward order (each unpinned block
        `repeat` times; the same object for the copies of one block)."""
        return tuple(b for b in self.blocks if b.pinned is None for _ in range(b.repeat))

    def pinned(self, where: str) -> tuple[Block, ...]:
        return tuple(b for b in self.blocks if b.pinned == where)

    def cut(self) -> tuple[Block, ...]:
        """The blocks a pipeline cuts between (a transformer's layer groups), each once,
        in forward order, with their `repeat`."""
        return tuple(b for b in self.blocks if b.pinned is None)

    def stage(self, start: int, stop: int, first: bool, last: bool) -> tuple[Block, ...]:
        """The blocks a virtual stage runs in forward order: copies start..stop-1 of the cut
        sequence, after the blocks pinned first (`first`) and before those pinned last."""
        return ((self.pinned("first") if first else ()) + self.sequence()[start:stop]
                + (self.pinned("last") if last else ()))

    def saved_bytes(self, start: int, stop: int, first: bool = False,
                    last: bool = False) -> float:
        """Bytes one micro-batch keeps for its backward on the stage of copies
        start..stop-1 (with the pinned blocks of its end): the shared tensors any of them
        keeps, and each block's own, a run of copies of one block as copies x its own."""
        own = 0.0
        for b, k in runs(self.stage(start, stop, first, last)):
            own += k * b.saved_bytes
        mine = frozenset(range(start, stop))
        return sum(nb for nb, keepers in self.shared_saved if keepers & mine) + own

    def saved_by_block(self, start: int, stop: int, first: bool = False,
                       last: bool = False) -> tuple[float, ...]:
        """`saved_bytes` by block of `stage(...)`: each shared tensor with the last copy of
        the stage that keeps it (the first backward to read it)."""
        out = [b.saved_bytes for b in self.stage(start, stop, first, last)]
        offset = len(self.pinned("first")) if first else 0
        for nb, keepers in self.shared_saved:
            mine = [k for k in keepers if start <= k < stop]
            if mine:
                out[offset + max(mine) - start] += nb
        return tuple(out)

    def working_bytes(self, start: int, stop: int) -> float:
        """Bytes a recomputing stage (copies start..stop-1) holds beyond its saved
        activations at the peak of its backward: the most any block's re-run makes again,
        less what the backward of the copies after its re-run point has freed by then
        (tensors kept by those copies only, and their own saved bytes). The pinned blocks'
        saved sets are not counted as freed: the lowering frees a stage's activations at
        the end of its backward task (`lower.stages`), which a transformer's head shares
        with its last layer."""
        seq = self.sequence()
        most = 0.0
        for u in range(start, stop):
            b = seq[u]
            if not b.working_bytes:
                continue
            at = min(max(b.regen_at, u), stop - 1)
            freed = sum(nb for nb, keepers in self.shared_saved
                        if keepers and min(keepers) > at and max(keepers) < stop)
            freed += sum(v.saved_bytes for v in seq[at + 1:stop])
            most = max(most, b.working_bytes - freed)
        return most

    @property
    def params(self) -> int:
        """Parameter elements of the whole model on one device (one pipeline stage holding
        every block): each block's times its copies, a tied table once."""
        return sum(b.params * b.repeat for b in self.blocks)

    def __str__(self) -> str:
        return "Program(" + ", ".join(
            f"{b.name}{'x' + str(b.repeat) if b.repeat > 1 else ''}" for b in self.blocks) + ")"


def runs(blocks: tuple[Block, ...]) -> list[tuple[Block, int]]:
    """Consecutive copies of one block (the same object) as (block, copies)."""
    out: list[tuple[Block, int]] = []
    for b in blocks:
        if out and out[-1][0] is b:
            out[-1] = (b, out[-1][1] + 1)
        else:
            out.append((b, 1))
    return out


def coalesce(specs: tuple[CommSpec, ...], name: str) -> tuple[CommSpec, ...]:
    """One collective per (kind, axis) named `name`.KIND, bytes summed in order (a flat
    coalesced buffer: Megatron's finalize_model_grads reduces the non-dp gradients so)."""
    out: dict[tuple[str, str], float] = {}
    for c in specs:
        out[(c.collective, c.axis)] = out.get((c.collective, c.axis), 0.0) + c.bytes
    return tuple(CommSpec(f"{name}.{kind}", kind, nb, axis, "bwd")  # type: ignore[arg-type]
                 for (kind, axis), nb in out.items())


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
