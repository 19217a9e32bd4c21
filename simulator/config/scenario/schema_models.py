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

from pydantic import ConfigDict, Field, StrictFloat, StrictInt, StrictStr, model_validator

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

__all__ = ["ModelConfig", "MoeSpec", "TransformerModel", "VitModel", "MlpModel", "ResnetModel",
           "GraphTensor", "GraphOp", "GraphModel", "ModelSpec", "model_class",
           "model_classes"]


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

    experts: Annotated[StrictInt, Field(ge=2, le=100_000)] = Field(
        description="Expert FFNs per MoE layer, each of ffn_hidden_size.")
    top_k: Annotated[StrictInt, Field(ge=1, le=1_000)] = Field(
        default=1, description="Experts each token is sent to.")
    capacity_factor: Annotated[StrictFloat, Field(gt=0, le=1_000.0, allow_inf_nan=False)] = Field(
        default=1.0, description=(
            "Slots per expert over an even share of a sample's tokens (1: exactly an even "
            "share)."))
    every: Layers = Field(default=1, description=(
        "Every every-th layer is a mixture of experts (1: every layer, 2: every other)."))
    imbalance: Annotated[StrictFloat, Field(ge=1.0, le=1_000.0, allow_inf_nan=False)] = Field(
        default=1.0, description=(
            "What-if for run: the busiest expert-parallel rank's tokens over the mean (1: "
            "balanced routing); verify ignores it."))


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
    # `plan` searches its parallel configurations (planner/space.py)
    plannable: ClassVar[bool] = False
    # the module of `simulator.models` that defines its family (FAMILY): the registry
    # (`models.registry`) finds the families through the classes of `ModelSpec`
    family_module: ClassVar[str] = ""

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
    plannable: ClassVar[bool] = True
    family_module: ClassVar[str] = "transformer"

    type: Literal["transformer"] = Field(
        default="transformer", description="Model type: a GPT-style decoder.")
    layers: Layers = Field(description="Transformer layers (blocks of attention and FFN).")
    hidden_size: Count = Field(description="Hidden size (model width), in elements.")
    num_heads: Count = Field(description="Attention heads.")
    ffn_hidden_size: Count | None = Field(default=None, description=(
        "Width of the FFN's inner layer, in elements; null: 4 x hidden_size."))
    num_kv_heads: Count | None = Field(
        default=None, description="Key/value heads (grouped-query attention); null: num_heads.")
    ffn_activation: Literal["gelu", "swiglu"] = Field(default="gelu", description=(
        "FFN activation: gelu (two GEMMs) or swiglu (gated, three GEMMs)."))
    # standard: scores materialised (QK^T, softmax, dropout, PV as separate kernels);
    # flash: one fused kernel (Dao et al. 2022), no s x s tensor in memory; auto: the
    # hardware profile's `software.fused_attention` (its reference training stack);
    # fa1 / fa2 / fa3 / cudnn / te: fused, with that implementation's rate (`efficiency.
    # attention_kernels`) instead of the framework's (`attention.implementation`).
    attention: Literal["auto", "standard", "flash", "fa1", "fa2", "fa3", "cudnn", "te"] = Field(
        default="auto", description=(
            "Attention kernel: standard (unfused), flash (fused), a fused implementation (fa1, "
            "fa2, fa3, cudnn, te), or auto (the hardware profile's software stack)."))
    seq_length: SeqLength = Field(description="Tokens per sample (sequence length).")
    vocab_size: Vocab = Field(
        description="Vocabulary size (rows of the embedding and of the LM head).")
    dtype: Dtype = Field(
        default="bf16", description="Compute dtype of the weights and activations.")
    moe: MoeSpec | None = Field(
        default=None, description="Mixture of experts in the FFNs; null: dense.")
    # dropout probability of the hidden states and attention probabilities (Megatron's
    # hidden_dropout / attention_dropout; 0.1 in GPT-2/3 and Megatron-LM's defaults). At 0
    # no dropout runs and no keep-mask is saved: torch.nn.functional.dropout returns its
    # input unchanged when p == 0 (ATen Dropout.cpp `_dropout_impl`: `if (p == 0 || !train
    # ...) return input`), as in Nemotron-4 (NeMo Nemotron4Config340B / NeMo-Framework-
    # Launcher nemotron_340b.yaml: hidden_dropout 0.0, attention_dropout 0.0) and Llama
    dropout: DropoutP = Field(default=0.1, description=(
        "Dropout probability of the hidden states and attention probabilities (0: no dropout, no "
        "mask kept)."))
    # the dtype the weights are stored in when it differs from the compute dtype `dtype`
    # (MindFormers' param_init_type float16 with compute_dtype bfloat16): every weight is
    # cast to the compute dtype before its matmul and its gradient cast back, each micro-
    # batch (MindSpore Dense: P.Cast(weight, compute_dtype)); null: stored as computed.
    # Only 16-bit pairs (fp16 <-> bf16): the weights take the same bytes either way
    param_dtype: Literal["fp16", "bf16"] | None = Field(default=None, description=(
        "Dtype the weights are stored in when it differs from dtype (cast to dtype each "
        "micro-batch); null: as computed."))

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

    def graph_dims(self) -> dict[str, Any]:
        """Fields of its graph's dimensions (`graph.builders.GptDims`) beyond those every
        transformer has (`models.transformer_plan.model_dims`): none for a GPT decoder."""
        return {}

    def problems(self, s: Scenario) -> Iterator[Problem]:
        yield from transformer_rules.shape(self, s)
        yield from transformer_rules.experts(self, s)

    def context_problems(self, s: Scenario) -> Iterator[Problem]:
        return transformer_rules.context(self, s)

    def tensor_nd_problems(self, s: Scenario, nd: list[int]) -> Iterator[Problem]:
        return transformer_rules.tensor_nd(self, s, nd)


class VitModel(TransformerModel):
    """A vision transformer (ViT, Dosovitskiy et al. 2021, "An Image is Worth 16x16 Words",
    Sec. 3.1): the image cut into patch_size x patch_size patches, each projected to
    hidden_size by a stride-patch_size convolution, a learned class token put first and
    learned positions added, `layers` encoder blocks (a transformer's, with bidirectional
    attention), and the class-token head: final norm, the class token, a linear layer to
    num_classes and the cross-entropy over one label per image. It rides on the
    transformer's plans and program: its sequence is the patches and the class token, its
    classes take the vocabulary's place (split across tensor-parallel ranks as the LM
    head's)."""

    family_module: ClassVar[str] = "vit"
    # seq_length and vocab_size are derived (`_derived`): not required in the JSON schema
    model_config = ConfigDict(json_schema_extra=lambda schema: schema.update(required=[
        k for k in schema.get("required", []) if k not in ("seq_length", "vocab_size")]))

    type: Literal["vit"] = Field(  # type: ignore[assignment]
        description="Model type: a vision transformer (patch embedding, encoder blocks, "
                    "class-token head).")
    image_size: Count = Field(description="Height and width of the input image, in pixels.")
    patch_size: Count = Field(description="Height and width of a patch, in pixels.")
    channels: Count = Field(default=3, description="Channels of the input image.")
    num_classes: Vocab = Field(description="Classes of the classification head.")
    seq_length: SeqLength = Field(description=(
        "Tokens per image, derived: (image_size / patch_size)^2 patches and the class token; "
        "may be left out."))
    vocab_size: Vocab = Field(description="The head's classes, derived: num_classes; may be "
                                          "left out.")

    @model_validator(mode="before")
    @classmethod
    def _derived(cls, data: Any) -> Any:
        """seq_length and vocab_size from the image, patch and class keys (a value given
        must agree: `problems` says so)."""
        if not isinstance(data, dict):
            return data
        out = dict(data)
        image, patch = out.get("image_size"), out.get("patch_size")
        if "seq_length" not in out and isinstance(image, int) and isinstance(patch, int) \
                and patch > 0:
            out["seq_length"] = (image // patch) ** 2 + 1
        if "vocab_size" not in out and "num_classes" in out:
            out["vocab_size"] = out["num_classes"]
        return out

    def graph_dims(self) -> dict[str, Any]:
        return {"patch": self.patch_size, "image": self.image_size,
                "channels": self.channels, "causal": False, "tied": False}

    def problems(self, s: Scenario) -> Iterator[Problem]:
        patches = self.image_size // self.patch_size
        if self.image_size % self.patch_size:
            yield "model.patch_size", (
                f"{self.patch_size} must divide model.image_size={self.image_size} (the "
                f"image is cut into whole patches)")
        elif self.seq_length != patches ** 2 + 1:
            yield "model.seq_length", (
                f"{self.seq_length} must be {patches ** 2 + 1}: {patches}x{patches} patches "
                f"and the class token (or leave it out)")
        if self.vocab_size != self.num_classes:
            yield "model.vocab_size", (f"{self.vocab_size} must equal model.num_classes="
                                       f"{self.num_classes} (or leave it out)")
        if self.moe is not None:
            yield "model.moe", ("a vision transformer with a mixture of experts is not "
                                "simulated yet (allowed: null)")
        if self.num_classes % s.parallel.tensor:
            yield "model.num_classes", (
                f"{self.num_classes} must be a multiple of parallel.tensor="
                f"{s.parallel.tensor} (the class head is split across tensor-parallel ranks)")
        yield from super().problems(s)

    def context_problems(self, s: Scenario) -> Iterator[Problem]:
        yield "parallel.context", (
            f"{s.parallel.context}: context parallelism runs a decoder's causal ring "
            f"attention; a vision transformer's bidirectional attention is not simulated "
            f"with it (allowed: 1)")

    def tensor_nd_problems(self, s: Scenario, nd: list[int]) -> Iterator[Problem]:
        yield "parallel.tensor_nd", (
            f"{nd}: {len(nd)}-D tensor parallel of a vision transformer is not simulated "
            f"yet (remove the key; parallel.tensor splits it as Megatron-LM does)")


class MlpModel(ModelConfig):
    """A stack of fully connected layers: input -> hidden x layers -> classes, softmax loss."""

    one_block: ClassVar[bool] = True
    units_key: ClassVar[str] = "model.layers"
    family_module: ClassVar[str] = "mlp"

    type: Literal["mlp"] = Field(description="Model type: fully connected layers.")
    layers: Layers = Field(description="Hidden fully connected layers.")
    hidden_size: Count = Field(description="Width of each hidden layer, in elements.")
    input_size: Count | None = Field(default=None, description="Input features; null: hidden_size.")
    num_classes: Vocab | None = Field(
        default=None, description="Output classes of the softmax loss; null: hidden_size.")
    activation: Literal["relu", "gelu"] = Field(
        default="relu", description="Activation after each hidden layer.")
    dtype: Dtype = Field(
        default="fp32", description="Compute dtype of the weights and activations.")

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
    family_module: ClassVar[str] = "resnet"

    type: Literal["resnet"] = Field(
        description="Model type: Conv2D+ReLU layers, then fully connected layers.")
    conv_layers: Layers = Field(default=2, description="Conv2D+ReLU layers.")
    in_channels: Count = Field(default=3, description="Channels of the input image.")
    channels: Count = Field(default=16, description="Output channels of each convolution.")
    image_size: Count = Field(
        default=8, description="Height and width of the input image, in pixels.")
    kernel_size: Layers = Field(
        default=3, description="Height and width of each convolution's kernel, in pixels.")
    fc_layers: Layers = Field(
        default=2, description="Fully connected layers after the convolutions.")
    hidden_size: Count = Field(
        default=64, description="Width of each hidden fully connected layer, in elements.")
    num_classes: Vocab = Field(default=10, description="Output classes of the softmax loss.")
    dtype: Dtype = Field(
        default="fp32", description="Compute dtype of the weights and activations.")

    def pipeline_units(self) -> int:
        """Units a pipeline cuts it into: its conv and FC layers."""
        return self.conv_layers + self.fc_layers

    def problems(self, s: Scenario) -> Iterator[Problem]:
        yield from no_experts(s)
        yield from unit_pipeline(s, self.pipeline_units(), self.units_key)


class GraphTensor(_Closed):
    """A named tensor of an explicit graph. `kind` says where its values come from."""

    name: StrictStr = Field(
        description="Tensor name, as the operators' inputs and outputs refer to it.")
    shape: Annotated[list[Dim], Field(max_length=16)] = Field(
        description="Dimensions, in elements (an input's or label's first dim is its batch).")
    kind: Literal["input", "parameter", "label"] = Field(default="input", description=(
        "Where its values come from: input (data), parameter (a trained weight) or label."))


class GraphOp(_Closed):
    """One operator of an explicit graph, optionally with a sharding strategy.

    `strategy` is MindSpore's in_strategy: one tuple per input, each number the count of
    slices of that dimension; `out_strategy` likewise for the output. `placements` is the
    SBP form: one list per input and one for the output under key `out`, each with one
    placement per mesh axis (`S(d)`, `B`, `P`).
    """

    name: StrictStr = Field(description="Operator name, unique in the graph.")
    type: StrictStr = Field(
        description="Operator type, such as MatMul, Add, ReLU, Conv2D or SoftmaxCrossEntropy.")
    inputs: list[StrictStr] = Field(description="Names of the input tensors, in order.")
    output: StrictStr = Field(description="Name of the output tensor.")
    attrs: dict[str, Any] = Field(default_factory=dict, description=(
        "Operator attributes (such as shape, axes), and recompute, pipeline_stage, "
        "primitive_target."))
    strategy: list[list[Degree]] | None = Field(default=None, description=(
        "MindSpore in_strategy: per input, the slices of each dim; null: chosen (parallel.mode "
        "auto) or data parallel."))
    out_strategy: list[list[Degree]] | None = Field(
        default=None, description="MindSpore out_strategy: the slices of each output dim.")
    placements: dict[str, list[StrictStr]] | None = Field(default=None, description=(
        "SBP form of the strategy: per input tensor (by name) and for the output (key out), one "
        "placement per mesh axis: S(d), B or P."))


class GraphModel(ModelConfig):
    """An operator graph written out in YAML; the loss is the output of the last op."""

    writes_ops: ClassVar[bool] = True
    units_key: ClassVar[str] = "operators in model.ops"
    family_module: ClassVar[str] = "opgraph"

    type: Literal["graph"] = Field(description=(
        "Model type: an operator graph written out; the loss is the last operator's output."))
    mesh: dict[str, Degree] | None = Field(default=None, description=(
        "Device mesh: axis name to size, in order, multiplying to the devices of a pipeline "
        "stage; null: one axis per prime factor of the devices."))
    tensors: list[GraphTensor] = Field(
        description="The graph's tensors: inputs, parameters and labels.")
    ops: list[GraphOp] = Field(description="The operators, in execution order.")
    dtype: Dtype = Field(
        default="fp32", description="Compute dtype of the weights and activations.")

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
    TransformerModel | MlpModel | ResnetModel | GraphModel | VitModel,
    Field(discriminator="type")
]


def model_classes() -> tuple[type[ModelConfig], ...]:
    """The schema classes of every `model.type`, in the order of `ModelSpec`."""
    return typing.get_args(typing.get_args(ModelSpec)[0])


def model_class(type_name: object) -> type[ModelConfig] | None:
    """The schema class of `model.type` `type_name` (None: no such type), for code that
    reads a model section before it is validated."""
    for cls in model_classes():
        if typing.get_args(cls.model_fields["type"].annotation) == (type_name,):
            return cls
    return None
