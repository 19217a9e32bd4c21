"""The search space of the scenarios the dense-transformer estimate does not cover (a
mixture of experts, context parallelism, 2-D / 3-D tensor parallelism, a parameter server,
mlp / resnet models, operator graphs): configurations as `--set` items, each validated by
the scenario's own rules and timed by the event engine, with no closed-form estimate.

The space, per family:

- layered models: every split of the devices into data x tensor x pipeline x context
  (context where the scenario uses it), the expert degree (dividing data and the experts)
  where the model has experts, the 2-D / 3-D grid of the tensor devices (every ordered
  factorisation into the scenario's number of axes) where it uses one; then, on the best
  splits, the micro-batch size, the schedule (gpipe, 1f1b, interleaved, zero-bubble),
  sequence parallelism, recompute, ZeRO stage and optimizer offload;
- operator graphs: each data degree (replicas of the model's mesh) times each key
  operator's strategy (those the file shards) as written or left to sharding
  propagation, then optimizer parallel, fusion buckets and recompute (MindSpore's
  workflow: shard a few key operators, let propagation do the rest, scale data parallel;
  `planner.graph_space`).

The search simulates the splits first (with the scenario's own memory knobs), then the
knobs on the `_KEEP` best splits, within `max_simulations`: a plan it returns was simulated
and fits; it is the best of what was simulated, not of the whole space.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from simulator.config.scenario.rules import check_rules
from simulator.config.scenario.schema import Scenario
from simulator.config.yamlio import apply_overrides
from simulator.errors import InputError
from simulator.planner.graph_space import graph_devices, graph_knobs, graph_splits
from simulator.planner.space import apply_config

__all__ = ["GenericConfig", "generic_splits", "knob_values", "extra_knobs", "with_items",
           "apply_generic", "lean", "fp4_recipes"]

@dataclass(frozen=True, order=True)
class GenericConfig:
    """One configuration: the `--set` items that make it from the scenario, or (`base`, a
    dense `space.Config`) from that configuration of the scenario (a refinement)."""

    label: str
    items: tuple[str, ...]
    base: Any = field(default=None, compare=False)

    def __str__(self) -> str:
        return self.label

    def overrides(self) -> list[str]:
        return (self.base.overrides() if self.base is not None else []) + list(self.items)

    def own(self) -> dict[str, str]:
        """The items this configuration sets beyond its base."""
        return {item.partition("=")[0]: item.partition("=")[2] for item in self.items}

    def to_dict(self) -> dict[str, object]:
        return {**(self.base.to_dict() if self.base is not None else {}), **self.own()}

    def apply(self, scenario: Scenario, devices_per_node: int) -> Scenario:
        if self.base is not None:
            scenario = apply_config(scenario, self.base, devices_per_node)
        return apply_generic(scenario, GenericConfig(self.label, self.items), devices_per_node)


def _config(items: dict[str, Any], base: Any = None) -> GenericConfig:
    parts = [f"{k}={_text(v)}" for k, v in items.items()]
    short = {"parallel.data": "d", "parallel.tensor": "t", "parallel.pipeline": "p",
             "parallel.context": "c", "parallel.expert": "e", "training.micro_batch_size": "mb"}
    label = " ".join(f"{short[k]}{v}" for k, v in items.items() if k in short)
    rest = [_shown(k, v) for k, v in items.items() if k not in short and
            k != "parallel.virtual_stages" and not k.endswith(".out_strategy")]
    head = str(base) if base is not None else label
    return GenericConfig(" ".join([head, *rest]).strip() or "as written", tuple(parts), base)


def _shown(key: str, v: Any) -> str:
    """An item in a configuration's label: `ops[2]=auto` for a key operator left to
    propagation, `tensor_nd=[4,2]`, `recompute=full`..."""
    if key.startswith("model.ops["):
        return key[len("model."):].partition(".")[0] + "=auto"
    name = key.rpartition(".")[2]
    if key.startswith("parallel.offload."):
        name = "offload" if name == "optimizer_states" else f"offload_{name}"
    return f"{name}={_text(v)}"


def _text(v: Any) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    if v is None:
        return "null"
    return str(v).replace(" ", "")


def apply_generic(scenario: Scenario, cfg: GenericConfig, devices_per_node: int) -> Scenario:
    """`scenario` with the configuration's items (the cluster resized to its devices)."""
    data = scenario.model_dump(exclude_unset=True, exclude={"source"})
    out = apply_overrides(data, list(cfg.items))
    devices = _devices(out)
    per_node = min(devices_per_node, devices)
    if devices != scenario.devices:
        if not scenario.cluster.uniform:
            raise InputError(scenario.source, "cluster", "node_types, slow and jitter "
                             "describe this cluster; plan on its own devices")
        out["cluster"] = {"nodes": max(1, devices // per_node), "devices_per_node": per_node}
    out["source"] = scenario.source
    sc = Scenario.model_validate(out)
    check_rules(sc)
    return sc


def _devices(data: dict[str, Any]) -> int:
    par = data.get("parallel", {})
    if data["model"].get("type") == "graph":
        return graph_devices(data) or \
            int(data["cluster"]["nodes"]) * int(data["cluster"]["devices_per_node"])
    return math.prod(int(par.get(k, 1)) for k in ("data", "tensor", "pipeline", "context"))


def _divisors(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0]


def _grids(t: int, axes: int) -> Iterator[list[int]]:
    """Ordered factorisations of t into `axes` factors > 1."""
    if axes == 1:
        if t > 1:
            yield [t]
        return
    for a in _divisors(t):
        if a > 1:
            for rest in _grids(t // a, axes - 1):
                yield [a, *rest]


def generic_splits(scenario: Scenario, devices: int) -> list[GenericConfig]:
    """The degree splits of a layered model on `devices` devices (or, for an operator
    graph, its key operators' strategies), before validation."""
    if scenario.model.writes_ops:
        return _graph_strategies(scenario, devices)
    p, m = scenario.parallel, scenario.model
    moe = m.moe_spec()
    contexts = _divisors(devices) if p.context > 1 else [1]
    out = []
    for c in contexts:
        for t in _divisors(devices // c):
            for pp in _divisors(devices // (c * t)):
                d = devices // (c * t * pp)
                experts = [e for e in _divisors(d) if moe and moe.experts % e == 0] or [1]
                grids = [None] + list(_grids(t, len(p.tensor_nd))) if p.tensor_nd else [None]
                for e in experts:
                    for grid in grids:
                        items: dict[str, Any] = {"parallel.data": d, "parallel.tensor": t,
                                                 "parallel.pipeline": pp}
                        if p.context > 1:
                            items["parallel.context"] = c
                        if moe:
                            items["parallel.expert"] = e
                        if p.tensor_nd:
                            items["parallel.tensor_nd"] = grid
                        if t == 1 and p.sequence_parallel:  # nothing to split it over
                            items["parallel.sequence_parallel"] = False
                        out.append(_config(items))
    return out


def _graph_strategies(scenario: Scenario, devices: int) -> list[GenericConfig]:
    """Each data degree times each key operator's strategy as written or left to
    propagation (`planner.graph_space`)."""
    return [_config(items) for items in graph_splits(scenario, devices)]


def lean(split: GenericConfig) -> GenericConfig:
    """`split` with the knobs that keep memory low at little cost in time: full recompute,
    the 1f1b schedule (DualPipe holds two stages' weights, the zero-bubble ones more
    activations) and, with data parallelism, the optimizer states sharded (ZeRO-1). The
    search starts from it too where the scenario's own knobs do not fit."""
    d = int(split.own().get("parallel.data", "1"))
    items: dict[str, Any] = {"parallel.recompute": "full", "parallel.schedule": "1f1b"}
    if d > 1:
        items["parallel.optimizer_shard"] = 1
    return with_items(split, **{k.replace(".", "__"): v for k, v in items.items()})


def fp4_recipes(scenario: Scenario, hw: Any) -> list[str]:
    """The FP4 recipes (`training.fp4_recipe`) searched: both where the device has an FP4
    peak (Blackwell) and the model trains in bf16 (`rules`: FP4 GEMMs on a bf16 model)."""
    if hw is None or getattr(hw.peak_tflops, "fp4", None) is None or \
            getattr(scenario.model, "dtype", "") != "bf16":
        return []
    return ["nvfp4", "mxfp4"]


def knob_values(scenario: Scenario, split: GenericConfig, max_micro: int,
                frameworks: tuple[str, ...] = (), hw: Any = None
                ) -> list[tuple[str, list[Any]]]:
    """Per knob, the values tried on one split (one knob at a time, `generic_search`)."""
    if scenario.model.writes_ops:
        fw = [("framework", list(frameworks))] if frameworks else []
        d = int(split.own().get("parallel.data", scenario.parallel.data))
        return [*graph_knobs(d), *fw]
    base = {k: _parse(v) for k, v in split.own().items()}
    d, pp = int(base["parallel.data"]), int(base["parallel.pipeline"])
    gb = scenario.training.global_batch_size
    mbs = [b for b in _divisors(gb // d) if b <= max_micro] if gb % d == 0 else [1]
    scheds = ["1f1b"] if pp == 1 else ["1f1b", "interleaved_1f1b", "gpipe", "zb_h1"]
    if pp > 1 and pp % 2 == 0:
        scheds.append("dualpipe")
    shards = [0] if scenario.parallel.mode == "parameter_server" or d == 1 else [0, 1, 2, 3]
    sps = [False, True] if int(base["parallel.tensor"]) > 1 else []
    knobs: list[tuple[str, list[Any]]] = [
        ("training.micro_batch_size", mbs), ("parallel.schedule", scheds),
        ("parallel.recompute", ["none", "selective", "full"]),
        ("parallel.optimizer_shard", shards), ("parallel.sequence_parallel", sps),
        ("parallel.offload.optimizer_states", [False, True] + _nvme(hw))]
    return [(k, v) for k, v in knobs if v] + extra_knobs(scenario, d, pp, frameworks, hw)


def _nvme(hw: Any) -> list[Any]:
    """The NVMe tier (ZeRO-Infinity) where the profile has drives (`hw.nvme_fields` empty);
    the scenario rules keep it to ZeRO-3 candidates."""
    return ["nvme"] if hw is not None and not hw.nvme_fields else []


def extra_knobs(scenario: Scenario, d: int, pp: int, frameworks: tuple[str, ...] = (),
                hw: Any = None) -> list[tuple[str, list[Any]]]:
    """Knobs tried by simulation alone on a dense plan's best configuration too
    (`generic_search.refine`): the zero-bubble schedule and uneven stage splits of a
    pipeline, fusion buckets of a data-parallel reduction, multi-copy, offload of
    parameters and activations, and the software stacks asked for (`--framework`)."""
    knobs: list[tuple[str, list[Any]]] = []
    layers = getattr(scenario.model, "layers", None)
    if pp > 1:
        knobs.append(("parallel.schedule", ["zb_h1", "dualpipe"] if pp % 2 == 0
                      else ["zb_h1"]))
        if isinstance(layers, int) and layers % pp == 0 and layers // pp > 1:
            even = [layers // pp] * pp
            knobs.append(("parallel.pipeline_layers",
                          [[e + (i == 0) - (i == pp - 1) for i, e in enumerate(even)],
                           [e - (i == 0) + (i == pp - 1) for i, e in enumerate(even)]]))
    if d > 1:
        knobs.append(("parallel.comm_fusion.bucket_mb", [10, 100]))
    knobs += [("parallel.overlap.copies", [2]), ("parallel.offload.activations", [True]),
              ("parallel.offload.parameters", [True])]
    fp4 = fp4_recipes(scenario, hw)
    if fp4:
        knobs.append(("training.fp4_recipe", fp4))
    if frameworks:
        knobs.append(("framework", list(frameworks)))
    return knobs


def with_items(cfg: GenericConfig, **changes: Any) -> GenericConfig:
    """`cfg` with the items `changes` (dotted keys with '.' as '__') set."""
    items: dict[str, Any] = {k: _parse(v) for k, v in cfg.own().items()}
    for key, value in changes.items():
        items[key.replace("__", ".")] = value
    if items.get("parallel.schedule") == "interleaved_1f1b":
        items["parallel.virtual_stages"] = 2
    elif "parallel.schedule" in items:
        items["parallel.virtual_stages"] = 1
    return _config(items, cfg.base)


def _parse(text: str) -> Any:
    if text == "null":
        return None
    if text.startswith("[["):  # an operator strategy: kept as text (YAML reads it)
        return text
    if text in ("true", "false"):
        return text == "true"
    if text.startswith("["):
        return [int(x) for x in text.strip("[]").split(",")]
    try:
        return int(text)
    except ValueError:
        return text
