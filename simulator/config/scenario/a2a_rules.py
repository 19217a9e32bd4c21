"""Rules of `parallel.overlap.moe_a2a` (Megatron-Core's overlap_moe_expert_parallel_comm):
refused where Megatron-Core refuses it, with its reason. Its checks are the asserts of
`TransformerConfig.__post_init__` (megatron/core/transformer/transformer_config.py, under
`if self.overlap_moe_expert_parallel_comm:`) and the schedules that call the combined
forward-backward step (megatron/core/pipeline_parallel/schedules.py:
forward_backward_no_pipelining and forward_backward_pipelining_with_interleaving, through
combined_1f1b.py); what shardsim does not simulate beside it is refused as not simulated."""

from __future__ import annotations

from collections.abc import Iterator

from simulator.config.scenario.schema import Scenario

__all__ = ["moe_a2a"]

Problem = tuple[str, str]
_KEY = "parallel.overlap.moe_a2a"


def moe_a2a(s: Scenario) -> Iterator[Problem]:
    """The first reason `moe_a2a: true` cannot run this scenario, if any."""
    p = s.parallel
    if not p.overlap.moe_a2a:
        return
    problem = _expert(s) or _schedule(s) or _rest(s)
    if problem is not None:
        yield problem


def _expert(s: Scenario) -> Problem | None:
    """Megatron-Core: 'overlap_moe_expert_parallel_comm is only supported with expert model
    parallelism' (expert_model_parallel_size > 1)."""
    if s.parallel.expert > 1:
        return None
    return _KEY, ("true overlaps the expert-parallel all-to-all of one micro-batch with "
                  "another's compute; it needs parallel.expert > 1 (found 1), as "
                  "Megatron-Core's overlap_moe_expert_parallel_comm does (allowed: false)")


def _schedule(s: Scenario) -> Problem | None:
    """Megatron-Core pairs forwards and backwards in forward_backward_no_pipelining
    (pipeline 1) and in the interleaved schedule: with pipeline > 1 it asserts
    'virtual_pipeline_model_parallel_size must be specified'."""
    p = s.parallel
    if p.pipeline == 1 and p.schedule == "1f1b":
        return None
    if p.pipeline > 1 and p.schedule == "interleaved_1f1b":
        return None
    found = f"parallel.pipeline {p.pipeline}, schedule {p.schedule}"
    return _KEY, (f"true pairs the forward and backward of 1F1B's steady state, which "
                  f"Megatron-Core runs without a pipeline (schedule 1f1b, pipeline 1) or with "
                  f"the interleaved schedule (it needs virtual_pipeline_model_parallel_size "
                  f"with pipeline > 1: schedule interleaved_1f1b); found {found}")


def _rest(s: Scenario) -> Problem | None:
    """Megatron-Core's other asserts (no full recompute, bf16/fp16 models, at most one MTP
    layer) and multi-copy, which is not simulated with it."""
    p, m = s.parallel, s.model
    if p.recompute == "full":
        return "parallel.recompute", (
            "full with parallel.overlap.moe_a2a: Megatron-Core asserts 'disable full "
            "recomputation when enabling overlap_moe_expert_parallel_comm' (allowed: none, "
            "selective)")
    if getattr(m, "dtype", None) == "fp32":
        return "model.dtype", (
            "fp32 with parallel.overlap.moe_a2a: Megatron-Core asserts "
            "'overlap_moe_expert_parallel_comm is only supported with bf16 or fp16 model' "
            "(allowed: bf16, fp16, fp8)")
    mtp = getattr(m, "mtp", None)
    if mtp is not None and mtp.depth > 1:
        return "model.mtp.depth", (
            f"{mtp.depth} with parallel.overlap.moe_a2a: Megatron-Core asserts 'MTP supports "
            f"at most one layer when enabling overlap_moe_expert_parallel_comm' (allowed: 1)")
    if p.overlap.copies > 1:
        return "parallel.overlap.copies", (
            f"{p.overlap.copies} with parallel.overlap.moe_a2a is not simulated (allowed: 1)")
    return None
