"""The search space of an operator graph (`type: graph`), as `--set` items: MindSpore's
workflow -- shard a few key operators, let propagation (or the data-parallel default) do
the rest, then scale data parallel. Each split is a data-parallel degree (replicas of the
model's mesh, `parallel.data`) times each subset of the key operators (those the file
shards, up to 6) left to propagation, and each pipeline degree (up to the operators'
count, with p or 2p micro-batches sharing the global batch) where no operator names its
stage; on the best splits with replicas, optimizer parallel (`parallel.optimizer_shard`)
and the fusion buckets of the replicas' gradient reduction
(`parallel.comm_fusion.bucket_mb`), with recompute.

The degrees: with `model.mesh` written, the one that the devices leave around it
(devices / (pipeline * mesh)); without, every divisor of a pipeline stage's devices (the
rest is the mesh of prime factors the strategies map onto). On another device count
(`plan --devices`) a mesh-less graph's mesh is written out as those prime factors, so that
the configuration names its device count."""

from __future__ import annotations

import itertools
import math
from typing import Any

from simulator.config.scenario.schema import Scenario

__all__ = ["graph_splits", "graph_knobs", "graph_devices"]

MAX_KEY_OPS = 6


def _prime_axes(n: int) -> dict[str, int]:
    axes: dict[str, int] = {}
    p = 2
    while n > 1:
        while n % p == 0:
            axes[f"m{len(axes)}"] = p
            n //= p
        p += 1
    return axes or {"m0": 1}


def _divisors(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0]


def _degrees(scenario: Scenario, devices: int, pp: int
             ) -> list[tuple[int, dict[str, int] | None]]:
    """(data degree, model.mesh to write or None to keep the scenario's) for `devices` in
    `pp` stages."""
    m: Any = scenario.model
    if devices % pp:
        return []
    stage = devices // pp
    if m.mesh is not None:
        inner = math.prod(m.mesh.values())
        return [(stage // inner, None)] if stage % inner == 0 else []
    same = devices == scenario.devices and pp == scenario.parallel.pipeline
    return [(d, None if same else _prime_axes(stage // d)) for d in _divisors(stage)]


def _pipelines(scenario: Scenario, devices: int) -> list[tuple[int, int]]:
    """(pipeline degree, micro-batches) pairs: the scenario's own, and where no operator
    names its stage (`attrs.pipeline_stage`), every degree up to the operators' count
    with p and 2p micro-batches that divide the global batch (no pipeline: the
    scenario's own micro-batches, its gradient accumulation)."""
    p = scenario.parallel
    own = (p.pipeline, p.micro_batches)
    model: Any = scenario.model  # an operator graph
    ops = model.ops
    if any("pipeline_stage" in op.attrs for op in ops):
        return [own]
    batch = scenario.global_batch
    out = [own]
    for pp in (k for k in _divisors(devices) if k <= len(ops)):
        micro = [p.micro_batches] if pp == 1 else [m for m in (pp, 2 * pp) if batch % m == 0]
        out += [(pp, m) for m in micro if (pp, m) != own]
    return out


def _split_items(scenario: Scenario, d: int, pp: int, micro: int,
                 mesh: dict[str, int] | None) -> dict[str, Any]:
    """The items of a (data, pipeline, micro-batches, mesh) split, the global batch kept."""
    p = scenario.parallel
    items: dict[str, Any] = {"parallel.data": d} if d > 1 or p.data > 1 else {}
    if d == 1 and p.data > 1:  # no replicas: nothing to shard the optimizer over or fuse
        items.update({"parallel.optimizer_shard": 0, "parallel.comm_fusion": "{}"})
    if pp != p.pipeline:
        items["parallel.pipeline"] = pp
        if p.pipeline_layers is not None:
            items["parallel.pipeline_layers"] = None  # split by count
    if micro != p.micro_batches:
        items["parallel.micro_batches"] = micro
        if "global_batch_size" not in scenario.training.model_fields_set:
            items["training.global_batch_size"] = scenario.global_batch  # kept as it was
    if mesh is not None:
        # JSON-style keys: YAML reads `{"m0":2}` without the spaces labels drop
        items["model.mesh"] = "{" + ",".join(f'"{k}":{v}' for k, v in mesh.items()) + "}"
    return items


def graph_splits(scenario: Scenario, devices: int) -> list[dict[str, Any]]:
    """The items of every split: data x pipeline degrees times the key operators left
    open."""
    model: Any = scenario.model
    keys = [i for i, op in enumerate(model.ops) if op.strategy is not None][:MAX_KEY_OPS]
    out = []
    for pp, micro in _pipelines(scenario, devices):
        for d, mesh in _degrees(scenario, devices, pp):
            for free in itertools.product((False, True), repeat=len(keys)):
                items = _split_items(scenario, d, pp, micro, mesh)
                for i, f in zip(keys, free, strict=True):
                    if f:  # left to propagation: its out_strategy goes with its strategy
                        items[f"model.ops[{i}].strategy"] = None
                        if model.ops[i].out_strategy is not None:
                            items[f"model.ops[{i}].out_strategy"] = None
                out.append(items)
    return out


def graph_knobs(data: int) -> list[tuple[str, list[Any]]]:
    """The knobs tried on a split with `data` replicas: optimizer parallel and fusion
    buckets where there are replicas, and recompute."""
    knobs: list[tuple[str, list[Any]]] = [("parallel.recompute", ["none", "full"])]
    if data > 1:
        knobs += [("parallel.optimizer_shard", [0, 1, 2, 3]),
                  ("parallel.comm_fusion.bucket_mb", [1, 10, 100])]
    return knobs


def graph_devices(data: dict[str, Any]) -> int | None:
    """The devices an operator graph's configuration names (its model.mesh times its
    data and pipeline degrees); None where it writes no mesh (the cluster's)."""
    mesh = data["model"].get("mesh")
    if not mesh:
        return None
    par = data.get("parallel", {})
    return math.prod(int(v) for v in mesh.values()) * int(par.get("data", 1)) * \
        int(par.get("pipeline", 1))
