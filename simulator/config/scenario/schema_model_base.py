"""The base of the scenario schema's model types (`ModelConfig`: the capabilities and rule
hooks every model family answers) and the mixture-of-experts section."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated, ClassVar

from pydantic import Field, StrictFloat, StrictInt

from simulator.config.scenario.rule_helpers import Problem, no_experts
from simulator.config.scenario.schema_types import (
    Layers,
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
