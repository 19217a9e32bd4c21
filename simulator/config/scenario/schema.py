"""The scenario schema (docs/contract.md section 2): what, how and where as separate values.

Pydantic models, frozen, strict about types (a boolean is not a number, a string is not an
integer) and closed (unknown keys are errors); each section in a module of its own
(`schema_models`, `schema_parallel`, `schema_cluster`). Cross-field rules live in `rules.py`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, StrictBool, StrictStr

from simulator.config.scenario.schema_cluster import ClusterSpec, JitterSpec, NodeType, SlowSpec
from simulator.config.scenario.schema_graphs import CudaGraphsSpec
from simulator.config.scenario.schema_models import (
    GraphModel,
    GraphOp,
    GraphTensor,
    MlpModel,
    ModelSpec,
    MoeSpec,
    ResnetModel,
    TransformerModel,
)
from simulator.config.scenario.schema_parallel import (
    CommFusionSpec,
    CommSubgraphSpec,
    FusionKindSpec,
    OffloadSpec,
    OverlapSpec,
    ParallelSpec,
    ParameterServerSpec,
    RecomputeCommSpec,
)
from simulator.config.scenario.schema_types import (
    DTYPE_BYTES,
    Dtype,
    GlobalBatch,
    LearningRate,
    MicroBatch,
    Seed,
    _Closed,
)

# the sections' classes, importable from here as the one schema module
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
    "CudaGraphsSpec",
    "OffloadSpec",
    "FusionKindSpec",
    "CommFusionSpec",
    "OverlapSpec",
    "RecomputeCommSpec",
    "CommSubgraphSpec",
    "ParameterServerSpec",
    "ParallelSpec",
    "Scenario",
    "DTYPE_BYTES",
]


class TrainingSpec(_Closed):
    global_batch_size: GlobalBatch = Field(
        default=1, description=(
            "Samples per optimizer step, over all data-parallel replicas (an operator graph: "
            "given, it rescales the graph's batch dims to it over parallel.micro_batches)."))
    micro_batch_size: MicroBatch = Field(
        default=1, description="Samples per micro-batch of one data-parallel replica.")
    optimizer: Literal["sgd", "momentum", "adam"] = Field(default="adam", description=(
        "Optimizer: sgd, momentum or adam (0, 1 or 2 states per parameter)."))
    learning_rate: LearningRate = Field(
        default=1e-3, description="Learning rate of the optimizer step (verify applies it).")
    # dtype of the optimizer's states (its moments, and its master copy of the weights when
    # it keeps one): fp32 (the ZeRO accounting), or bf16 (Apex DistributedFusedAdam `dtype`,
    # NeMo `optim.dtype: bf16`), see simulator/lower/state.py
    optimizer_dtype: Literal["fp32", "bf16"] = Field(
        default="fp32", description="Dtype of the optimizer's states (moments, master weights).")
    # dtype of Adam's / momentum's moments alone, the master copy staying in optimizer_dtype
    # (Megatron-Core's precision-aware optimizer: --exp-avg-dtype / --exp-avg-sq-dtype beside
    # --main-params-dtype; DeepSeek-V3 keeps BF16 moments and FP32 master weights,
    # arXiv:2412.19437 Sec. 3.3.3); None: optimizer_dtype
    moments_dtype: Literal["fp32", "bf16"] | None = Field(default=None, description=(
        "Dtype of the optimizer's moments (Adam's first and second, momentum's), the master "
        "weights staying in optimizer_dtype; null: optimizer_dtype."))
    # FP8 recipes only: activations kept for the backward in a narrower format (DeepSeek-V3
    # Sec. 3.3.3 "Low-Precision Storage"; simulator/program/moe_saved.py)
    fp8_saved_activations: list[Literal["moe_act_input", "attention_output"]] = Field(
        default_factory=list, description=(
            "With model.dtype fp8: activations kept in a low-precision cache (DeepSeek-V3): "
            "moe_act_input (the MoE SwiGLU inputs in FP8 with a scale a 128) and "
            "attention_output (the attention output, the projection's input, in E5M6)."))
    # FP8 recipes with output-discarding recompute modules only: the FP8 GEMMs that read a
    # discarded output quantize the re-run's output again instead of keeping an FP8 copy
    # (DeepSeek-V3, arXiv:2412.19437 Sec. 3.2.3: recomputing "all RMSNorm operations and MLA
    # up-projections ... eliminating the need to persistently store their output
    # activations"; Sec. 3.3.3: the SwiGLU inputs cached, "recompute its output in the
    # backward pass"); false: Transformer Engine's Linear keeps its quantized input
    # (simulator/program/recompute_modules.py)
    fp8_requantize_recomputed: StrictBool = Field(default=False, description=(
        "With model.dtype fp8 and parallel.recompute_modules: the FP8 GEMMs reading an "
        "output the recompute discards keep no FP8 copy of it and quantize the re-run's "
        "output again (DeepSeek-V3); false: they keep their FP8 copy (Transformer Engine)."))
    # FP8 recipes only: the weights of the FP8 GEMMs are stored in FP8 (Transformer Engine
    # fp8_model_init; NeMo `model.fp8_params`), with no 16-bit copy on the device besides
    # the optimizer's
    fp8_params: StrictBool = Field(default=False, description=(
        "With model.dtype fp8: the weights of the FP8 GEMMs stored in FP8, with no 16-bit copy "
        "besides the optimizer's."))
    # FP8 recipes only: how the FP8 operands are scaled (simulator/program/fp8.py)
    fp8_scaling: Literal["tensor", "mxfp8"] = Field(default="tensor", description=(
        "With model.dtype fp8: tensor (one scale per tensor: Transformer Engine's delayed or "
        "current scaling, torchao tensorwise) or mxfp8 (Blackwell's block scaling, an E8M0 "
        "scale per 32 elements: a rowwise and a columnwise copy of every operand)."))
    # the loss under torch.compile (torchtitan e7c0cae components/loss.py
    # build_cross_entropy_loss: torch.compile(loss_fn) with --training.compile; its Dec 2024
    # train.py left it eager): Inductor's partition keeps the model-dtype logits, not the
    # fp32 log-softmax (torch/_functorch/partitioners.py min_cut_rematerialization_partition),
    # and its backward writes their gradient in one kernel (program.model_program)
    compiled_loss: StrictBool = Field(default=False, description=(
        "The cross-entropy runs under torch.compile: it keeps the model-dtype logits (not an "
        "fp32 copy or the fp32 log-softmax) and its backward writes their gradient in one "
        "fused kernel (model-dtype bytes per logit), priced as a fused cross-entropy."))
    # FP4 recipes (issue 22 item 6): the GEMMs of the framework's low-precision recipe
    # (fp8.gemm_roles) run in FP4 on Blackwell's FP4 tensor cores, the model otherwise bf16
    # (simulator/program/fp8.py)
    fp4_recipe: Literal["none", "nvfp4", "mxfp4"] = Field(default="none", description=(
        "FP4 GEMMs on a bf16 model: none, nvfp4 (E2M1 with an E4M3 scale per 16 elements and a "
        "per-tensor scale) or mxfp4 (E2M1 with an E8M0 scale per 32); the linear layers' "
        "forward, dgrad and wgrad GEMMs run at the device's FP4 peak."))
    # CUDA graphs of parts of each layer or of the whole iteration (Megatron-Core
    # --cuda-graph-impl / --cuda-graph-scope; schema_graphs.py, simulator/lower/cuda_graphs.py)
    cuda_graphs: CudaGraphsSpec = Field(default_factory=CudaGraphsSpec, description=(
        "CUDA graphs the stack captures (Megatron-Core --cuda-graph-impl and "
        "--cuda-graph-scope): a captured region costs the host one graph launch instead of "
        "a launch per kernel."))


class Scenario(_Closed):
    """A validated scenario. `source` is the file it came from (for messages)."""

    name: StrictStr = Field(description="Name of the scenario, shown in reports (printable text).")
    hardware: StrictStr = Field(description=(
        "Hardware profile of the devices: a bundled name (hardware_profiles/) or the path of a "
        "YAML file."))
    # the training stack (framework_profiles/NAME.yaml or a path); None: the hardware
    # profile's `default_framework`
    framework: StrictStr | None = Field(default=None, description=(
        "Training software stack: a bundled framework profile name or a path; null: the hardware "
        "profile's default_framework."))
    cluster: ClusterSpec = Field(default_factory=ClusterSpec, description=(
        "Nodes and devices, with mixed device kinds, stragglers and jitter."))
    model: ModelSpec = Field(description=(
        "The model trained, by model.type: transformer, mlp, resnet or graph (operators written "
        "out)."))
    training: TrainingSpec = Field(
        default_factory=TrainingSpec, description="Batch sizes and the optimizer.")
    parallel: ParallelSpec = Field(default_factory=ParallelSpec, description=(
        "How the work is split over the devices, and the techniques applied."))
    seed: Seed = Field(
        default=0, description="Seed of the random inputs and parameters verify draws.")
    source: StrictStr = Field(default="<scenario>", description=(
        "The file the scenario came from, named in messages (set when loading)."))

    @property
    def devices(self) -> int:
        return self.cluster.devices

    @property
    def dtype(self) -> str:
        return self.model.dtype

    @property
    def global_batch(self) -> int:
        """Samples per optimizer step: `training.global_batch_size`, or for an operator graph
        that does not give it, its first input's first dim (as written) times
        `parallel.micro_batches`."""
        t = self.training
        if not self.model.writes_ops or "global_batch_size" in t.model_fields_set:
            return t.global_batch_size
        written = next((x.shape[0] for x in getattr(self.model, "tensors", ())
                        if x.kind == "input" and x.shape), 1)
        return written * self.parallel.micro_batches

    @property
    def grad_accum_steps(self) -> int:
        """Micro-batches per data-parallel replica per optimizer step (an operator graph:
        `parallel.micro_batches` of its graph as written)."""
        if self.model.writes_ops:
            return self.parallel.micro_batches
        per_step = self.training.micro_batch_size * self.parallel.data
        return self.training.global_batch_size // per_step
