"""The scenario schema's operator-graph model families: `mlp`, `resnet` and `type: graph`
(operators written in the scenario), each a `ModelConfig` carrying its own capabilities and
rules (`config.scenario.schema_models`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from pydantic import Field, StrictStr

from simulator.config.scenario import graph_rules, manual_split_rules
from simulator.config.scenario.pipeline_rules import unit_pipeline
from simulator.config.scenario.rule_helpers import Problem, no_experts
from simulator.config.scenario.schema_types import (
    Count,
    Degree,
    Dim,
    Dtype,
    Layers,
    Vocab,
    _Closed,
)

if TYPE_CHECKING:
    from simulator.config.scenario.schema import Scenario

from simulator.config.scenario.schema_model_base import ModelConfig

__all__ = ["MlpModel", "ResnetModel", "GraphTensor", "GraphOp", "GraphModel"]


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
        "primitive_target, and on a Gather manual_split (the table rows of each slice of "
        "its dim 0, any positive sizes summing to its rows, one per slice, such as [10, 20, "
        "30, 4]; its strategy then splits only the ids' last dim, as many ways as the "
        "table's rows, as MindSpore's ManualImpl requires: [[4, 1], [1, 4]])."))
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
        yield from graph_rules.own_batch(self, s)
        yield from graph_rules.reductions(s)
        yield from graph_rules.pipeline(self, s)
        yield from graph_rules.copies(self, s)
        yield from manual_split_rules.manual_split(self)
