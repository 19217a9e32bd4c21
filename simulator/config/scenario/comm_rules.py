"""Rules of the communication options (`parallel.recompute_comm`, `parallel.comm_subgraph`):
a value that would change nothing is refused with the key and what it needs. The rules that
need the planned graph (`enable_alltoall: false` without an all-to-all, `recompute_comm.
tensor: false` on a region without a model-parallel collective) are judged where the plan
is built (`simulator.program.comm_options`)."""

from __future__ import annotations

from collections.abc import Iterator

from simulator.config.scenario.rule_helpers import Problem
from simulator.config.scenario.schema import Scenario

__all__ = ["recompute_comm", "comm_subgraph", "keeps_tensor_outputs", "keeps_gathered_params"]

def keeps_tensor_outputs(recompute: str) -> bool:
    """Whether `recompute_comm.tensor: false` has a recomputed region to act on."""
    return recompute != "none"


def keeps_gathered_params(recompute: str, shard: int, data: int) -> bool:
    """Whether `recompute_comm.optimizer: false` has a re-gather to save: full recompute of
    ZeRO-3 shards over more than one data-parallel rank."""
    return recompute == "full" and shard == 3 and data > 1


def recompute_comm(s: Scenario) -> Iterator[Problem]:
    """`tensor: false` needs a recompute; `optimizer: false` needs the all-gather of
    sharded parameters (`optimizer_shard: 3`, data > 1) inside the recomputed region
    (`recompute: full`; selective recomputes the attention core, which reads no parameter)."""
    p = s.parallel
    rc = p.recompute_comm
    per_op = bool(s.model.recomputed_ops())
    if not rc.tensor and not keeps_tensor_outputs(p.recompute) and not per_op:
        yield "parallel.recompute_comm.tensor", (
            "false keeps the outputs of the recomputed ops' model-parallel collectives; it "
            "needs parallel.recompute selective or full, or operators with attrs.recompute "
            "true (found none; allowed here: true)")
    if rc.optimizer or keeps_gathered_params(p.recompute, p.optimizer_shard, p.data):
        return
    needs = [f"parallel.recompute full (found {p.recompute})" if p.recompute != "full" else "",
             f"parallel.optimizer_shard 3 (found {p.optimizer_shard})"
             if p.optimizer_shard != 3 else "",
             f"parallel.data > 1 (found {p.data})" if p.data == 1 else ""]
    yield "parallel.recompute_comm.optimizer", (
        "false keeps the optimizer-parallel all-gather of the parameters the recomputed "
        "ops read; it needs " + ", ".join(n for n in needs if n) + " (allowed here: true)")


def comm_subgraph(s: Scenario) -> Iterator[Problem]:
    """Communication subgraph reuse needs communication: more than one device."""
    if "comm_subgraph" in s.parallel.model_fields_set and s.devices == 1:
        yield "parallel.comm_subgraph", (
            "given on a single device, which runs no communication operator to compile or "
            "reuse (allowed: leave it out)")
