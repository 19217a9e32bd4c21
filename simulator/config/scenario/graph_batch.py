"""The batch and the data-parallel degree of an operator graph (`type: graph`): its batch
per micro-batch is its first input's first dim as written, or
`training.global_batch_size / parallel.micro_batches` where the key is given (every input's
and label's first dim then scales by the same factor; `models.graph_batch` rescales the
graph, Reshape targets included), and `parallel.data` replicates its mesh, each replica
taking 1/data of that batch (`sharding.outer_axis`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from simulator.config.scenario.rule_helpers import Problem, divisors

if TYPE_CHECKING:
    from simulator.config.scenario.schema import Scenario
    from simulator.config.scenario.schema_graph_models import GraphModel

__all__ = ["problems", "batch_dims"]


def _written(m: GraphModel) -> int:
    return next((t.shape[0] for t in m.tensors if t.kind == "input" and t.shape), 1)


def batch_dims(m: GraphModel, s: Scenario) -> list[tuple[str, int]]:
    """(key, first dim) of each input and label as the run sees them (rescaled to the
    global batch where `training.global_batch_size` is given and keeps them whole)."""
    b0, b = _written(m), _per_micro(m, s)
    return [(f"model.tensors[{i}].shape", t.shape[0] * b // b0)
            for i, t in enumerate(m.tensors) if t.kind in ("input", "label") and t.shape]


def _given(s: Scenario) -> bool:
    return "global_batch_size" in s.training.model_fields_set


def _per_micro(m: GraphModel, s: Scenario) -> int:
    if _given(s):
        return s.training.global_batch_size // s.parallel.micro_batches
    return _written(m)


def _global_batch(model: GraphModel, s: Scenario) -> Iterator[Problem]:
    gb, m, b0 = s.training.global_batch_size, s.parallel.micro_batches, _written(model)
    if gb % m:
        yield "training.global_batch_size", (
            f"{gb} must be a multiple of parallel.micro_batches={m} (each micro-batch runs "
            f"the graph on global_batch_size/micro_batches samples)")
        return
    for i, t in enumerate(model.tensors):
        if t.kind in ("input", "label") and t.shape and (t.shape[0] * (gb // m)) % b0:
            yield "training.global_batch_size", (
                f"{gb} gives {gb // m} samples per micro-batch, which scales "
                f"model.tensors[{i}] ({t.name}, first dim {t.shape[0]} for a written batch "
                f"of {b0}) to a fraction: give a multiple of {b0 // _gcd(b0, t.shape[0]) * m}")
            return


def _gcd(a: int, b: int) -> int:
    while b:
        a, b = b, a % b
    return a


def _replicas(m: GraphModel, s: Scenario) -> Iterator[Problem]:
    p = s.parallel
    per_stage = s.devices // p.pipeline if s.devices % p.pipeline == 0 else s.devices
    if per_stage % p.data:
        yield "parallel.data", (f"{p.data} must divide the {per_stage} devices of a "
                                f"pipeline stage (valid: {divisors(per_stage)})")
        return
    if m.mesh is not None and "dp" in m.mesh:
        yield "model.mesh", ("an axis named dp with parallel.data > 1: the replicas of "
                             "parallel.data are the outer mesh axis dp; rename the axis")
        return
    if isinstance(p.dataset_strategy, list):
        yield "parallel.dataset_strategy", (
            "slices per dim with parallel.data > 1 are not simulated yet (their numbers "
            "take model.mesh's axes; allowed with replicas: data_parallel, full_batch)")
    b = _per_micro(m, s)
    if b % p.data:
        where = "training.global_batch_size" if _given(s) else "parallel.data"
        valid = ", ".join(str(d) for d in range(1, b + 1) if b % d == 0 and per_stage % d == 0)
        yield where, (f"{p.data} replicas cannot share a batch of {b} samples per "
                      f"micro-batch evenly (each takes 1/parallel.data of it; valid data: "
                      f"{valid})")


def problems(m: GraphModel, s: Scenario) -> Iterator[Problem]:
    """A global batch that leaves some input's first dim or the micro-batches fractional,
    and replicas that do not divide the devices, clash with model.mesh's axis names, or
    cannot share the batch."""
    if _given(s):
        found = list(_global_batch(m, s))
        if found:
            yield from found
            return
    if s.parallel.data > 1:
        yield from _replicas(m, s)
