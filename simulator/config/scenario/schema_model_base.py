"""The base of the scenario schema's model types (`ModelConfig`: the capabilities and rule
hooks every model family answers) and the mixture-of-experts section."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated, ClassVar, Literal

from pydantic import Field, StrictBool, StrictFloat, StrictInt

from simulator.config.scenario.rule_helpers import Problem, no_experts
from simulator.config.scenario.schema_types import (
    Count,
    Layers,
    NonNegInt,
    _Closed,
)

if TYPE_CHECKING:
    from simulator.config.scenario.schema import Scenario

__all__ = ["MoeSpec", "ModelConfig"]


class MoeSpec(_Closed):
    """Mixture of experts in the FFN of every `every`-th layer (GShard, Lepikhin et al. 2021:
    every other layer; Switch Transformer, Fedus et al. 2022; Megatron-LM --num-experts,
    --moe-router-topk, --moe-expert-capacity-factor, --moe-layer-freq).

    experts: expert FFNs per MoE layer, each of ffn_hidden_size; top_k: experts each token
    is sent to; capacity_factor: slots per expert over an even share, per sample of
    seq_length tokens (Switch Sec. 2.2); imbalance: a what-if for `run`, the busiest
    expert-parallel rank's tokens over the mean (1: balanced routing), which scales that
    rank's expert FFNs and its dispatch/combine all-to-alls as if the capacity did not bind
    (a dropless router); `verify` routes the real tokens and ignores it.

    As trained today (Megatron-Core's MoE options; DeepSeek-V3, Liu et al. 2024,
    arXiv:2412.19437, Sec. 2.1.2): routed experts of their own width (ffn_hidden_size,
    --moe-ffn-hidden-size), shared experts every token passes through (shared_experts,
    shared_ffn_hidden_size; --moe-shared-expert-intermediate-size is their total width),
    dense leading layers (first_dense, DeepSeek's first_k_dense_replace), sigmoid or
    softmax scores (score, --moe-router-score-function) renormalised over the chosen
    experts or not (normalize_top_k, Hugging Face's norm_topk_prob) and scaled
    (scaling_factor, --moe-router-topk-scaling-factor), and dropless routing (capacity_factor
    null: Megatron-Core without --moe-expert-capacity-factor)."""

    experts: Annotated[StrictInt, Field(ge=2, le=100_000)] = Field(
        description="Expert FFNs per MoE layer, each of ffn_hidden_size.")
    top_k: Annotated[StrictInt, Field(ge=1, le=1_000)] = Field(
        default=1, description="Experts each token is sent to.")
    capacity_factor: Annotated[StrictFloat, Field(gt=0, le=1_000.0, allow_inf_nan=False)] | \
        None = Field(default=1.0, description=(
            "Slots per expert over an even share of a sample's tokens (1: exactly an even "
            "share); null: dropless, every token reaches its experts (Megatron-Core without "
            "--moe-expert-capacity-factor): run prices each expert's mean load (times "
            "imbalance), verify proves it with room for every token."))
    every: Layers = Field(default=1, description=(
        "Every every-th layer is a mixture of experts (1: every layer, 2: every other)."))
    imbalance: Annotated[StrictFloat, Field(ge=1.0, le=1_000.0, allow_inf_nan=False)] = Field(
        default=1.0, description=(
            "What-if for run: the busiest expert-parallel rank's tokens over the mean (1: "
            "balanced routing); verify ignores it."))
    ffn_hidden_size: Count | None = Field(default=None, description=(
        "FFN width of each routed expert (Megatron-Core --moe-ffn-hidden-size, Hugging "
        "Face moe_intermediate_size); null: model.ffn_hidden_size."))
    shared_experts: Annotated[StrictInt, Field(ge=0, le=1_000)] = Field(
        default=0, description=(
            "Shared experts of every MoE layer, which every token passes through beside its "
            "routed experts (DeepSeek n_shared_experts); 0: none."))
    shared_ffn_hidden_size: Count | None = Field(default=None, description=(
        "FFN width of each shared expert (Megatron-Core's "
        "--moe-shared-expert-intermediate-size is shared_experts times it); null: the "
        "routed experts' width."))
    first_dense: NonNegInt = Field(default=0, description=(
        "The first first_dense layers have a dense FFN (DeepSeek first_k_dense_replace); "
        "after them every every-th layer is a mixture of experts."))
    score: Literal["softmax", "sigmoid"] = Field(default="softmax", description=(
        "Router score function (Megatron-Core --moe-router-score-function): softmax over "
        "the experts, or each expert's sigmoid (DeepSeek-V3)."))
    normalize_top_k: bool | None = Field(default=None, description=(
        "Whether the chosen experts' scores are renormalised to sum to 1 (Hugging Face "
        "norm_topk_prob); null: when top_k > 1 (GShard, Mixtral)."))
    scaling_factor: Annotated[StrictFloat, Field(gt=0, le=1_000.0, allow_inf_nan=False)] = \
        Field(default=1.0, description=(
            "Factor on the routed experts' weights (Megatron-Core "
            "--moe-router-topk-scaling-factor; DeepSeek-V3's routed_scaling_factor 2.5)."))
    # GPT-OSS's experts (Megatron-Core TransformerConfig.activation_func_clamp_value,
    # add_bias_linear; Hugging Face swiglu_limit, GptOssExperts' biases):
    # simulator/program/clamped_glu.py prices the kernels they add
    activation_clamp: Annotated[StrictFloat, Field(gt=0, le=1e6, allow_inf_nan=False)] | \
        None = Field(default=None, description=(
            "The experts' gated activation clamps its gate half from above and its linear "
            "half to +-this value (Megatron-Core activation_func_clamp_value, Hugging Face "
            "swiglu_limit: GPT-OSS 7.0), in element-wise kernels of their own before the "
            "fused activation; null: no clamp."))
    expert_bias: StrictBool = Field(default=False, description=(
        "Every expert's projections carry biases (GPT-OSS; Megatron-Core add_bias_linear "
        "with grouped experts): the second projection's bias is added per local expert "
        "in element-wise kernels of their own; false: none."))

    @property
    def dropless(self) -> bool:
        """Whether every token reaches its experts (no capacity factor)."""
        return self.capacity_factor is None

    # where the routing weights multiply (simulator/program/moe_saved.py): on the experts'
    # outputs in the combine (GShard, Switch), or inside the experts' activation
    # (Megatron-Core >= 0.13 grouped experts, activation_func_with_probs): the same
    # function, but the combine then keeps no copy of the experts' outputs. None: as the
    # framework profile's stack does (`moe.probs_in_activation`; false where it says nothing)
    probs_in_activation: StrictBool | None = Field(default=None, description=(
        "The routing weights multiply the experts' activation output (Megatron-Core >= 0.13 "
        "grouped experts) instead of their outputs in the combine, which then keeps no copy "
        "of those outputs for the backward; false: in the combine; null (default): as the "
        "framework profile's stack does (its moe.probs_in_activation, false where absent)."))
    groups: Annotated[StrictInt, Field(ge=1, le=100_000)] = Field(default=1, description=(
        "Group-limited routing (DeepSeek-V3 n_group; Megatron-Core --moe-router-num-groups): "
        "the experts in this many groups, each token's experts chosen among its group_top_k "
        "best groups (a group scored by the sum of its two best expert scores); 1: none."))
    group_top_k: Annotated[StrictInt, Field(ge=1, le=100_000)] = Field(default=1, description=(
        "Groups each token's experts are chosen from (DeepSeek-V3 topk_group; Megatron-Core "
        "--moe-router-group-topk)."))

    def expert_ffn(self, dense_ffn: int) -> int:
        """Each routed expert's FFN width (the model's when not its own)."""
        return self.ffn_hidden_size or dense_ffn

    def shared_ffn(self, dense_ffn: int) -> int:
        """The shared experts' total FFN width (0: none): one FFN of that width computes
        their sum, as Megatron-Core's SharedExpertMLP does."""
        return self.shared_experts * (self.shared_ffn_hidden_size or
                                      self.expert_ffn(dense_ffn))

    def normalized(self) -> bool:
        """Whether the chosen experts' weights are renormalised."""
        return self.top_k > 1 if self.normalize_top_k is None else self.normalize_top_k

    def is_moe(self, layer: int) -> bool:
        """Whether layer `layer` (from 0) has experts: after the first_dense layers, every
        every-th layer, the last of each group (GShard's 1, 3, 5, ...)."""
        return layer >= self.first_dense and (layer - self.first_dense + 1) % self.every == 0


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
