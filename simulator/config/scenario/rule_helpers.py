"""What every rule module shares: a problem is (dotted key, message); `divisors` and
`must_divide` word the hints; `no_experts` is the rule of every model without experts."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from simulator.config.scenario.schema import Scenario

__all__ = ["Problem", "divisors", "must_divide", "stage_count_problem", "fused_collectives",
           "no_experts"]

Problem = tuple[str, str]


def divisors(n: int, limit: int = 8) -> str:
    """'1, 2, 4, 8, ...' : the first `limit` divisors of n, for hints."""
    ds = [d for d in range(1, n + 1) if n % d == 0]
    text = ", ".join(str(d) for d in ds[:limit])
    return text + (", ..." if len(ds) > limit else "")


def must_divide(key: str, value: int, other_key: str, other: int) -> Iterator[Problem]:
    if other % value:
        yield key, (
            f"{value} must divide {other_key}={other} (valid: {divisors(other)})"
        )


def stage_count_problem(given: list[int], chunks: int, total: int, noun: str,
                        expected: str) -> Problem | None:
    """The problem of per-stage counts (`parallel.pipeline_layers`) that are not one per
    virtual stage or do not add up to the `total` `noun` (`expected` names the total)."""
    if len(given) != chunks:
        return "parallel.pipeline_layers", (
            f"has {len(given)} entries; expected one per virtual stage, "
            f"parallel.pipeline*virtual_stages = {chunks}")
    if sum(given) != total:
        return "parallel.pipeline_layers", (
            f"adds up to {sum(given)} {noun}; expected {expected} = {total}")
    return None


def fused_collectives(shard: int) -> dict[str, bool]:
    """Which gradient collectives `parallel.comm_fusion` can fuse at ZeRO stage `shard`:
    all-reduce without sharding, reduce-scatter and all-gather at 1 and 2; none at 3 (one
    unit at a time)."""
    return {"all_reduce": shard == 0, "reduce_scatter": shard in (1, 2),
            "all_gather": shard in (1, 2)}


def no_experts(s: Scenario) -> Iterator[Problem]:
    """A model without a mixture of experts (`moe_spec()` None) has no experts to split."""
    if s.parallel.expert != 1:
        yield "parallel.expert", (
            f"{s.parallel.expert} needs a mixture-of-experts transformer (model.moe: {{experts, "
            f"top_k, capacity_factor, every}}); a model of type '{s.model.type}' without "
            f"model.moe has no experts to split (allowed: 1)")
    if s.parallel.expert_tensor is not None:
        yield "parallel.expert_tensor", (
            f"{s.parallel.expert_tensor} needs a mixture-of-experts transformer (model.moe); "
            f"a model of type '{s.model.type}' without model.moe has no experts (remove the "
            f"key)")
