"""The pipeline schedule's rules of a scenario (`rules.RULES` runs them): virtual stages and
interleaving, the zero-bubble and DualPipe schedules' W pass, DualPipe's pairs of devices
and micro-batches, and the micro-batches of an operator graph's pipeline."""

from __future__ import annotations

from collections.abc import Iterator

from simulator.config.scenario.rule_helpers import Problem
from simulator.config.scenario.schema import Scenario

__all__ = ["schedule"]


def schedule(s: Scenario) -> Iterator[Problem]:
    p = s.parallel
    if p.virtual_stages > 1 and p.schedule != "interleaved_1f1b":
        yield "parallel.virtual_stages", (
            f"{p.virtual_stages} needs parallel.schedule=interleaved_1f1b "
            f"(found {p.schedule})"
        )
    if p.schedule == "interleaved_1f1b" and p.pipeline == 1:
        yield "parallel.schedule", ("interleaved_1f1b interleaves the model chunks of a "
                                    "pipeline and needs parallel.pipeline > 1 (found 1)")
    elif p.schedule == "interleaved_1f1b" and p.virtual_stages == 1:
        yield "parallel.schedule", ("interleaved_1f1b with parallel.virtual_stages 1 is 1f1b: "
                                    "give virtual_stages > 1 or schedule 1f1b")
    yield from w_pass(s)
    yield from dualpipe(s)
    if s.model.writes_ops and p.schedule != "1f1b" and (
            p.pipeline == 1 or p.micro_batches == 1):
        yield "parallel.schedule", (f"{p.schedule} orders the micro-batches of a pipeline; "
                                    f"this operator graph runs {p.micro_batches} on "
                                    f"{p.pipeline} stage(s) (allowed: 1f1b; give "
                                    f"parallel.pipeline and parallel.micro_batches > 1)")
    if not s.model.writes_ops and p.micro_batches != 1:
        yield "parallel.micro_batches", (
            f"{p.micro_batches} applies to model.type graph; a model of type "
            f"'{s.model.type}' has training.global_batch_size / (micro_batch_size * data) "
            f"micro-batches (allowed: 1)")


def w_pass(s: Scenario) -> Iterator[Problem]:
    """zb_h1, zb_h2 and dualpipe keep each micro-batch's weight-gradient inputs from its B
    to its W pass (`lower.pipeline`); what moves or remakes saved activations meanwhile is
    not simulated with them."""
    p = s.parallel
    if p.schedule not in ("zb_h1", "zb_h2", "dualpipe"):
        return
    name = p.schedule
    per_op = s.model.recomputed_ops()
    if per_op:
        yield f"model.ops[{per_op[0]}].attrs.recompute", (
            f"true with parallel.schedule {name} is not simulated yet (allowed: false)")
    if p.recompute == "full":
        yield "parallel.recompute", (f"full with parallel.schedule {name} is not simulated "
                                     "yet (the W pass needs its layers' inputs, which full "
                                     "recompute does not keep; allowed: none, selective)")
    for key in ("parameters", "activations"):
        if getattr(p.offload, key):
            yield f"parallel.offload.{key}", (f"true with parallel.schedule {name} is not "
                                              "simulated yet (allowed: false)")


def dualpipe(s: Scenario) -> Iterator[Problem]:
    """DualPipe (`lower.dualpipe`) pairs device d with device p-1-d and feeds half the
    micro-batches from each end: an even pipeline, an even count of at least 2p
    micro-batches (deepseek-ai/DualPipe `DualPipe.step` asserts both), a model cut into
    layers (a transformer's or a graph's units)."""
    p = s.parallel
    if p.schedule != "dualpipe":
        return
    if p.pipeline < 2 or p.pipeline % 2:
        yield "parallel.pipeline", (
            f"{p.pipeline} with parallel.schedule dualpipe: DualPipe pairs device d with "
            f"device p-1-d and needs an even pipeline of at least 2")
        return
    if s.model.writes_ops:
        yield "parallel.schedule", ("dualpipe is simulated for layered models (transformer, "
                                    "mlp, resnet); an operator graph's pipeline runs 1f1b")
        return
    m = s.grad_accum_steps
    if m < 2 * p.pipeline or m % 2:
        yield "training.global_batch_size", (
            f"gives {m} micro-batches (global_batch_size / (micro_batch_size * data)); "
            f"dualpipe feeds half of them from each end of the pipeline and needs an even "
            f"number of at least 2 * parallel.pipeline = {2 * p.pipeline}")
