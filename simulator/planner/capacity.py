"""Capacity planning: the Pareto front of time against memory on one cluster, and the
fewest devices that meet an iteration-time target.

`fewest_devices` searches whole nodes in powers of two until the best configuration meets
the target, then bisects the node count between the last miss and the first hit (the best
time falls as devices are added; where it does not, bisection still returns a count that
meets the target, perhaps not the smallest). A count with no valid configuration at all (no
degrees divide it) says nothing of the counts around it: the bisection looks below it
first, then above, instead of taking it for too slow. With the `cost` objective it also
searches twice the first count that meets the target and keeps the one with fewer
device-hours.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from simulator.config.scenario.schema import Scenario
from simulator.models.registry import family
from simulator.models.transformer import transformer_model
from simulator.planner.search import Candidate, SearchOptions, SearchResult, search
from simulator.simulation.budget import transformer_param_count

__all__ = ["pareto_front", "target_time_s", "CapacityResult", "fewest_devices",
           "device_hours"]


def pareto_front(cands: tuple[Candidate, ...] | list[Candidate]) -> list[Candidate]:
    """The simulated candidates that fit and that no other beats on both iteration time
    and peak memory, by increasing peak memory."""
    fits = sorted((c for c in cands if c.evaluation and c.evaluation.fits),
                  key=lambda c: (c.ev.peak_bytes, c.ev.iteration_time_s, c.config))
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
class CapacityResult:
    """Every device count searched (ascending) and the one chosen (None: none met)."""

    target_s: float
    points: tuple[tuple[int, SearchResult], ...]
    chosen: int | None
    interrupted: bool

    def result(self, devices: int) -> SearchResult:
        return dict(self.points)[devices]


def _meets(res: SearchResult, target_s: float) -> bool:
    best = res.best
    return best is not None and best.ev.iteration_time_s <= target_s


def _floor_devices(scenario: Scenario, hw: Any, target_s: float) -> float:
    """Devices below which no configuration can meet `target_s`: an iteration's matrix
    FLOPs, at least 6 x parameters x tokens (forward 2, backward 4: Kaplan et al. 2020,
    sec. 2.1), over the target at every device's dense peak."""

    if not family(scenario.model).layered:
        return 1.0
    m = transformer_model(scenario.model)
    tokens = scenario.training.global_batch_size * m.seq_length
    flops = 6.0 * transformer_param_count(m) * tokens
    return flops / (target_s * hw.peak_flops_per_s(m.dtype))


class _Sweep:
    def __init__(self, scenario: Scenario, hw: Any, per_node: int, opts: SearchOptions,
                 progress: Callable[[str, int, int], None] | None) -> None:
        self.sc, self.hw, self.per_node, self.opts = scenario, hw, per_node, opts
        self.progress = progress
        self.points: dict[int, SearchResult] = {}

    def at(self, devices: int) -> SearchResult:
        if devices not in self.points:
            if self.progress:
                self.progress(f"{devices} devices", 0, 1)
            res = search(self.sc, self.hw, devices, self.per_node, self.opts, self.progress)
            self.points[devices] = res
            if res.interrupted:
                raise KeyboardInterrupt
        return self.points[devices]

    def bisect(self, lo_nodes: int, hi_nodes: int, target_s: float) -> int:
        """Fewest nodes in (lo, hi] meeting the target (hi meets it)."""
        return self._first(lo_nodes, hi_nodes, target_s) or hi_nodes

    def _first(self, lo: int, hi: int, target_s: float) -> int | None:
        """Fewest nodes strictly between lo and hi meeting the target (None: none), the
        best time falling as nodes are added among the counts that have a configuration."""
        if hi - lo <= 1:
            return None
        mid = (lo + hi) // 2
        res = self.at(mid * self.per_node)
        if res.best is None:  # nothing runs on mid nodes: look below it, then above
            return self._first(lo, mid, target_s) or self._first(mid, hi, target_s)
        if _meets(res, target_s):
            return self._first(lo, mid, target_s) or mid
        return self._first(mid, hi, target_s)


def _cheaper(sweep: _Sweep, devices: int, target_s: float, max_devices: int) -> int:
    """With the cost objective: twice the devices, if that costs fewer device-hours."""
    double = devices * 2
    if double > max_devices or not _meets(sweep.at(double), target_s):
        return devices
    hours = {}
    for n in (devices, double):
        best = sweep.at(n).best
        assert best is not None
        hours[n] = device_hours(n, best.ev.iteration_time_s)
    return min(hours, key=lambda n: (hours[n], n))


def fewest_devices(scenario: Scenario, hw: Any, target_s: float, per_node: int,
                   max_devices: int, opts: SearchOptions,
                   progress: Callable[[str, int, int], None] | None = None) -> CapacityResult:
    """The fewest devices (whole nodes) whose best configuration meets `target_s`."""
    sweep = _Sweep(scenario, hw, per_node, opts, progress)
    chosen, interrupted, nodes, last_miss = None, False, 1, 0
    floor = _floor_devices(scenario, hw, target_s)
    while nodes * per_node < floor and nodes * per_node <= max_devices:
        last_miss, nodes = nodes, nodes * 2  # cannot meet the target even at peak
    try:
        while nodes * per_node <= max_devices:
            if _meets(sweep.at(nodes * per_node), target_s):
                chosen = sweep.bisect(last_miss, nodes, target_s) * per_node
                break
            last_miss, nodes = nodes, nodes * 2
        if chosen is not None and opts.objective == "cost":
            chosen = _cheaper(sweep, chosen, target_s, max_devices)
    except KeyboardInterrupt:
        interrupted = True
    points = tuple(sorted(sweep.points.items()))
    return CapacityResult(target_s, points, chosen, interrupted)
