"""The scenario schema (docs/contract.md section 2): what, how and where as separate values.

Pydantic models, frozen, strict about types (a boolean is not a number, a string is not an
integer) and closed (unknown keys are errors). Cross-field rules live in `rules.py`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, StrictBool, StrictFloat, StrictInt, StrictStr

__all__ = [
    "Dtype",
    "ClusterSpec",
    "MoeSpec",
    "NodeType",
    "SlowSpec",
    "JitterSpec",
    "TransformerModel",
    "MlpModel",
    "ResnetModel",
    "GraphTensor",
    "GraphOp",
    "GraphModel",
    "ModelSpec",
    "TrainingSpec",
    "OffloadSpec",
    "CommFusionSpec",
    "OverlapSpec",
    "RecomputeCommSpec",
    "CommSubgraphSpec",
    "ParallelSpec",
    "Scenario",
    "DTYPE_BYTES",
]

from simulator.config.scenario.schema_cluster import ClusterSpec, JitterSpec, NodeType, SlowSpec
from simulator.config.scenario.schema_types import (  # noqa: F401  (re-exported)
    DTYPE_BYTES,
    BucketMB,
    Count,
    Degree,
    Dim,
    DropoutP,
    Dtype,
    GlobalBatch,
    Layers,
    LearningRate,
    MicroBatch,
    NicGbps,
    NonNegInt,
    PerNode,
    PosFloat,
    PosInt,
    Rank,
    Seed,
    SeqLength,
    Speed,
    Vocab,
    _Closed,
)


class MoeSpec(_Closed):
    """Mixture of experts in the FFN of every `every`-th layer (GShard, Lepikhin et al. 2021:
    every other layer; Switch Transformer, Fedus et al. 2022; Megatron-LM --num-experts,
    --moe-router-topk, --moe-expert-capacity-factor, --moe-layer-freq).

    experts: expert FFNs per MoE layer, each of ffn_hidden_size; top_k: experts each token
    is sent to; capacity_factor: slots per expert over an even share, per sample of
    seq_length tokens (Switch Sec. 2.2); imbalance: a what-if for `run`, the busiest
    expert-parallel rank's tokens over the mean (1: balanced routing), which scales that
    rank's expert FFNs and its dispatch/combine all-to-alls as if the capacity did not bind
    (a dropless router); `verify` routes the real tokens and ignores it."""

    experts: Annotated[StrictInt, Field(ge=2, le=100_000)]
    top_k: Annotated[StrictInt, Field(ge=1, le=1_000)] = 1
    capacity_factor: Annotated[StrictFloat, Field(gt=0, le=1_000.0, allow_inf_nan=False)] = 1.0
    every: Layers = 1
    imbalance: Annotated[StrictFloat, Field(ge=1.0, le=1_000.0, allow_inf_nan=False)] = 1.0


class TransformerModel(_Closed):
    """A GPT-style decoder: embedding, `layers` blocks (attention + FFN), LM head and loss."""

    type: Literal["transformer"] = "transformer"
    layers: Layers
    hidden_size: Count
    num_heads: Count
    ffn_hidden_size: Count | None = None
    num_kv_heads: Count | None = None
    ffn_activation: Literal["gelu", "swiglu"] = "gelu"
    # standard: scores materialised (QK^T, softmax, dropout, PV as separate kernels);
    # flash: one fused kernel (Dao et al. 2022), no s x s tensor in memory; auto: the
    # hardware profile's `software.fused_attention` (its reference training stack);
    # fa1 / fa2 / fa3 / cudnn / te: fused, with that implementation's rate (`efficiency.
    # attention_kernels`) instead of the framework's (`attention.implementation`).
    attention: Literal["auto", "standard", "flash", "fa1", "fa2", "fa3", "cudnn", "te"] = "auto"
    seq_length: SeqLength
    vocab_size: Vocab
    dtype: Dtype = "bf16"
    moe: MoeSpec | None = None
    # dropout probability of the hidden states and attention probabilities (Megatron's
    # hidden_dropout / attention_dropout; 0.1 in GPT-2/3 and Megatron-LM's defaults). At 0
    # no dropout runs and no keep-mask is saved: torch.nn.functional.dropout returns its
    # input unchanged when p == 0 (ATen Dropout.cpp `_dropout_impl`: `if (p == 0 || !train
    # ...) return input`), as in Nemotron-4 (NeMo Nemotron4Config340B / NeMo-Framework-
    # Launcher nemotron_340b.yaml: hidden_dropout 0.0, attention_dropout 0.0) and Llama
    dropout: DropoutP = 0.1
    # the dtype the weights are stored in when it differs from the compute dtype `dtype`
    # (MindFormers' param_init_type float16 with compute_dtype bfloat16): every weight is
    # cast to the compute dtype before its matmul and its gradient cast back, each micro-
    # batch (MindSpore Dense: P.Cast(weight, compute_dtype)); null: stored as computed.
    # Only 16-bit pairs (fp16 <-> bf16): the weights take the same bytes either way
    param_dtype: Literal["fp16", "bf16"] | None = None

    @property
    def ffn(self) -> int:
        return self.ffn_hidden_size or 4 * self.hidden_size

    @property
    def kv_heads(self) -> int:
        return self.num_kv_heads or self.num_heads

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads


class MlpModel(_Closed):
    """A stack of fully connected layers: input -> hidden x layers -> classes, softmax loss."""

    type: Literal["mlp"]
    layers: Layers
    hidden_size: Count
    input_size: Count | None = None
    num_classes: Vocab | None = None
    activation: Literal["relu", "gelu"] = "relu"
    dtype: Dtype = "fp32"


class ResnetModel(_Closed):
    """A ResNet-like net: Conv2D+ReLU layers (the data-parallel half), then FC layers."""

    type: Literal["resnet"]
    conv_layers: Layers = 2
    in_channels: Count = 3
    channels: Count = 16
    image_size: Count = 8
    kernel_size: Layers = 3
    fc_layers: Layers = 2
    hidden_size: Count = 64
    num_classes: Vocab = 10
    dtype: Dtype = "fp32"


class GraphTensor(_Closed):
    """A named tensor of an explicit graph. `kind` says where its values come from."""

    name: StrictStr
    shape: Annotated[list[Dim], Field(max_length=16)]
    kind: Literal["input", "parameter", "label"] = "input"


class GraphOp(_Closed):
    """One operator of an explicit graph, optionally with a sharding strategy.

    `strategy` is MindSpore's in_strategy: one tuple per input, each number the count of
    slices of that dimension; `out_strategy` likewise for the output. `placements` is the
    SBP form: one list per input and one for the output under key `out`, each with one
    placement per mesh axis (`S(d)`, `B`, `P`).
    """

    name: StrictStr
    type: StrictStr
    inputs: list[StrictStr]
    output: StrictStr
    attrs: dict[str, Any] = Field(default_factory=dict)
    strategy: list[list[Degree]] | None = None
    out_strategy: list[list[Degree]] | None = None
    placements: dict[str, list[StrictStr]] | None = None


class GraphModel(_Closed):
    """An operator graph written out in YAML; the loss is the output of the last op."""

    type: Literal["graph"]
    mesh: dict[str, Degree] | None = None
    tensors: list[GraphTensor]
    ops: list[GraphOp]
    dtype: Dtype = "fp32"


ModelSpec = Annotated[
    TransformerModel | MlpModel | ResnetModel | GraphModel, Field(discriminator="type")
]


class TrainingSpec(_Closed):
    global_batch_size: GlobalBatch = 1
    micro_batch_size: MicroBatch = 1
    optimizer: Literal["sgd", "momentum", "adam"] = "adam"
    learning_rate: LearningRate = 1e-3
    # dtype of the optimizer's states (its moments, and its master copy of the weights when
    # it keeps one): fp32 (the ZeRO accounting), or bf16 (Apex DistributedFusedAdam `dtype`,
    # NeMo `optim.dtype: bf16`), see simulator/lower/state.py
    optimizer_dtype: Literal["fp32", "bf16"] = "fp32"
    # FP8 recipes only: the weights of the FP8 GEMMs are stored in FP8 (Transformer Engine
    # fp8_model_init; NeMo `model.fp8_params`), with no 16-bit copy on the device besides
    # the optimizer's
    fp8_params: StrictBool = False


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
    schedule: Literal["gpipe", "1f1b", "interleaved_1f1b"] = "1f1b"
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
    # the servers of `parameter_server` (simulator/lower/reduction.py, ParameterServer).
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


class Scenario(_Closed):
    """A validated scenario. `source` is the file it came from (for messages)."""

    name: StrictStr
    hardware: StrictStr
    # the training stack (framework_profiles/NAME.yaml or a path); None: the hardware
    # profile's `default_framework`
    framework: StrictStr | None = None
    cluster: ClusterSpec = Field(default_factory=ClusterSpec)
    model: ModelSpec
    training: TrainingSpec = Field(default_factory=TrainingSpec)
    parallel: ParallelSpec = Field(default_factory=ParallelSpec)
    seed: Seed = 0
    source: StrictStr = "<scenario>"

    @property
    def devices(self) -> int:
        return self.cluster.devices

    @property
    def dtype(self) -> str:
        return self.model.dtype

    @property
    def grad_accum_steps(self) -> int:
        """Micro-batches per data-parallel replica per optimizer step (an operator graph:
        `parallel.micro_batches` of its graph as written)."""
        if isinstance(self.model, GraphModel):
            return self.parallel.micro_batches
        per_step = self.training.micro_batch_size * self.parallel.data
        return self.training.global_batch_size // per_step
