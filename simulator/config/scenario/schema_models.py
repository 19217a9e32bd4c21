"""The `model` section of the scenario schema: one class per `model.type` (the discriminator
of `ModelSpec`), each answering what the scenario's rules ask of a model (`ModelConfig`).

`config` sits below `models`, so the rules cannot ask the model family; nor do they test the
model's type: each class carries its capabilities (ClassVars, not keys of the scenario) and
its own rules (`problems`, `context_problems`, `tensor_nd_problems`), so a new model type is
a class here with its answers, and a family in `simulator.models`."""

from __future__ import annotations

import typing
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from pydantic import Field, StrictFloat, StrictInt, StrictStr

from simulator.config.scenario import graph_rules, transformer_rules
from simulator.config.scenario.pipeline_rules import unit_pipeline
from simulator.config.scenario.rule_helpers import Problem, no_experts
from simulator.config.scenario.schema_types import (
    Count,
    Degree,
    Dim,
    DropoutP,
    Dtype,
    Layers,
    SeqLength,
    Vocab,
    _Closed,
)

if TYPE_CHECKING:
    from simulator.config.scenario.schema import Scenario

__all__ = ["ModelConfig", "MoeSpec", "TransformerModel", "MlpModel", "ResnetModel",
           "GraphTensor", "GraphOp", "GraphModel", "ModelSpec", "model_class"]


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


class ModelConfig(_Closed):
    """The base of every model type: its capabilities and its rules, with the answers of a
    model that has none of them (the subclasses say what they have)."""

    # the scenario writes the operators out: their batch is their input tensors' first dim
    # and their split `model.mesh` with their strategies, so the batch and degree keys do
    # not apply (nor a parameter server's replicated workers); `parallel.micro_batches` does
    writes_ops: ClassVar[bool] = False
    # one block without a pipeline: its gradients are all ready when its one backward ends
    one_block: ClassVar[bool] = False
    # an attention core, which `parallel.recompute: selective` recomputes
    attention_core: ClassVar[bool] = False
    # norm and dropout regions, which `parallel.sequence_parallel` splits along the sequence
    sequence_regions: ClassVar[bool] = False
    # GEMMs whose tensor-parallel collectives `parallel.overlap.tp_comm` chunks and overlaps
    tp_comm_overlap: ClassVar[bool] = False
    # operators whose strategies `parallel.mode: auto` searches (else a plan of its own)
    searched: ClassVar[bool] = True
    # `parallel.optimizer_threshold_kb` is simulated on its planned parameters
    optimizer_threshold: ClassVar[bool] = False
    # its inputs are loaded as `parallel.dataset_strategy` / `full_batch` say
    loads_dataset_strategy: ClassVar[bool] = True

    def moe_spec(self) -> MoeSpec | None:
        """Its mixture of experts; None: no experts."""
        return None

    def recomputed_ops(self) -> list[int]:
        """Indices of the operators written with `attrs.recompute: true`."""
        return []

    def problems(self, s: Scenario) -> Iterator[Problem]:
        """Its own rules, in order (`rules.RULES` runs them after the batch rules)."""
        return no_experts(s)

    def context_problems(self, s: Scenario) -> Iterator[Problem]:
        """The rules of `parallel.context` > 1: context parallelism splits the sequence of
        attention layers."""
        yield "parallel.context", (
            f"{s.parallel.context} needs a transformer: context parallelism splits the "
            f"sequence of attention layers, which a {s.model.type} model has none of "
            f"(allowed: 1)")

    def tensor_nd_problems(self, s: Scenario, nd: list[int]) -> Iterator[Problem]:
        """The rules of `parallel.tensor_nd`: 2-D / 3-D tensor parallel splits attention and
        FFN weights."""
        yield "parallel.tensor_nd", (
            f"{nd}: {len(nd)}-D tensor parallel splits a transformer's attention and FFN "
            f"weights; a model of type '{s.model.type}' has none (remove the key)")


class TransformerModel(ModelConfig):
    """A GPT-style decoder: embedding, `layers` blocks (attention + FFN), LM head and loss."""

    attention_core: ClassVar[bool] = True
    sequence_regions: ClassVar[bool] = True
    tp_comm_overlap: ClassVar[bool] = True
    searched: ClassVar[bool] = False  # Megatron's plan, with parallel.tensor
    optimizer_threshold: ClassVar[bool] = True
    loads_dataset_strategy: ClassVar[bool] = False  # Megatron's data loader

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

    def moe_spec(self) -> MoeSpec | None:
        return self.moe

    def problems(self, s: Scenario) -> Iterator[Problem]:
        yield from transformer_rules.shape(self, s)
        yield from transformer_rules.experts(self, s)

    def context_problems(self, s: Scenario) -> Iterator[Problem]:
        return transformer_rules.context(self, s)

    def tensor_nd_problems(self, s: Scenario, nd: list[int]) -> Iterator[Problem]:
        return transformer_rules.tensor_nd(self, s, nd)


class MlpModel(ModelConfig):
    """A stack of fully connected layers: input -> hidden x layers -> classes, softmax loss."""

    one_block: ClassVar[bool] = True
    units_key: ClassVar[str] = "model.layers"

    type: Literal["mlp"]
    layers: Layers
    hidden_size: Count
    input_size: Count | None = None
    num_classes: Vocab | None = None
    activation: Literal["relu", "gelu"] = "relu"
    dtype: Dtype = "fp32"

    def pipeline_units(self) -> int:
        """Units a pipeline cuts it into: its layers."""
        return self.layers

    def problems(self, s: Scenario) -> Iterator[Problem]:
        yield from no_experts(s)
        yield from unit_pipeline(s, self.pipeline_units(), self.units_key)


class ResnetModel(ModelConfig):
    """A ResNet-like net: Conv2D+ReLU layers (the data-parallel half), then FC layers."""

    one_block: ClassVar[bool] = True
    units_key: ClassVar[str] = "model.conv_layers + model.fc_layers"

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

    def pipeline_units(self) -> int:
        """Units a pipeline cuts it into: its conv and FC layers."""
        return self.conv_layers + self.fc_layers

    def problems(self, s: Scenario) -> Iterator[Problem]:
        yield from no_experts(s)
        yield from unit_pipeline(s, self.pipeline_units(), self.units_key)


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


class GraphModel(ModelConfig):
    """An operator graph written out in YAML; the loss is the output of the last op."""

    writes_ops: ClassVar[bool] = True
    units_key: ClassVar[str] = "operators in model.ops"

    type: Literal["graph"]
    mesh: dict[str, Degree] | None = None
    tensors: list[GraphTensor]
    ops: list[GraphOp]
    dtype: Dtype = "fp32"

    def pipeline_units(self) -> int:
        """Units a pipeline cuts it into: its operators."""
        return len(self.ops)

    def recomputed_ops(self) -> list[int]:
        return [i for i, op in enumerate(self.ops) if op.attrs.get("recompute") is True]

    def problems(self, s: Scenario) -> Iterator[Problem]:
        yield from no_experts(s)
        yield from graph_rules.own_batch(s)
        yield from graph_rules.reductions(s)
        yield from graph_rules.pipeline(self, s)


ModelSpec = Annotated[
    TransformerModel | MlpModel | ResnetModel | GraphModel, Field(discriminator="type")
]


def model_class(type_name: object) -> type[ModelConfig] | None:
    """The schema class of `model.type` `type_name` (None: no such type), for code that
    reads a model section before it is validated."""
    for cls in typing.get_args(typing.get_args(ModelSpec)[0]):
        if typing.get_args(cls.model_fields["type"].annotation) == (type_name,):
            return cls
    return None
