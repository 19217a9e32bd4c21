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

from pydantic import ConfigDict, Field, StrictFloat, model_validator

from simulator.config.scenario import dense_rules, schema_mamba, transformer_rules
from simulator.config.scenario.rule_helpers import Problem
from simulator.config.scenario.schema_mla import (
    MlaSpec,
    MtpSpec,
    mla_context,
    mla_problems,
    mla_tensor_nd,
)
from simulator.config.scenario.schema_types import (
    Count,
    DropoutP,
    Dtype,
    Layers,
    NonNegInt,
    PosFloat,
    SeqLength,
    Vocab,
)

if TYPE_CHECKING:
    from simulator.config.scenario.schema import Scenario

from simulator.config.scenario.schema_graph_models import (
    GraphModel,
    GraphOp,
    GraphTensor,
    MlpModel,
    ResnetModel,
)
from simulator.config.scenario.schema_model_base import ModelConfig, MoeSpec

__all__ = ["ModelConfig", "MoeSpec", "TransformerModel", "VitModel", "MlpModel", "ResnetModel",
           "GraphTensor", "GraphOp", "GraphModel", "ModelSpec", "model_class",
           "model_classes"]


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
    ffn_activation: Literal["gelu", "swiglu", "relu2"] = Field(default="gelu", description=(
        "FFN activation: gelu (two GEMMs, biases on every linear layer), swiglu (gated, "
        "three GEMMs, no biases) or relu2 (squared ReLU, two GEMMs, no biases: Nemotron-H)."))
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
    # hybrid state-space layers (config/scenario/schema_mamba.py): Nemotron-H's
    # hybrid_override_pattern, one character per layer, and its Mamba-2 mixers' dims
    hybrid_pattern: str | None = Field(default=None, description=(
        "Kind of each layer, one character per layer: M a Mamba-2 mixer, * self-attention, "
        "- an MLP (Nemotron-H's hybrid_override_pattern); null: attention and FFN in every "
        "layer."))
    mamba: schema_mamba.MambaSpec | None = Field(default=None, description=(
        "Dimensions of the Mamba-2 mixers of hybrid_pattern's M layers; null: Mamba-2's "
        "defaults."))
    mla: MlaSpec | None = Field(default=None, description=(
        "Multi-head latent attention in every layer (DeepSeek-V2/V3); null: standard "
        "multi-head or grouped-query attention."))
    mtp: MtpSpec | None = Field(default=None, description=(
        "Multi-token prediction modules after the last layer (DeepSeek-V3); null: none."))

    # dense transformer fidelity (docs/techniques/attention-variants.md). Keys left null
    # take the architecture's value: a swiglu (Llama-style) model unties its LM head, rotates
    # its queries and keys (RoPE) with no position table and normalises with RMSNorm, as
    # Llama, Mistral, Qwen and DeepSeek do (HF LlamaConfig tie_word_embeddings false,
    # LlamaRotaryEmbedding, LlamaRMSNorm); a gelu (GPT-style) model ties its head to the
    # embedding and adds a learned position table before LayerNorm blocks (GPT-2/3,
    # Megatron-LM's defaults). A model that differs (Gemma ties its head; MPT uses ALiBi,
    # no position table; Nemotron-4 unties) says so.
    head_dim: Count | None = Field(default=None, description=(
        "Width of one attention head; null: hidden_size / num_heads. Queries are "
        "num_heads x head_dim wide, keys and values num_kv_heads x head_dim (Qwen3, Gemma-3 "
        "set their own)."))
    tie_embeddings: bool | None = Field(default=None, description=(
        "Whether the LM head reuses the token embedding; null: by architecture (false for "
        "swiglu models, true for gelu and relu2 models)."))
    position: Literal["rope", "learned", "none"] | None = Field(default=None, description=(
        "Positions: rope (rotary, on queries and keys, no table), learned (a table added "
        "to the embedding) or none (ALiBi or NoPE: nothing priced); null: rope for swiglu "
        "models, learned for gelu and relu2 models."))
    rope_theta: PosFloat = Field(default=10000.0, description=(
        "Base of the rotary angles (Hugging Face rope_theta; 500000 in Llama 3)."))
    yarn_factor: Annotated[StrictFloat, Field(gt=1, le=1e6, allow_inf_nan=False)] | None = \
        Field(default=None, description=(
            "YaRN context extension of the rotary positions (Hugging Face rope_scaling with "
            "rope_type yarn: its factor; GPT-OSS 32): the angles are interpolated and cos and "
            "sin scaled by 0.1 ln(factor) + 1, which stacks without a fused kernel for that "
            "scale run as element-wise ops (docs/techniques/yarn-rope.md); null: plain RoPE."))
    norm: Literal["rmsnorm", "layernorm"] | None = Field(default=None, description=(
        "Norm of every block and of the final norm: rmsnorm (gain only) or layernorm (gain "
        "and shift); null: rmsnorm for swiglu models, layernorm for gelu and relu2 models."))
    qkv_bias: bool = Field(default=False, description=(
        "Biases on the query, key and value projections of a model without other biases "
        "(Qwen2)."))
    qk_norm: bool = Field(default=False, description=(
        "An RMSNorm of every query and key head before the rotation (Qwen3, Gemma-3)."))
    sliding_window: Count | None = Field(default=None, description=(
        "Sliding-window attention: each query attends to the last sliding_window tokens, "
        "itself included; null: every earlier token."))
    global_every: NonNegInt = Field(default=0, description=(
        "With sliding_window: every global_every-th layer (the last of each group) attends "
        "to every earlier token (GPT-OSS 2, Gemma-3 6); 0: every layer windowed."))
    attention_sinks: bool = Field(default=False, description=(
        "A learned sink logit per head in the attention softmax (GPT-OSS)."))

    @property
    def ffn(self) -> int:
        return self.ffn_hidden_size or 4 * self.hidden_size

    @property
    def kv_heads(self) -> int:
        return self.num_kv_heads or self.num_heads

    @property
    def head_size(self) -> int:
        """The width of one attention head (`head_dim`, or hidden / heads)."""
        return self.head_dim or self.hidden_size // self.num_heads

    @property
    def tied(self) -> bool:
        """Whether the LM head is the embedding (`tie_embeddings`, by architecture)."""
        if self.tie_embeddings is not None:
            return self.tie_embeddings
        return self.ffn_activation != "swiglu"

    @property
    def positions(self) -> str:
        """'rope', 'learned' or 'none' (`position`, by architecture)."""
        return self.position or ("rope" if self.ffn_activation == "swiglu" else "learned")

    @property
    def norm_kind(self) -> str:
        """'rmsnorm' or 'layernorm' (`norm`, by architecture)."""
        return self.norm or ("rmsnorm" if self.ffn_activation == "swiglu" else "layernorm")

    def layer_window(self, layer: int) -> int:
        """The attention window of layer `layer` (from 0; 0: every earlier token)."""
        if self.sliding_window is None:
            return 0
        full = self.global_every and (layer + 1) % self.global_every == 0
        return 0 if full else self.sliding_window

    def moe_spec(self) -> MoeSpec | None:
        return self.moe

    def graph_dims(self) -> dict[str, Any]:
        """Fields of its graph's dimensions (`graph.builders.GptDims`) beyond those every
        transformer has (`models.transformer_plan.model_dims`): a hybrid model's Mamba-2
        dims, none for a GPT decoder."""
        return schema_mamba.mamba_graph_dims(self)

    def problems(self, s: Scenario) -> Iterator[Problem]:
        yield from transformer_rules.shape(self, s)
        yield from transformer_rules.experts(self, s)
        yield from dense_rules.attention(self, s)
        yield from schema_mamba.hybrid_problems(self, s)
        yield from mla_problems(self, s)

    def context_problems(self, s: Scenario) -> Iterator[Problem]:
        yield from schema_mamba.hybrid_context_problems(self, s)
        yield from mla_context(self, s)
        yield from transformer_rules.context(self, s)

    def tensor_nd_problems(self, s: Scenario, nd: list[int]) -> Iterator[Problem]:
        yield from schema_mamba.hybrid_tensor_nd_problems(self, s)
        yield from mla_tensor_nd(self, s, nd)
        yield from transformer_rules.tensor_nd(self, s, nd)


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
        yield from dense_rules.vit(self)
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
