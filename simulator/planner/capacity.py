"""Capacity planning: the Pareto front of time against memory on one cluster, the fewest
devices that meet an iteration-time target (within a budget), and the soonest training
within a budget.

The best time does not fall monotonically as devices are added (a count the model or the
batch does not split well is slower than a smaller one, and some counts have no valid
configuration at all), so no bisection can promise the fewest devices. The counts are
scanned in ascending order instead, every count a cluster of the scenario's nodes can have
(1 .. devices_per_node, then whole nodes), from the first that could meet the target at the
devices' peak (`_floor_devices`) up to `max_devices`; a count with no configuration costs
an enumeration and no simulation. The first count whose best configuration meets the
target (and the budget) is the answer: the true minimum over the counts searched
(tests/test_plan_capacity.py compares it with a scan of every count).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from simulator.config.scenario.schema import Scenario
from simulator.models.registry import family
from simulator.models.transformer import transformer_model
from simulator.planner.estimate import shared_probes
from simulator.planner.search import (
    Candidate,
    SearchOptions,
    SearchResult,
    estimated,
    search,
)
from simulator.program.model_program import memoised_programs
from simulator.simulation.budget import transformer_param_count

__all__ = ["pareto_front", "target_time_s", "CapacityResult", "fewest_devices",
           "device_hours", "device_counts", "Budget", "soonest_within"]


def pareto_front(cands: tuple[Candidate, ...] | list[Candidate]) -> list[Candidate]:
    """The simulated candidates that fit and that no other beats on both iteration time
    and peak memory, by increasing peak memory."""
    fits = sorted((c for c in cands if c.evaluation and c.evaluation.fits),
                  key=lambda c: (c.ev.peak_bytes, c.ev.iteration_time_s, c.key("time")[-1]))
    front: list[Candidate] = []
    for c in fits:
        if not front or c.ev.iteration_time_s < front[-1].ev.iteration_time_s:
            front.append(c)
    return front


def target_time_s(tokens: float, days: float, global_batch: int, seq_length: int) -> float:
    """Seconds per iteration that train `tokens` tokens in `days` days with
    global_batch x seq_length tokens per iteration."""
    iterations = tokens / (global_batch * seq_length)
    return days * 86400.0 / iterations


def device_hours(devices: int, seconds: float) -> float:
    return devices * seconds / 3600.0


@dataclass(frozen=True)
class Budget:
    """At most `limit` device-hours (or money, with `price` per device-hour) for
    `iterations` iterations."""

    limit: float
    iterations: float
    price: float | None = None

    def cost(self, devices: int, seconds: float) -> float:
        return device_hours(devices, seconds) * self.iterations * (self.price or 1.0)


@dataclass(frozen=True)
class CapacityResult:
    """Every device count searched that has a configuration (ascending), the one chosen
    (None: none met), and the counts scanned with no configuration."""

    target_s: float | None
    points: tuple[tuple[int, SearchResult], ...]
    chosen: int | None
    interrupted: bool
    no_configuration: int = 0
    budget: Budget | None = None

    def result(self, devices: int) -> SearchResult:
        return dict(self.points)[devices]


def _best_s(res: SearchResult) -> float | None:
    best = res.best
    return None if best is None else best.ev.iteration_time_s


def _meets(res: SearchResult, devices: int, target_s: float | None,
           budget: Budget | None) -> bool:
    t = _best_s(res)
    if t is None or (target_s is not None and t > target_s):
        return False
    return budget is None or budget.cost(devices, t) <= budget.limit


def _floor_devices(scenario: Scenario, hw: Any, target_s: float) -> float:
    """Devices below which no configuration can meet `target_s`: an iteration's matrix
    FLOPs, at least 6 x parameters x tokens (forward 2, backward 4: Kaplan et al. 2020,
    sec. 2.1), over the target at every device's dense peak."""

    if not family(scenario.model).layered or not estimated(scenario):
        return 1.0  # a mixture of experts runs fewer FLOPs than all its parameters ask
    m = transformer_model(scenario.model)
    tokens = scenario.training.global_batch_size * m.seq_length
    flops = 6.0 * transformer_param_count(m) * tokens
    return flops / (target_s * hw.peak_flops_per_s(m.dtype))


def device_counts(per_node: int, lowest: float, max_devices: int) -> Iterator[int]:
    """Every device count a cluster of `per_node`-device nodes can have (1 .. per_node, then
    whole nodes) from `lowest` to `max_devices`, ascending."""
    start = max(1, math.ceil(lowest - 1e-9))
    yield from range(start, min(per_node, max_devices) + 1)
    first = max(2, math.ceil(start / per_node))
    for nodes in range(first, max_devices // per_node + 1):
        yield nodes * per_node


class _Scan:
    """The searches of one capacity question, by device count."""

    def __init__(self, scenario: Scenario, hw: Any, per_node: int, opts: SearchOptions,
                 progress: Callable[[str, int, int], None] | None) -> None:
        self.sc, self.hw, self.per_node, self.opts = scenario, hw, per_node, opts
        self.progress = progress
        self.points: dict[int, SearchResult] = {}
        self.empty = 0
        # model programs and probe costs the searches share
        self.programs: dict[Any, Any] = {}
        self.probes: dict[tuple, Any] = {}

    def at(self, devices: int) -> SearchResult | None:
        """The search on `devices` devices; None when no configuration splits that way."""
        if self.progress:
            self.progress(f"{devices} devices", 0, 1)
        with memoised_programs(self.programs), shared_probes(self.probes):
            res = search(self.sc, self.hw, devices, min(self.per_node, devices), self.opts,
                         self.progress)
        if res.interrupted:
            self.points[devices] = res
            raise KeyboardInterrupt
        if getattr(res, "space", 1) == 0:
            self.empty += 1
            return None
        self.points[devices] = res
        return res


def fewest_devices(scenario: Scenario, hw: Any, target_s: float, per_node: int,
                   max_devices: int, opts: SearchOptions,
                   progress: Callable[[str, int, int], None] | None = None,
                   budget: Budget | None = None) -> CapacityResult:
    """The fewest devices (up to `max_devices`) whose best configuration meets `target_s`
    and, with `budget`, costs at most its limit. With the `cost` objective, the count with
    the fewest device-hours among those that meet it up to twice the fewest."""
    scan = _Scan(scenario, hw, per_node, opts, progress)
    chosen, interrupted = None, False
    try:
        for n in device_counts(per_node, _floor_devices(scenario, hw, target_s), max_devices):
            res = scan.at(n)
            if res is not None and _meets(res, n, target_s, budget):
                chosen = n
                break
        if chosen is not None and opts.objective == "cost":
            chosen = _cheapest(scan, chosen, target_s, budget, max_devices)
    except KeyboardInterrupt:
        interrupted = True
    return CapacityResult(target_s, tuple(sorted(scan.points.items())), chosen, interrupted,
                          scan.empty, budget)


def _cheapest(scan: _Scan, first: int, target_s: float, budget: Budget | None,
              max_devices: int) -> int:
    """Among the counts from `first` to twice it that meet the target, the one with the
    fewest device-hours per iteration (the fewer devices on a tie)."""
    hours = {}
    for n in device_counts(scan.per_node, first, min(2 * first, max_devices)):
        res = scan.points.get(n) or scan.at(n)
        if res is not None and _meets(res, n, target_s, budget):
            t = _best_s(res)
            assert t is not None
            hours[n] = device_hours(n, t)
    return min(hours, key=lambda n: (hours[n], n))


def soonest_within(scenario: Scenario, hw: Any, budget: Budget, per_node: int,
                   max_devices: int, opts: SearchOptions,
                   progress: Callable[[str, int, int], None] | None = None
                   ) -> CapacityResult:
    """The device count whose best configuration trains soonest at a cost within `budget`,
    over every count up to `max_devices` (the fewer devices on a tie)."""
    scan = _Scan(scenario, hw, per_node, opts, progress)
    interrupted = False
    best: tuple[float, int] | None = None
    try:
        for n in device_counts(per_node, 1, max_devices):
            res = scan.at(n)
            t = None if res is None else _best_s(res)
            if res is not None and t is not None and _meets(res, n, None, budget) and \
                    (best is None or t < best[0]):
                best = (t, n)
    except KeyboardInterrupt:
        interrupted = True
    return CapacityResult(None, tuple(sorted(scan.points.items())),
                          best[1] if best else None, interrupted, scan.empty, budget)
