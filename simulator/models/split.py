"""The StageSplit: which blocks of a model sit on which virtual pipeline stage.

A pipeline cuts a model's sequence of blocks into contiguous virtual stages: a
transformer's layers (in blocks of `unit` layers: one MoE period), its embedding joining the
first stage and its head the last (Megatron-LM's split); an operator graph's units (GPipe,
Huang et al. 2019, Sec. 2: a network as a sequence of L layers partitioned into K cells):

- mlp: one unit per hidden layer (its MatMul and activation); the classifier and the loss
  join the last;
- resnet: one unit per conv block (Conv2D, ReLU, residual Add) and per FC layer (the
  flatten joins the first FC layer; the loss the last);
- graph: one unit per operator (each family's `unit_start` says where a unit begins).

The split is a value computed once per command and handed to both the lowering (`run`) and
`verify`: `simulation.stage_split` prices it on the hardware profile as `run` balances it;
without a profile the even / count-balanced split below stands. In order of precedence: the
operators' `attrs.pipeline_stage` (MindSpore's `Cell.pipeline_stage`), then
`parallel.pipeline_layers`, then the balance (an even split of a transformer's layers whose
remainder goes to the stage with the least work; a graph's units split to minimise the
slowest stage, the partition PipeDream's optimizer balances, Narayanan et al. SOSP 2019,
Sec. 3.1, without its replication).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from simulator.config.scenario.schema import Scenario
from simulator.errors import InputError
from simulator.models.opgraph import graph_model
from simulator.models.registry import family
from simulator.models.transformer import transformer_model

__all__ = ["StageSplit", "graph_units", "balanced", "unit_split", "stage_ops",
           "fixed_counts", "stage_layers", "virtual_stages", "by_count"]


@dataclass(frozen=True)
class StageSplit:
    """`counts[vs]`: copies of the model's cut sequence on virtual stage vs (a
    transformer's layer blocks of `unit` layers each, an operator graph's units)."""

    counts: tuple[int, ...]
    unit: int = 1

    @property
    def layers(self) -> tuple[int, ...]:
        """Model layers (a graph's units) of each virtual stage."""
        return tuple(n * self.unit for n in self.counts)


def virtual_stages(scenario: Scenario) -> int:
    """Virtual pipeline stages: the stages times the interleaved schedule's chunks."""
    p = scenario.parallel
    return p.pipeline * (p.virtual_stages if p.schedule == "interleaved_1f1b" else 1)


def by_count(scenario: Scenario, names: Sequence[str]) -> StageSplit:
    """The split without a hardware profile, of a model whose graph has the operators
    `names` (in order): a transformer's layers evenly (the remainder to the earliest
    stages), a graph's units as given or balanced by count."""
    parts, m = virtual_stages(scenario), scenario.model
    if family(m).layered:
        unit, layers = family(m).block_layers(m), transformer_model(m).layers
        return StageSplit(stage_layers(scenario, parts, layers // unit, 1.0, 0.0, 0.0, unit),
                          unit)
    units = graph_units(m.type, names)
    return StageSplit(unit_split(scenario, len(units), fixed_counts(scenario, names, parts),
                                 (), parts, None))


def graph_units(model_type: str, names: Sequence[str]) -> tuple[tuple[str, ...], ...]:
    """The operators (by name, in order) of each unit of a graph of `model_type` (where
    its family's `unit_start` says a unit begins)."""
    starts = family(model_type).unit_start
    units: list[list[str]] = []
    for name in names:
        if not units or starts(name):
            units.append([name])
        else:
            units[-1].append(name)
    return tuple(tuple(u) for u in units)


def balanced(weights: Sequence[float], parts: int) -> tuple[int, ...]:
    """Units per part of the contiguous split of `weights` into `parts` non-empty parts
    whose heaviest part is lightest: the least bound T that greedy packing (as many units
    as fit under T, left to right) meets in `parts` parts, found by bisection; parts left
    over split the part of most units, its last unit becoming a part of its own."""
    assert 0 < parts <= len(weights)

    def packed(bound: float) -> list[int]:
        counts, load = [0], 0.0
        for w in weights:
            if counts[-1] and load + w > bound:
                counts.append(0)
                load = 0.0
            counts[-1] += 1
            load += w
        return counts

    lo, hi = max(weights), float(sum(weights))
    for _ in range(100):
        mid = (lo + hi) / 2
        if mid <= lo or mid >= hi:
            break
        lo, hi = (lo, mid) if len(packed(mid)) <= parts else (mid, hi)
    counts = packed(hi)
    while len(counts) < parts:
        k = max(range(len(counts)), key=lambda i: (counts[i], -i))
        counts[k] -= 1
        counts.insert(k + 1, 1)
    return tuple(counts)


def unit_split(scenario: Scenario, units: int, fixed: tuple[int, ...] | None,
               spans: Sequence[tuple[str, int, int]], parts: int,
               seconds: Sequence[float] | None) -> tuple[int, ...]:
    """Units of each of `parts` virtual stages of an operator graph of `units` units:
    `fixed` (its operators' `attrs.pipeline_stage`), else `parallel.pipeline_layers`,
    else balanced on `seconds` per unit (None: equal weights). InputError where a
    parameter read by several units (`spans`: name, first unit, last unit) would be cut
    apart."""
    given = scenario.parallel.pipeline_layers
    if fixed is not None:
        counts = fixed
    elif given is not None:
        counts = tuple(given)
    else:
        counts = balanced(seconds or [1.0] * units, parts)
    assert sum(counts) == units, "the scenario rules check the split's units"
    ends = [sum(counts[:k + 1]) for k in range(len(counts))]
    for name, first, last in spans:
        a = next(k for k, end in enumerate(ends) if first < end)
        b = next(k for k, end in enumerate(ends) if last < end)
        if a != b:
            key = ("model.ops" if fixed is not None else "parallel.pipeline_layers"
                   if given is not None else "parallel.pipeline")
            raise InputError(scenario.source, key, (
                f"parameter {name!r} is read on pipeline stages {a} and {b}; each stage "
                f"holds its own parameters: keep its readers on one stage"))
    return counts


def stage_ops(units: tuple[tuple[str, ...], ...], counts: tuple[int, ...]
              ) -> dict[str, int]:
    """{operator name: virtual stage} of a split."""
    out: dict[str, int] = {}
    start = 0
    for vs, n in enumerate(counts):
        for names in units[start:start + n]:
            for op in names:
                out[op] = vs
        start += n
    return out


def fixed_counts(scenario: Scenario, names: Sequence[str], parts: int
                 ) -> tuple[int, ...] | None:
    """Units (operators) per virtual stage from `attrs.pipeline_stage` of a graph model's
    operators (an operator without it stays on the stage of the one before; the scenario
    rules have checked the stages), or None when no operator gives one."""
    if not family(scenario.model).writes_ops:
        return None
    m = graph_model(scenario.model)
    if not any("pipeline_stage" in op.attrs for op in m.ops):
        return None
    stage_of: dict[str, int] = {}
    current = 0
    for op in m.ops:
        current = op.attrs.get("pipeline_stage", current)
        stage_of[op.name] = current
    stages = [stage_of[n] for n in names]
    return tuple(stages.count(v) for v in range(parts))


def stage_layers(scenario: Scenario, stages: int, total: int, layer_s: float,
                 embed_s: float, head_s: float, unit: int = 1) -> tuple[int, ...]:
    """Copies of a repeated block (`unit` layers each) on each virtual stage, of `total`:
    as `parallel.pipeline_layers` gives them, or an even split with the remainder placed
    one copy at a time on the stage whose work (seconds per micro-batch: its copies, plus
    the blocks pinned to the first and the last stage) is least, earliest on ties."""
    given = scenario.parallel.pipeline_layers
    if given is not None:
        return tuple(n // unit for n in given)
    counts = [total // stages] * stages
    extra = [0.0] * stages
    extra[0] += embed_s
    extra[-1] += head_s
    for _ in range(total % stages):
        k = min(range(stages), key=lambda i: (counts[i] * layer_s + extra[i], i))
        counts[k] += 1
    return tuple(counts)
