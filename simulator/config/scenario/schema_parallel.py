"""The `parallel` section of the scenario schema: the degrees of each mesh axis, the pipeline
schedule, and the techniques layered on them (optimizer sharding, recompute, offload,
communication fusion and overlap, the parameter server, the dataset strategy)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StrictBool, StrictFloat, StrictInt, StrictStr, field_validator
from pydantic_core import PydanticCustomError

from simulator.config.scenario.schema_types import BucketMB, Degree, Layers, NicGbps, _Closed

__all__ = ["OffloadSpec", "FusionKindSpec", "CommFusionSpec", "OverlapSpec",
           "RecomputeCommSpec", "CommSubgraphSpec", "ParameterServerSpec", "ParallelSpec"]


class OffloadSpec(_Closed):
    optimizer_states: Literal[False, True, "nvme"] = Field(default=False, description=(
        "Optimizer states in host memory, the optimizer step run on the host (true); nvme: "
        "the states on the node's NVMe drives, read into host buffers, stepped by the host "
        "and written back each iteration (ZeRO-Infinity; needs optimizer_shard 3 and a "
        "profile with host.nvme_GB, nvme_read_GBps and nvme_write_GBps)."))
    parameters: StrictBool = Field(default=False, description=(
        "Parameters in host memory, copied to the device before each use."))
    activations: StrictBool = Field(default=False, description=(
        "Saved activations copied to host memory after the forward and back before the backward."))

    nvme_pipeline_read: StrictBool = Field(default=False, description=(
        "With optimizer_states nvme: the next sub-group's states read while the host steps "
        "this one (DeepSpeed offload_optimizer.pipeline_read; default off, as DeepSpeed's)."))
    nvme_pipeline_write: StrictBool = Field(default=False, description=(
        "With optimizer_states nvme: a sub-group's states written back while the host steps "
        "the next (DeepSpeed offload_optimizer.pipeline_write; default off, as DeepSpeed's)."))

    @field_validator("optimizer_states", mode="before")
    @classmethod
    def _bool_or_nvme(cls, value: object) -> object:
        """A boolean (strict, as the other switches) or 'nvme'."""
        if isinstance(value, bool) or value == "nvme":
            return value
        raise PydanticCustomError("literal_error", "Input should be true, false or 'nvme'",
                                  {"expected": "true, false or 'nvme'"})

    @property
    def optimizer_on_nvme(self) -> bool:
        """The optimizer states live on NVMe (ZeRO-Infinity), not in host memory."""
        return self.optimizer_states == "nvme"


FusionIndex = Annotated[list[Annotated[StrictInt, Field(ge=1, le=10_000)]],
                        Field(max_length=10_000)]


class FusionKindSpec(_Closed):
    """Fusion of one collective kind (MindSpore `comm_fusion={"allreduce": {"mode": ...,
    "config": ...}, "allgather": ..., "reducescatter": ...}`); `auto`: the top-level rule."""

    mode: Literal["none", "size", "index", "auto"] = Field(default="auto", description=(
        "Fusion of this collective kind: none, size (buckets of bucket_mb), index (groups that "
        "start at the given layers) or auto (the top-level rule)."))
    bucket_mb: BucketMB | None = Field(default=None, description=(
        "Bucket size with mode size, in MB (10^6 bytes); null: the top-level bucket_mb."))
    index: FusionIndex | None = Field(default=None, description=(
        "With mode index: the layers (0-based, forward order) that start a fusion group."))


class CommFusionSpec(_Closed):
    mode: Literal["none", "size", "index", "auto"] = Field(default="size", description=(
        "Fusion of the gradient collectives: none, size (buckets of bucket_mb), index (groups of "
        "layers) or auto (the framework profile's rule)."))
    bucket_mb: BucketMB = Field(default=25, description="Bucket size, in MB (10^6 bytes).")
    # with mode index: the layers (0-based, forward order) that start a new fusion group
    # (MindSpore all_reduce_fusion_config / comm_fusion "index" config); without it, one
    # group per layer. The embedding joins the first group, the head the last.
    index: FusionIndex | None = Field(default=None, description=(
        "With mode index: the layers (0-based, forward order) that start a fusion group; null: "
        "one group per layer."))
    all_reduce: FusionKindSpec | None = Field(default=None, description=(
        "Fusion of the all-reduces, where it differs from the top-level rule."))
    reduce_scatter: FusionKindSpec | None = Field(default=None, description=(
        "Fusion of the reduce-scatters, where it differs from the top-level rule."))
    all_gather: FusionKindSpec | None = Field(default=None, description=(
        "Fusion of the parameter all-gathers, where it differs from the top-level rule."))

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
    grad_reduce: StrictBool = Field(default=True, description=(
        "The data-parallel gradient reduction runs under the backward, bucket by bucket; false: "
        "after it."))
    # With a sharded optimizer, all-gather the updated parameters under the next
    # iteration's forward (Megatron-Core --overlap-param-gather, FSDP prefetch, MindSpore
    # optimizer parallel) instead of after the optimizer step.
    param_gather: StrictBool = Field(default=True, description=(
        "With a sharded optimizer: the updated parameters all-gathered under the next "
        "iteration's forward; false: after the optimizer step."))
    copies: Annotated[StrictInt, Field(ge=1, le=8)] = Field(default=1, description=(
        "Multi-copy parallel: each micro-batch split into this many slices whose compute and "
        "communication overlap (1: off)."))
    # Chunk each tensor-parallel collective and pipeline it against its GEMM (Megatron-Core
    # --tp-comm-overlap); `auto` takes the hardware profile's software stack.
    tp_comm: StrictBool | Literal["auto"] = Field(default="auto", description=(
        "Tensor-parallel collectives chunked and overlapped with their GEMMs; auto: the hardware "
        "profile's software stack."))
    # Megatron-Core's overlap_moe_expert_parallel_comm (with delay_wgrad_compute; Megatron-
    # Bridge moe_a2a_overlap): in the steady state of 1F1B one micro-batch's forward and
    # another's backward run as one step, each one's expert all-to-all under the other's
    # compute (megatron/core/pipeline_parallel/combined_1f1b.py; simulator/lower/a2a_overlap.py)
    moe_a2a: StrictBool = Field(default=False, description=(
        "Expert-parallel all-to-all (dispatch and combine) of one micro-batch overlapped with "
        "another micro-batch's compute: 1F1B's steady-state forward and backward run as one "
        "pair, with one more warm-up forward (Megatron-Core --overlap-moe-expert-parallel-comm, "
        "--delay-wgrad-compute)."))


class RecomputeCommSpec(_Closed):
    """Whether recompute re-runs the collectives inside its region (MindSpore
    `Cell.recompute(mp_comm_recompute=..., parallel_optimizer_comm_recompute=...)`) or keeps
    their outputs from the forward until the backward (less communication, more memory).

    tensor: the model-parallel collectives of the recomputed ops (tensor, sequence, context
    and expert axes; MindSpore's mp_comm_recompute, default true there too); optimizer: the
    optimizer-parallel all-gather of the parameters they read under `optimizer_shard: 3`
    (MindSpore's parallel_optimizer_comm_recompute, default false there; true here, the
    FSDP-style gather before every backward that shardsim ran before the key existed)."""

    tensor: StrictBool = Field(default=True, description=(
        "A recomputed region runs its model-parallel collectives again; false: their outputs are "
        "kept from the forward."))
    optimizer: StrictBool = Field(default=True, description=(
        "Under optimizer_shard 3, a recompute pass gathers its parameters again; false: the "
        "forward's gathered parameters are kept."))


class CommSubgraphSpec(_Closed):
    """MindSpore's communication subgraph extraction and reuse (`MS_COMM_COMPILER_OPT`):
    communication operators of the same kind, shape, dtype and group are compiled once, as
    one subgraph the graph calls, instead of once per operator. `build_ms_per_op` is the
    graph-build (compile) time of one distinct communication operator: an ASSUMPTION (no
    public measurement found), a what-if to vary; see simulator/lower/comm_graph.py."""

    reuse: StrictBool = Field(default=False, description=(
        "Communication operators of the same kind, shape, dtype and group compiled once, as one "
        "subgraph the graph calls."))
    # MS_COMM_COMPILER_OPT: the most operators replaced by subgraph calls (-1: 1000)
    max_reused_ops: Annotated[StrictInt, Field(ge=1, le=1_000_000_000)] = Field(
        default=1000, description="Most operators replaced by subgraph calls.")
    build_ms_per_op: Annotated[StrictFloat, Field(ge=0.0, le=1e6, allow_inf_nan=False)] = Field(
        default=10.0, description=(
            "Graph-build time of one distinct communication operator, in ms (an assumption)."))


class ParameterServerSpec(_Closed):
    """`parallel.mode: parameter_server` (MindSpore's parameter server training, Li et al.
    OSDI 2014): the devices are workers; `servers` server processes, each on a host of its
    own (`server_hardware`, a hardware profile), hold the parameters and the optimizer
    states split by key range, sum the workers' pushed gradients and update."""

    servers: Degree = Field(default=1, description="Server processes, each on a host of its own.")
    # synchronous SGD (every worker's gradient summed, then one update) or asynchronous
    # (each push applied on arrival; workers run on stale parameters)
    sync: StrictBool = Field(default=True, description=(
        "Synchronous (every worker's gradient summed, then one update); false: each push applied "
        "on arrival."))
    server_hardware: StrictStr = Field(
        default="cpu-x86", description="Hardware profile of a server host.")
    # one server's network bandwidth; default: the server host's NICs (its profile)
    server_nic_Gbps: NicGbps | None = Field(default=None, description=(
        "Network bandwidth of one server, in Gbit/s; null: the server host's NICs."))
    # MindSpore's Parameter.set_param_ps on some parameters only: "the hybrid training mode
    # of parameter server and AllReduce. Some weights can be stored and updated through the
    # parameter server", the rest all-reduced (MindSpore docs "Parameter Server Mode", r1.7)
    parameters: Annotated[list[Annotated[StrictStr, Field(min_length=1, max_length=200)]],
                          Field(min_length=1, max_length=10_000)] | None = Field(
        default=None, description=(
            "The parameters on the servers (MindSpore's Parameter.set_param_ps): names of the "
            "model's parameters, a transformer's without their layer prefix (wte, wq, w1, "
            "ln1.g: that parameter of every layer); the others are all-reduced among the "
            "workers, which update them. null: every parameter (Cell.set_param_ps on the "
            "network)."))


class ParallelSpec(_Closed):
    data: Degree = Field(
        default=1, description=(
            "Data-parallel degree: model replicas, each on samples of its own (an operator "
            "graph: replicas of model.mesh, an outer mesh axis dp)."))
    tensor: Degree = Field(
        default=1, description="Tensor-parallel degree: devices splitting each layer's weights.")
    pipeline: Degree = Field(
        default=1, description="Pipeline-parallel degree: stages of consecutive layers.")
    # Expert parallel (a mixture-of-experts transformer): the experts of each MoE layer split
    # over this many of the data-parallel ranks, which exchange tokens by all-to-all. It
    # divides `data` (Megatron-LM --expert-model-parallel-size; DeepSpeed-MoE ep_size):
    # devices stay data * tensor * pipeline.
    expert: Degree = Field(default=1, description=(
        "Expert-parallel degree: data-parallel ranks splitting each MoE layer's experts (divides "
        "data); with expert_tensor 1, the ranks of tensor x data splitting them (Megatron-Core "
        "--expert-model-parallel-size)."))
    # how the expert all-to-all moves tokens (Megatron-Core --moe-token-dispatcher-type
    # alltoall, or flex with --moe-flex-dispatcher-backend deepep | hybridep): a pairwise
    # exchange of the dispatched copies, sorted by local expert around the experts
    # (simulator/program/a2a_sort.py); DeepEP's once-a-node send forwarded over NVLink
    # (simulator/cost/deepep.py), FP8 dispatch under an FP8 recipe (simulator/program/
    # deepep.py); HybridEP (GB200/GB300 NVL72): the pairwise exchange with the permutation
    # fused into it (no sort), BF16 dispatch (fused_a2a.py: "we do not support fp8 dispatch")
    expert_dispatcher: Literal["alltoall", "deepep", "hybridep"] = Field(
        default="alltoall", description=(
            "Expert token dispatcher (Megatron-Core --moe-token-dispatcher-type, "
            "--moe-flex-dispatcher-backend): alltoall (each token copy to its expert's device, "
            "then sorted by local expert), deepep (flex/DeepEP: a token crosses the network "
            "once a node and is forwarded over NVLink; FP8 dispatch under an FP8 recipe) or "
            "hybridep (flex/HybridEP: the all-to-all with the expert permutation fused in)."))
    expert_tensor: Degree | None = Field(default=None, description=(
        "Tensor-parallel degree of the expert FFNs (Megatron-Core "
        "--expert-tensor-parallel-size): null or tensor, each expert's FFN split over the "
        "tensor-parallel ranks; 1, whole experts, the tensor-parallel ranks splitting the "
        "experts as expert-parallel ranks do (expert a multiple of tensor)."))
    # Context parallel: the sequence of every sample split over this many devices, attention
    # exchanging key/value blocks around a ring (Megatron-LM --context-parallel-size;
    # simulator/graph/ops/ring_attention.py): devices are data * tensor * pipeline * context.
    context: Degree = Field(default=1, description=(
        "Context-parallel degree: devices splitting each sample's sequence (ring attention)."))
    schedule: Literal["gpipe", "1f1b", "interleaved_1f1b", "zb_h1", "zb_h2", "dualpipe"
                      ] = Field(default="1f1b", description=(
                          "Pipeline schedule (dualpipe: DeepSeek-V3's bidirectional one, two "
                          "stages a device)."))
    # Micro-batches per step of an operator graph (type: graph), each its graph as written
    # (MindSpore PipelineCell's micro_size; gradients accumulated over them). Other models
    # derive them: global_batch_size / (micro_batch_size * data).
    micro_batches: Degree = Field(default=1, description=(
        "Micro-batches per step of an operator graph (type graph); other models derive them."))
    virtual_stages: Layers = Field(
        default=1, description="Model chunks per pipeline stage (schedule interleaved_1f1b).")
    # Layers of each virtual pipeline stage, in stage order (MindSpore's per-cell
    # pipeline_stage; Megatron's --decoder-first/last-pipeline-num-layers); default: an
    # even split, the remainder going to the stages with the least other work.
    pipeline_layers: Annotated[list[Annotated[StrictInt, Field(ge=0, le=10_000)]],
                               Field(max_length=100_000)] | None = Field(default=None, description=(
        "Layers (units) of each virtual pipeline stage, in stage order; null: an even split."))
    sequence_parallel: StrictBool = Field(default=False, description=(
        "The norm and dropout regions split along the sequence over the tensor-parallel devices."))
    # 2-D tensor parallel of a transformer (MindSpore's high dimension tensor parallel:
    # MatMul/BatchMatMul `enable_nd_tp` with a 2-D Layout; Optimus, Xu et al. 2021): the
    # `tensor` devices as an x * y grid, x outer; every GEMM weight split on both axes
    # (simulator/models/transformer_plan.py). [x, y, z]: 3-D tensor parallel (Bian et al.
    # 2021, Colossal-AI's 3-D): the grid plus z, which splits the samples and every
    # parameter, gathered before use. None: 1-D (Megatron) tensor parallel.
    tensor_nd: Annotated[list[Annotated[StrictInt, Field(ge=1, le=100_000)]],
                         Field(min_length=2, max_length=3)] | None = Field(
        default=None, description=(
            "2-D [x, y] or 3-D [x, y, z] tensor parallel of a transformer over the tensor "
            "devices; null: 1-D."))
    # An int with bounds, not Literal[0, 1, 2, 3]: a Literal would take `true` as 1.
    optimizer_shard: Annotated[StrictInt, Field(ge=0, le=3)] = Field(default=0, description=(
        "ZeRO stage: 0 none; 1 optimizer states, 2 and gradients, 3 and parameters sharded over "
        "the data-parallel ranks (an operator graph: over its parallel.data replicas, "
        "MindSpore's enable_parallel_optimizer)."))
    # MindSpore parallel_optimizer_config's parallel_optimizer_threshold (KB; MindSpore's
    # default 64): a parameter whose local size is at most this is not sharded by the
    # optimizer (its gradient is all-reduced, its states kept whole). 0: every parameter is
    # sharded (ZeRO, Megatron's distributed optimizer).
    optimizer_threshold_kb: Annotated[StrictFloat, Field(ge=0.0, le=1e9,
                                                         allow_inf_nan=False)] = Field(
        default=0.0, description=(
            "Parameters of at most this size on a device, in KiB, are not sharded by the "
            "optimizer; 0: every one is."))
    recompute: Literal["none", "selective", "full"] = Field(default="none", description=(
        "Activation recompute: none, selective (the attention core) or full (each layer from its "
        "input)."))
    # Megatron-Core's fine-grained selective recompute (TransformerConfig.recompute_modules,
    # --recompute-granularity selective --recompute-modules ...): core_attn is the default
    # (the attention core); layernorm, mla_up_proj and moe_act discard their outputs after
    # the forward and make them again before the backward (simulator/program/
    # recompute_modules.py). None: the stack's selective policy.
    recompute_modules: list[Literal["core_attn", "layernorm", "mla_up_proj", "moe_act"]] | \
        None = Field(default=None, description=(
            "With recompute selective: the parts of a transformer layer recomputed "
            "(Megatron-Core --recompute-modules): core_attn (the attention core), layernorm "
            "(the layer's two norms), mla_up_proj (MLA's latent norms, up-projections and "
            "RoPE), moe_act (the experts' activation functions); null: the stack's selective "
            "policy."))
    recompute_comm: RecomputeCommSpec = Field(default_factory=RecomputeCommSpec, description=(
        "What recompute runs again of the communication inside its region."))
    # MindSpore's recompute_slice_activation (MindFormers `recompute_config`) = Megatron-LM's
    # --distribute-saved-activations (TransformerConfig.distribute_saved_activations): under
    # full recompute each layer keeps 1/tensor of its input and all-gathers it over the
    # tensor ranks before re-running the layer
    recompute_slice_activation: StrictBool = Field(default=False, description=(
        "Under recompute full with tensor parallel: each layer keeps its input split over the "
        "tensor ranks and all-gathers it before its recompute (MindSpore "
        "recompute_slice_activation, Megatron --distribute-saved-activations)."))
    # MindSpore set_auto_parallel_context(enable_alltoall=...): a redistribution may use an
    # all-to-all (S(d) -> S(e)); false: all-gather + local slice (MindSpore's default; true
    # here, the planner's choice before the key existed)
    enable_alltoall: StrictBool = Field(default=True, description=(
        "A redistribution may use an all-to-all; false: all-gather and a local slice."))
    # reported in `run --json` (`comm_subgraph`) and the trace when given
    comm_subgraph: CommSubgraphSpec = Field(default_factory=CommSubgraphSpec, description=(
        "Communication subgraph extraction and reuse (MindSpore)."))
    offload: OffloadSpec = Field(
        default_factory=OffloadSpec, description="What lives in host memory.")
    comm_fusion: CommFusionSpec = Field(default_factory=CommFusionSpec, description=(
        "Fusion of the gradient collectives into buckets (an operator graph: of its reduction "
        "over the parallel.data replicas)."))
    overlap: OverlapSpec = Field(
        default_factory=OverlapSpec, description="What communication overlaps with compute.")
    # MindSpore's parallel_mode for operator graphs (graph, mlp, resnet): semi_auto runs the
    # strategies as written and unconfigured operators data parallel; auto keeps the
    # configured operators and lets `search` choose every other operator's signature
    # (simulator/sharding/propagate/search.py).
    # `parameter_server` replaces the data-parallel collectives by pushes to and pulls from
    # the servers of `parameter_server` (simulator/lower/parameter_server.py).
    # `data` is MindSpore's DATA_PARALLEL (every operator data parallel: no strategy, no
    # model-parallel degree); `hybrid`, MindSpore's HYBRID_PARALLEL, is refused by name
    # (config.scenario.mode_rules).
    mode: Literal["semi_auto", "auto", "parameter_server", "data", "hybrid"] = Field(
        default="semi_auto", description=(
            "semi_auto (strategies as written, the others data parallel), auto (the open "
            "strategies searched), parameter_server, data (MindSpore's DATA_PARALLEL: every "
            "operator data parallel) or hybrid (MindSpore's HYBRID_PARALLEL: refused, the "
            "network splits tensors and calls collectives by hand)."))
    parameter_server: ParameterServerSpec = Field(
        default_factory=ParameterServerSpec, description="The servers of mode parameter_server.")
    # MindSpore's strategy checkpoint (set_auto_parallel_context strategy_ckpt_save_file /
    # strategy_ckpt_load_file): `shardsim explain` writes the plan it shows to the save
    # file; the load file's strategies replace the operators' own
    # (config.scenario.strategy_ckpt, sharding.strategy_ckpt)
    strategy_ckpt_save_file: StrictStr | None = Field(default=None, description=(
        "Where `shardsim explain` writes the chosen plan as a strategy checkpoint (JSON; "
        "MindSpore's strategy_ckpt_save_file); null: not written."))
    strategy_ckpt_load_file: StrictStr | None = Field(default=None, description=(
        "A strategy checkpoint whose operator placements replace the graph operators' "
        "strategies (MindSpore's strategy_ckpt_load_file; model.type graph); null: none."))
    search: Literal["sharding_propagation", "dynamic_programming", "ilp",
                    "recursive_programming"] = Field(
        default="ilp", description=(
            "The search of mode auto: sharding_propagation (MindSpore's greedy walk), "
            "dynamic_programming (exact on chains and trees), ilp (exact), "
            "recursive_programming (MindSpore's double recursive search: operators by "
            "decreasing weight, each cheapest against those decided)."))
    # MindSpore's dataset_strategy / full_batch (operator graphs; simulator/config/scenario/
    # dataset.py): how each device loads the inputs and labels -- data_parallel (dim 0 over
    # every device), full_batch (every device the whole batch) or, per input and label in
    # the model's order, the slices of each dim (a large image split along H/W). None: each
    # input as its first operator reads it.
    dataset_strategy: Literal["data_parallel", "full_batch"] | Annotated[
        list[Annotated[list[Degree], Field(max_length=16)]], Field(max_length=1000)] | None = Field(
        default=None, description=(
            "How each device loads the inputs and labels (operator graphs): data_parallel, "
            "full_batch, or per input the slices of each dim; null: as its first operator reads "
            "it."))
    full_batch: StrictBool | None = Field(default=None, description=(
        "MindSpore's full_batch: true means dataset_strategy full_batch, false data_parallel; "
        "null: not given."))

    @property
    def devices(self) -> int:
        return self.data * self.tensor * self.pipeline * self.context

    @property
    def chunks(self) -> int:
        """Model chunks of the pipeline: one per stage, `virtual_stages` per stage when
        interleaved."""
        return self.pipeline * (self.virtual_stages if self.schedule == "interleaved_1f1b"
                                else 1)

    @property
    def experts_tensor_split(self) -> bool:
        """Whether the expert FFNs split their FFN dim over the tensor-parallel ranks
        (expert tensor parallel = tensor), not their experts (expert tensor parallel 1)."""
        return self.expert_tensor is None or self.expert_tensor == self.tensor

    @property
    def expert_axis(self) -> int:
        """The data-parallel ranks splitting the experts (the `ep` mesh axis): `expert`, or
        with expert tensor parallel 1 expert / tensor of them, the tensor-parallel ranks
        making up the rest of Megatron-Core's expert-parallel group."""
        return self.expert if self.experts_tensor_split else self.expert // self.tensor

