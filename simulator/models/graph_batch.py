"""`training.global_batch_size` on an operator graph (`type: graph`): the graph as written
carries its batch in its inputs' shapes (the first `kind: input` tensor's first dim, per
micro-batch); a global batch B rescales it to B / `parallel.micro_batches` samples per
micro-batch. Every dim the batch runs through scales by the same factor
(`graph.batch_flow`): each input's and label's first dim, and the entry of a Reshape's
explicit target that carries the batch (a `-1` there infers itself). A Reshape whose target
does not keep the batch in one dim cannot be rescaled and is refused at its key path.

`resolved(s)` is the scenario with its model rescaled and the key consumed (left unset),
so that rescaling twice changes nothing (`models.opgraph`; `simulation.verify` slices the
rescaled model for multi-copy)."""

from __future__ import annotations

from typing import Any

from simulator.config.scenario.schema import Scenario
from simulator.errors import InputError
from simulator.graph.batch_flow import batch_flow
from simulator.sharding.graph_yaml import graph_from_model

__all__ = ["written_batch", "resolved"]


def written_batch(model: Any) -> int:
    """The batch of a graph model as written: its first input's first dim (1 without)."""
    return next((t.shape[0] for t in model.tensors if t.kind == "input" and t.shape), 1)


def _scaled(n: int, num: int, den: int, where: str, source: str) -> int:
    if (n * num) % den:
        raise InputError(source, where, (
            f"{n} cannot follow the batch from {den} to {num} samples ({n}*{num}/{den} is "
            f"not whole): give a training.global_batch_size that keeps it whole"))
    return n * num // den


def _reshape_target(op: Any, i: int, dim: int | None, num: int, den: int, source: str
                    ) -> list[int]:
    where = f"model.ops[{i}].attrs.shape"
    target = [int(n) for n in op.attrs["shape"]]
    if dim is None:
        raise InputError(source, where, (
            f"{target}: {op.name} takes the batch into no single dim of its target, so "
            f"training.global_batch_size cannot rescale it (keep the batch in a dim of its "
            f"own, or write -1 there, or give the batch in model.tensors instead)"))
    if target[dim] != -1:
        target[dim] = _scaled(target[dim], num, den, where, source)
    return target


def _rescaled_model(model: Any, num: int, den: int, source: str) -> Any:
    """`model` with its batch dims multiplied by num/den."""
    flow = batch_flow(graph_from_model(model, source))
    tensors = []
    for i, t in enumerate(model.tensors):
        if t.kind in ("input", "label") and t.shape:
            shape = [_scaled(t.shape[0], num, den, f"model.tensors[{i}].shape", source),
                     *t.shape[1:]]
            t = t.model_copy(update={"shape": shape})
        tensors.append(t)
    ops = []
    for i, op in enumerate(model.ops):
        if op.type in ("Reshape", "Flatten") and op.attrs.get("shape") is not None and \
                flow.labels.get(op.name) is not None:
            target = _reshape_target(op, i, flow.dims[op.output], num, den, source)
            op = op.model_copy(update={"attrs": {**op.attrs, "shape": target}})
        ops.append(op)
    return model.model_copy(update={"tensors": tensors, "ops": ops})


def resolved(s: Scenario) -> Scenario:
    """`s` with an operator graph's batch rescaled to `training.global_batch_size` (where
    given) and that key left unset; `s` itself otherwise."""
    t = s.training
    if not s.model.writes_ops or "global_batch_size" not in t.model_fields_set:
        return s
    per_micro = t.global_batch_size // s.parallel.micro_batches
    written = written_batch(s.model)
    model = s.model if per_micro == written else \
        _rescaled_model(s.model, per_micro, written, s.source)
    kept = t.model_dump(exclude_unset=True, exclude={"global_batch_size"})
    return s.model_copy(update={"model": model,
                                "training": type(t).model_validate(kept)})
