"""The `model` section of the scenario schema: one class per `model.type` (the discriminator
of `ModelSpec`)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, StrictFloat, StrictInt, StrictStr

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

__all__ = ["MoeSpec", "TransformerModel", "MlpModel", "ResnetModel", "GraphTensor", "GraphOp",
           "GraphModel", "ModelSpec"]


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

