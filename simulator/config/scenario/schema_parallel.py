"""The `parallel` section of the scenario schema: the degrees of each mesh axis, the pipeline
schedule, and the techniques layered on them (optimizer sharding, recompute, offload,
communication fusion and overlap, the parameter server, the dataset strategy)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StrictBool, StrictFloat, StrictInt, StrictStr

from simulator.config.scenario.schema_types import BucketMB, Degree, Layers, NicGbps, _Closed

__all__ = ["OffloadSpec", "FusionKindSpec", "CommFusionSpec", "OverlapSpec",
           "RecomputeCommSpec", "CommSubgraphSpec", "ParameterServerSpec", "ParallelSpec"]


class OffloadSpec(_Closed):
    optimizer_states: StrictBool = False
    parameters: StrictBool = False
    activations: StrictBool = False


FusionIndex = Annotated[list[Annotated[StrictInt, Field(ge=1, le=10_000)]],
                        Field(max_length=10_000)]


class FusionKindSpec(_Closed):
    """Fusion of one collective kind (MindSpore `comm_fusion={"allreduce": {"mode": ...,
    "config": ...}, "allgather": ..., "reducescatter": ...}`); `auto`: the top-level rule."""

    mode: Literal["none", "size", "index", "auto"] = "auto"
    bucket_mb: BucketMB | None = None
    index: FusionIndex | None = None


class CommFusionSpec(_Closed):
    mode: Literal["none", "size", "index", "auto"] = "size"
    bucket_mb: BucketMB = 25
    # with mode index: the layers (0-based, forward order) that start a new fusion group
    # (MindSpore all_reduce_fusion_config / comm_fusion "index" config); without it, one
    # group per layer. The embedding joins the first group, the head the last.
    index: FusionIndex | None = None
    all_reduce: FusionKindSpec | None = None
    reduce_scatter: FusionKindSpec | None = None
    all_gather: FusionKindSpec | None = None

    def of(self, kind: str) -> tuple[str, float, tuple[int, ...] | None]:
        """(mode, bucket_mb, index) for collective `kind`: its own entry where given and
        not `auto`, else the top level."""
        own = getattr(self, kind, None) if kind in ("all_reduce", "reduce_scatter",
                                                   "all_gather") else None
        if own is None or own.mode == "auto":
            return self.mode, self.bucket_mb, tuple(self.index) if self.index else None
        return (own.mode, own.bucket_mb if own.bucket_mb is not None else self.bucket_mb,
                tuple(own.index) if own.index else None)


class OverlapSpec(_Closed):
    grad_reduce: StrictBool = True
    # With a sharded optimizer, all-gather the updated parameters under the next
    # iteration's forward (Megatron-Core --overlap-param-gather, FSDP prefetch, MindSpore
    # optimizer parallel) instead of after the optimizer step.
    param_gather: StrictBool = True
    copies: Annotated[StrictInt, Field(ge=1, le=8)] = 1
    # Chunk each tensor-parallel collective and pipeline it against its GEMM (Megatron-Core
    # --tp-comm-overlap); `auto` takes the hardware profile's software stack.
    tp_comm: StrictBool | Literal["auto"] = "auto"


class RecomputeCommSpec(_Closed):
    """Whether recompute re-runs the collectives inside its region (MindSpore
    `Cell.recompute(mp_comm_recompute=..., parallel_optimizer_comm_recompute=...)`) or keeps
    their outputs from the forward until the backward (less communication, more memory).

    tensor: the model-parallel collectives of the recomputed ops (tensor, sequence, context
    and expert axes; MindSpore's mp_comm_recompute, default true there too); optimizer: the
    optimizer-parallel all-gather of the parameters they read under `optimizer_shard: 3`
    (MindSpore's parallel_optimizer_comm_recompute, default false there; true here, the
    FSDP-style gather before every backward that shardsim ran before the key existed)."""

    tensor: StrictBool = True
    optimizer: StrictBool = True


class CommSubgraphSpec(_Closed):
    """MindSpore's communication subgraph extraction and reuse (`MS_COMM_COMPILER_OPT`):
    communication operators of the same kind, shape, dtype and group are compiled once, as
    one subgraph the graph calls, instead of once per operator. `build_ms_per_op` is the
    graph-build (compile) time of one distinct communication operator: an ASSUMPTION (no
    public measurement found), a what-if to vary; see simulator/lower/comm_graph.py."""

    reuse: StrictBool = False
    # MS_COMM_COMPILER_OPT: the most operators replaced by subgraph calls (-1: 1000)
    max_reused_ops: Annotated[StrictInt, Field(ge=1, le=1_000_000_000)] = 1000
    build_ms_per_op: Annotated[StrictFloat, Field(ge=0.0, le=1e6, allow_inf_nan=False)] = 10.0


class ParameterServerSpec(_Closed):
    """`parallel.mode: parameter_server` (MindSpore's parameter server training, Li et al.
    OSDI 2014): the devices are workers; `servers` server processes, each on a host of its
    own (`server_hardware`, a hardware profile), hold the parameters and the optimizer
    states split by key range, sum the workers' pushed gradients and update."""

    servers: Degree = 1
    # synchronous SGD (every worker's gradient summed, then one update) or asynchronous
    # (each push applied on arrival; workers run on stale parameters)
    sync: StrictBool = True
    server_hardware: StrictStr = "cpu-x86"
    # one server's network bandwidth; default: the server host's NICs (its profile)
    server_nic_Gbps: NicGbps | None = None


class ParallelSpec(_Closed):
    data: Degree = 1
    tensor: Degree = 1
    pipeline: Degree = 1
    # Expert parallel (a mixture-of-experts transformer): the experts of each MoE layer split
    # over this many of the data-parallel ranks, which exchange tokens by all-to-all. It
    # divides `data` (Megatron-LM --expert-model-parallel-size; DeepSpeed-MoE ep_size):
    # devices stay data * tensor * pipeline.
    expert: Degree = 1
    # Context parallel: the sequence of every sample split over this many devices, attention
    # exchanging key/value blocks around a ring (Megatron-LM --context-parallel-size;
    # simulator/graph/ops/ring_attention.py): devices are data * tensor * pipeline * context.
    context: Degree = 1
    schedule: Literal["gpipe", "1f1b", "interleaved_1f1b", "zb_h1"] = "1f1b"
    # Micro-batches per step of an operator graph (type: graph), each its graph as written
    # (MindSpore PipelineCell's micro_size; gradients accumulated over them). Other models
    # derive them: global_batch_size / (micro_batch_size * data).
    micro_batches: Degree = 1
    virtual_stages: Layers = 1
    # Layers of each virtual pipeline stage, in stage order (MindSpore's per-cell
    # pipeline_stage; Megatron's --decoder-first/last-pipeline-num-layers); default: an
    # even split, the remainder going to the stages with the least other work.
    pipeline_layers: Annotated[list[Annotated[StrictInt, Field(ge=0, le=10_000)]],
                               Field(max_length=100_000)] | None = None
    sequence_parallel: StrictBool = False
    # 2-D tensor parallel of a transformer (MindSpore's high dimension tensor parallel:
    # MatMul/BatchMatMul `enable_nd_tp` with a 2-D Layout; Optimus, Xu et al. 2021): the
    # `tensor` devices as an x * y grid, x outer; every GEMM weight split on both axes
    # (simulator/models/transformer_plan.py). [x, y, z]: 3-D tensor parallel (Bian et al.
    # 2021, Colossal-AI's 3-D): the grid plus z, which splits the samples and every
    # parameter, gathered before use. None: 1-D (Megatron) tensor parallel.
    tensor_nd: Annotated[list[Annotated[StrictInt, Field(ge=1, le=100_000)]],
                         Field(min_length=2, max_length=3)] | None = None
    # An int with bounds, not Literal[0, 1, 2, 3]: a Literal would take `true` as 1.
    optimizer_shard: Annotated[StrictInt, Field(ge=0, le=3)] = 0
    # MindSpore parallel_optimizer_config's parallel_optimizer_threshold (KB; MindSpore's
    # default 64): a parameter whose local size is at most this is not sharded by the
    # optimizer (its gradient is all-reduced, its states kept whole). 0: every parameter is
    # sharded (ZeRO, Megatron's distributed optimizer).
    optimizer_threshold_kb: Annotated[StrictFloat, Field(ge=0.0, le=1e9,
                                                         allow_inf_nan=False)] = 0.0
    recompute: Literal["none", "selective", "full"] = "none"
    recompute_comm: RecomputeCommSpec = Field(default_factory=RecomputeCommSpec)
    # MindSpore set_auto_parallel_context(enable_alltoall=...): a redistribution may use an
    # all-to-all (S(d) -> S(e)); false: all-gather + local slice (MindSpore's default; true
    # here, the planner's choice before the key existed)
    enable_alltoall: StrictBool = True
    # reported in `run --json` (`comm_subgraph`) and the trace when given
    comm_subgraph: CommSubgraphSpec = Field(default_factory=CommSubgraphSpec)
    offload: OffloadSpec = Field(default_factory=OffloadSpec)
    comm_fusion: CommFusionSpec = Field(default_factory=CommFusionSpec)
    overlap: OverlapSpec = Field(default_factory=OverlapSpec)
    # MindSpore's parallel_mode for operator graphs (graph, mlp, resnet): semi_auto runs the
    # strategies as written and unconfigured operators data parallel; auto keeps the
    # configured operators and lets `search` choose every other operator's signature
    # (simulator/sharding/propagate/search.py).
    # `parameter_server` replaces the data-parallel collectives by pushes to and pulls from
    # the servers of `parameter_server` (simulator/lower/parameter_server.py).
    mode: Literal["semi_auto", "auto", "parameter_server"] = "semi_auto"
    parameter_server: ParameterServerSpec = Field(default_factory=ParameterServerSpec)
    search: Literal["sharding_propagation", "dynamic_programming", "ilp"] = "ilp"
    # MindSpore's dataset_strategy / full_batch (operator graphs; simulator/config/scenario/
    # dataset.py): how each device loads the inputs and labels -- data_parallel (dim 0 over
    # every device), full_batch (every device the whole batch) or, per input and label in
    # the model's order, the slices of each dim (a large image split along H/W). None: each
    # input as its first operator reads it.
    dataset_strategy: Literal["data_parallel", "full_batch"] | Annotated[
        list[Annotated[list[Degree], Field(max_length=16)]], Field(max_length=1000)] | None = None
    full_batch: StrictBool | None = None

    @property
    def devices(self) -> int:
        return self.data * self.tensor * self.pipeline * self.context

    @property
    def chunks(self) -> int:
        """Model chunks of the pipeline: one per stage, `virtual_stages` per stage when
        interleaved."""
        return self.pipeline * (self.virtual_stages if self.schedule == "interleaved_1f1b"
                                else 1)

