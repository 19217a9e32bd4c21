"""The scenario schema (docs/contract.md section 2): what, how and where as separate values.

Pydantic models, frozen, strict about types (a boolean is not a number, a string is not an
integer) and closed (unknown keys are errors); each section in a module of its own
(`schema_models`, `schema_parallel`, `schema_cluster`). Cross-field rules live in `rules.py`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, StrictBool, StrictStr

from simulator.config.scenario.schema_cluster import ClusterSpec, JitterSpec, NodeType, SlowSpec
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
        if self.model.writes_ops:
            return self.parallel.micro_batches
        per_step = self.training.micro_batch_size * self.parallel.data
        return self.training.global_batch_size // per_step
