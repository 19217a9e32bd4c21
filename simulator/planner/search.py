"""Automatic strategy search for a transformer scenario on N devices.

1. enumerate every configuration the model allows (`space.enumerate_space`);
2. drop those whose closed-form memory floor exceeds the device (`memory.estimate_memory`:
   the floor is held at some moment whatever the timing, so nothing that fits is dropped);
3. estimate every survivor's iteration time (`estimate.estimate_time`: closed forms fed
   with per-layer costs from tiny probe simulations);
4. simulate the scenario's own configuration first (when the space holds it: the plan is
   then never slower than what the user has, and says by how much it is faster), then the
   others in order of estimate, most promising first, until the
   next estimate is more than `margin` above the best simulated time that fits (and at
   least `top_k` fit). Each simulation corrects the estimates of its family (same ZeRO
   stage, offload and schedule kind) by the smallest simulated / estimated ratio seen in
   it, so that a family the closed forms flatter stops drawing simulations.

Ctrl-C (KeyboardInterrupt) during the search ends it early: the result holds what was
simulated so far and says it was interrupted.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from simulator.config.scenario.schema import Scenario
from simulator.lower.pipeline import steady_window
from simulator.planner.estimate import Probes, estimate_time
from simulator.planner.generic_search import generic_search, refine
from simulator.planner.memory import MemoryEstimate, Workload, estimate_memory, workload_of
from simulator.planner.space import Config, SpaceLimits, apply_config, config_of, enumerate_space
from simulator.program.model_program import active_store, memoised_programs
from simulator.report import summary
from simulator.simulation.budget import shortened_run
from simulator.simulation.simulate import simulate

__all__ = ["Evaluation", "Candidate", "SearchOptions", "SearchResult", "search",
           "simulate_config", "OBJECTIVES", "Progress"]

OBJECTIVES = ("time", "memory", "cost")
_FRONT_SPAN = 1.5  # the front is drawn up to this multiple of the best time
Progress = Callable[[str, int, int], None]  # (phase, done, total)


@dataclass(frozen=True)
class Evaluation:
    """What the event engine says of one configuration (CONTRACT section 3 figures)."""

    iteration_time_s: float
    tokens_per_s: float
    mfu: float
    peak_bytes: float
    capacity_bytes: float
    fits: bool
    # the error bar of iteration_time_s (run --json `uncertainty`; None: no published runs
    # of its group)
    low_s: float | None = None
    high_s: float | None = None


@dataclass(frozen=True)
class Candidate:
    """A configuration with its estimates and, once simulated, its evaluation."""

    config: Any  # a space.Config, or a generic.GenericConfig (no estimate, no memory floor)
    estimate_s: float
    memory: MemoryEstimate | None
    evaluation: Evaluation | None = None

    @property
    def mem(self) -> MemoryEstimate:
        """The memory estimate of a candidate of the dense search."""
        assert self.memory is not None, f"{self.config} has no memory estimate"
        return self.memory

    @property
    def ev(self) -> Evaluation:
        """The evaluation of a simulated candidate."""
        assert self.evaluation is not None, f"{self.config} was not simulated"
        return self.evaluation

    def key(self, objective: str) -> tuple:
        """Sort key: fitting first, then the objective (cost ranks as time: on a fixed
        device count device-hours are proportional to it), then the configuration."""
        ev = self.evaluation
        assert ev is not None
        first = ev.peak_bytes if objective == "memory" else ev.iteration_time_s
        second = ev.iteration_time_s if objective == "memory" else ev.peak_bytes
        # a dense Config orders among its kind; a generic one by its label, after them
        rank = (0, self.config) if isinstance(self.config, Config) else (1, str(self.config))
        return (not ev.fits, first, second, rank)


@dataclass(frozen=True)
class SearchOptions:
    objective: str = "time"
    top_k: int = 10
    margin: float = 0.03
    max_simulations: int = 120
    pareto_points: int = 8  # configurations of the estimated time/memory front simulated
    limits: SpaceLimits = field(default_factory=SpaceLimits)
    include_current: bool = True  # simulate the scenario's own configuration first
    headroom: float = 0.0  # share of device memory a plan must leave free (--headroom)
    # the dense search's best refined by simulation (generic_search.refine)
    refine: bool = True
    frameworks: tuple[str, ...] = ()  # software stacks searched too (--framework)
    # skip what `planner.floors` shows cannot beat the best simulated (generic search)
    floors: bool = True


@dataclass(frozen=True)
class SearchResult:
    """`ranked`: the simulated candidates, best first; `space`: configurations enumerated;
    `pruned`: dropped by the memory floor; `probes`: probe simulations run."""

    devices: int
    objective: str
    ranked: tuple[Candidate, ...]
    space: int
    pruned: int
    simulations: int
    probes: int
    interrupted: bool
    wall_s: float

    @property
    def best(self) -> Candidate | None:
        fitting = [c for c in self.ranked if c.evaluation and c.evaluation.fits]
        return fitting[0] if fitting else None


def simulate_config(scenario: Scenario, hw: Any, cfg: Any,
                    devices_per_node: int | None = None, headroom: float = 0.0,
                    as_run: bool = False) -> Evaluation:
    """Run the event engine on `scenario` under configuration `cfg`. With `headroom` h,
    a configuration fits only when its peak leaves that share of device memory free.
    The steady state is extended whenever the schedule has one (the cheapest simulation);
    `as_run`: exactly as `shardsim run` simulates it (which may simulate every micro-batch,
    and then differs in the last digits)."""

    planned = apply_config(scenario, cfg, devices_per_node)
    s = summary(simulate(planned, hw, steady=None if as_run else True))
    mem = s["memory"]
    u = s["uncertainty"]
    peak, cap = float(mem["peak_bytes"]), float(mem["capacity_bytes"])
    fits = bool(mem["fits"]) and peak <= cap * (1.0 - headroom)
    return Evaluation(s["iteration_time_s"], s["tokens_per_s"], s["mfu"], peak, cap, fits,
                      u["low_s"], u["high_s"])


def _as_run(scenario: Scenario, cand: Candidate, per_node: int, headroom: float,
            hw: Any) -> Candidate:
    """`cand` evaluated as `run` evaluates it, where that is not the steady-state extension
    the search used (so that running a ranked plan gives its figures to the last digit)."""
    planned = apply_config(scenario, cand.config, per_node)
    p = planned.parallel
    window = steady_window(p.schedule, p.pipeline, planned.grad_accum_steps, p.virtual_stages)
    if window is None or shortened_run(planned) == window:
        return cand
    ev = simulate_config(scenario, hw, cand.config, per_node, headroom, as_run=True)
    return replace(cand, evaluation=ev)


def estimated(scenario: Scenario) -> bool:
    """Whether the closed-form estimate and memory floor cover the scenario (a dense
    transformer or ViT, 1-D tensor parallel, no context parallelism, no parameter server);
    the others are searched by `planner.generic_search`."""
    m, p = scenario.model, scenario.parallel
    return bool(m.plannable) and m.moe_spec() is None and p.context == 1 and \
        p.tensor_nd is None and p.mode != "parameter_server"


def _family(cfg: Config) -> tuple:
    return (cfg.optimizer_shard, cfg.offload_optimizer, cfg.offload_nvme, cfg.schedule)


class _Search:
    """One search: the state of the simulate-in-order loop (used once, then dropped)."""

    def __init__(self, scenario: Scenario, hw: Any, devices: int, per_node: int,
                 opts: SearchOptions, progress: Progress | None) -> None:
        self.sc, self.hw, self.devices, self.per_node = scenario, hw, devices, per_node
        self.opts, self.progress = opts, progress or (lambda *_: None)
        self.w: Workload = workload_of(scenario, hw)
        self.probes = Probes(scenario, hw, per_node)
        self.done: list[Candidate] = []
        self.ratio: dict[tuple, float] = {}
        self.space = self.pruned = 0
        # the memory a plan may use: the device's, less the headroom asked for
        self.usable = hw.memory_capacity_bytes * (1.0 - opts.headroom)

    def simulate(self, cfg: Config) -> Evaluation:
        return simulate_config(self.sc, self.hw, cfg, self.per_node, self.opts.headroom)

    def survivors(self) -> list[tuple[Config, MemoryEstimate]]:
        space = enumerate_space(self.sc, self.devices, self.w.flash, self.opts.limits,
                                nvme=not self.hw.nvme_fields)
        cap = self.usable
        out = []
        for cfg in space:
            mem = estimate_memory(self.w, cfg)
            if mem.floor_bytes <= cap:
                out.append((cfg, mem))
        self.space, self.pruned = len(space), len(space) - len(out)
        return out

    def score(self, cand: Candidate) -> float:
        if self.opts.objective == "memory":
            return cand.mem.peak_bytes
        return cand.estimate_s * self.ratio.get(_family(cand.config), 1.0)

    def estimate(self, survivors: list[tuple[Config, MemoryEstimate]]) -> list[Candidate]:
        out = []
        for i, (cfg, mem) in enumerate(survivors):
            out.append(Candidate(cfg, estimate_time(self.w, cfg, self.probes), mem))
            if i % 256 == 0:
                self.progress("estimating", i, len(survivors))
        return out

    def best_value(self) -> float | None:
        fits = [c for c in self.done if c.evaluation and c.evaluation.fits]
        if len(fits) < self.opts.top_k:
            return None
        ev = min(fits, key=lambda c: c.key(self.opts.objective)).evaluation
        assert ev is not None
        return ev.peak_bytes if self.opts.objective == "memory" else ev.iteration_time_s

    def record(self, cand: Candidate, ev: Evaluation) -> None:
        self.done.append(Candidate(cand.config, cand.estimate_s, cand.memory, ev))
        fam = _family(cand.config)
        ratio = ev.iteration_time_s / cand.estimate_s if cand.estimate_s > 0 else 1.0
        self.ratio[fam] = min(self.ratio.get(fam, ratio), ratio)

    def current(self, cands: list[Candidate]) -> None:
        """Simulate the scenario's own configuration, when the space holds it."""

        mine = config_of(self.sc)
        for cand in cands:
            if cand.config == mine:
                self.progress("simulating the scenario's configuration", 0, 1)
                self.record(cand, self.simulate(cand.config))
                return

    def run(self, cands: list[Candidate]) -> None:
        """Simulate in order of (corrected) estimate until the stop rule holds. The order
        is recomputed after each simulation (a family's correction changes its scores)."""
        cap = self.usable * (1 + self.opts.margin)
        seen = {c.config for c in self.done}
        left = [c for c in cands if c.mem.peak_bytes <= cap and c.config not in seen] or \
            [c for c in cands if c.config not in seen]
        limit = self.opts.max_simulations
        while left and len(self.done) < limit:
            scores = [self.score(c) for c in left]
            i = min(range(len(left)), key=lambda k: (scores[k], left[k].config))
            best = self.best_value()
            if best is not None and scores[i] > best * (1 + self.opts.margin):
                break
            cand = left.pop(i)
            self.progress("simulating", len(self.done), limit)
            self.record(cand, self.simulate(cand.config))

    def refine(self) -> None:
        """The best fitting configuration, refined by simulation (`generic_search.refine`)."""
        fits = [c for c in self.done if c.evaluation and c.evaluation.fits]
        if not self.opts.refine or not fits:
            return
        best = min(fits, key=lambda c: c.key(self.opts.objective))
        self.progress("refining the best by simulation", 0, 1)
        self.done += refine(self.sc, self.hw, self.per_node, self.opts, best, self.progress,
                            sys.modules[__name__])

    def tasks(self, cfg: Config) -> int:
        """Compute tasks the engine runs for `cfg` (micro-batches x chunks x stages): what a
        simulation of it costs, roughly."""
        micro = self.w.global_batch // (cfg.micro_batch_size * cfg.data)
        return micro * cfg.virtual_stages * cfg.pipeline

    def front(self, cands: list[Candidate]) -> None:
        """Simulate points spread along the estimated time/memory front (for the Pareto
        plot), skipping what is already simulated and what would cost more than twice
        the dearest simulation of the search (in tasks, so the choice is deterministic)."""
        seen = {c.config for c in self.done}
        dearest = 2 * max((self.tasks(c.config) for c in self.done), default=0)
        best = min((c.evaluation.iteration_time_s for c in self.done
                    if c.evaluation and c.evaluation.fits), default=None)
        if best is None or self.opts.pareto_points <= 0:
            return
        near = [c for c in cands if self.score(c) <= best * _FRONT_SPAN
                and self.tasks(c.config) <= dearest]
        todo = [c for c in _spread(_estimated_front(near, self.usable),
                                   self.opts.pareto_points) if c.config not in seen]
        for k, cand in enumerate(todo):
            self.progress("simulating the time/memory front", k, len(todo))
            self.record(cand, self.simulate(cand.config))


def _estimated_front(cands: list[Candidate], cap: float) -> list[Candidate]:
    """Candidates likely to fit that no other beats on both estimates (time and memory),
    by increasing memory."""
    likely = sorted((c for c in cands if c.mem.peak_bytes <= cap),
                    key=lambda c: (c.mem.peak_bytes, c.estimate_s, c.config))
    front: list[Candidate] = []
    for c in likely:
        if not front or c.estimate_s < front[-1].estimate_s:
            front.append(c)
    return front


def _spread(items: list[Candidate], k: int) -> list[Candidate]:
    """k items evenly spaced along `items` (all of them when there are no more than k)."""
    if len(items) <= k:
        return items
    return [items[round(i * (len(items) - 1) / (k - 1))] for i in range(k)] if k > 1 else []


def search(scenario: Scenario, hw: Any, devices: int, devices_per_node: int | None = None,
           options: SearchOptions = SearchOptions(), progress: Progress | None = None
           ) -> SearchResult:
    """The best configurations of `scenario`'s model and batch on `devices` devices of
    profile `hw` (nodes of `devices_per_node`, default the scenario's)."""
    # configurations that differ only in what a model program does not read (pipeline,
    # schedule, buckets, ZeRO, offload) share one program (`memoised_programs`), as do the
    # searches of one capacity question (`planner.capacity`)
    with memoised_programs(active_store()):
        return _search(scenario, hw, devices, devices_per_node, options, progress)


def _search(scenario: Scenario, hw: Any, devices: int, devices_per_node: int | None,
            options: SearchOptions, progress: Progress | None) -> SearchResult:
    t0 = time.perf_counter()
    per_node = min(devices_per_node or scenario.cluster.devices_per_node, devices)
    if not estimated(scenario):
        return generic_search(scenario, hw, devices, per_node, options, progress,
                              sys.modules[__name__])
    limits = options.limits
    if options.include_current and limits.max_micro_batch < scenario.training.micro_batch_size:
        # the space holds the scenario's own micro-batch size
        options = replace(options, limits=replace(
            limits, max_micro_batch=scenario.training.micro_batch_size))
    run = _Search(scenario, hw, devices, per_node, options, progress)
    interrupted = False
    try:
        cands = run.estimate(run.survivors())
        if options.include_current and scenario.devices == devices:
            run.current(cands)
        run.run(cands)
        run.front(cands)
        run.refine()
    except KeyboardInterrupt:
        interrupted = True
    ranked = sorted(run.done, key=lambda c: c.key(options.objective))
    return finish_result(scenario, hw, devices, per_node, options, ranked, run.space,
                         run.pruned, run.probes.simulations, interrupted, t0)


def finish_result(scenario: Scenario, hw: Any, devices: int, per_node: int,
                  options: SearchOptions, ranked: list[Candidate], space: int, pruned: int,
                  probes: int, interrupted: bool, t0: float) -> SearchResult:
    """The SearchResult of simulated candidates `ranked` (best first): the best is
    simulated again where `run` would simulate it otherwise (`_as_run`), until the best
    is one so simulated (the others may differ from `run` in the last digits)."""
    checked: set[Any] = set()
    while not interrupted and ranked and ranked[0].config not in checked:
        checked.add(ranked[0].config)
        ranked[0] = _as_run(scenario, ranked[0], per_node, options.headroom, hw)
        ranked.sort(key=lambda c: c.key(options.objective))
    return SearchResult(devices, options.objective, tuple(ranked), space, pruned,
                        len(ranked), probes, interrupted, time.perf_counter() - t0)
