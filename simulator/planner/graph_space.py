"""The search space of an operator graph (`type: graph`), as `--set` items: MindSpore's
workflow -- shard a few key operators, let propagation (or the data-parallel default) do
the rest, then scale data parallel. Each split is a data-parallel degree (replicas of the
model's mesh, `parallel.data`) times each subset of the key operators (those the file
shards, up to 6) left to propagation; on the best splits with replicas, optimizer
parallel (`parallel.optimizer_shard`) and the fusion buckets of the replicas' gradient
reduction (`parallel.comm_fusion.bucket_mb`), with recompute.

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


def _degrees(scenario: Scenario, devices: int) -> list[tuple[int, dict[str, int] | None]]:
    """(data degree, model.mesh to write or None to keep the scenario's) for `devices`."""
    m: Any = scenario.model
    pp = scenario.parallel.pipeline
    if devices % pp:
        return []
    stage = devices // pp
    if m.mesh is not None:
        inner = math.prod(m.mesh.values())
        return [(stage // inner, None)] if stage % inner == 0 else []
    out: list[tuple[int, dict[str, int] | None]] = []
    for d in (k for k in range(1, stage + 1) if stage % k == 0):
        out.append((d, None if devices == scenario.devices else _prime_axes(stage // d)))
    return out


def graph_splits(scenario: Scenario, devices: int) -> list[dict[str, Any]]:
    """The items of every split: a data degree times the key operators left open."""
    model: Any = scenario.model
    keys = [i for i, op in enumerate(model.ops) if op.strategy is not None][:MAX_KEY_OPS]
    out = []
    for d, mesh in _degrees(scenario, devices):
        for free in itertools.product((False, True), repeat=len(keys)):
            items: dict[str, Any] = {"parallel.data": d} if d > 1 or \
                scenario.parallel.data > 1 else {}
            if mesh is not None:
                # JSON-style keys: YAML reads `{"m0":2}` without the spaces labels drop
                items["model.mesh"] = "{" + ",".join(f'"{k}":{v}' for k, v in mesh.items()) + "}"
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
