"""The search over `planner.generic`'s space: every degree split with the scenario's own
knobs (reset to what the split allows where they do not apply), then, on the `KEEP` best
splits, each knob varied in turn from the best configuration so far (a coordinate search),
within `max_simulations`. Every configuration returned was simulated by the event engine
as `run` simulates it.

"Best" while searching: the fastest configuration that fits, and while none fits, the one
with the smallest peak (the descent then walks towards memory that fits). A configuration
is simulated only when its floor (`planner.floors`: time and memory the engine cannot go
below) leaves it a chance: splits are taken in order of floor until the floor passes the
`KEEP`-th best simulated one, and a knob value is skipped when its floor is no better than
the best so far. A skipped configuration could not have changed the search's path nor its
answer (tests/test_plan_floors.py compares with the same search without floors, and with an
exhaustive scan)."""

from __future__ import annotations

import contextlib
import time
from typing import Any

from simulator.config.scenario.schema import Scenario
from simulator.errors import InputError
from simulator.planner.floors import Floor, FloorCache, floor_of
from simulator.planner.generic import (
    GenericConfig,
    apply_generic,
    extra_knobs,
    generic_splits,
    knob_values,
    lean,
    with_items,
)

__all__ = ["generic_search", "refine", "KEEP"]

KEEP = 3  # splits whose knobs are searched

# knob values that every split accepts, tried in turn when the scenario's own do not apply
_RESETS = ({"parallel.sequence_parallel": False}, {"parallel.optimizer_shard": 0},
           {"parallel.schedule": "1f1b"}, {"training.micro_batch_size": 1},
           {"parallel.offload.optimizer_states": False})


class _Generic:
    def __init__(self, scenario: Scenario, hw: Any, per_node: int, opts: Any,
                 progress: Any, kit: Any) -> None:
        # kit: planner.search (its Candidate, simulate_config and finish_result), handed in
        # by the search that calls this module
        self.s, self.sc, self.hw, self.per_node, self.opts = kit, scenario, hw, per_node, opts
        self.progress = progress or (lambda *_: None)
        self.done: dict[GenericConfig, Any] = {}
        self.same: dict[str, GenericConfig] = {}  # scenario JSON -> the first config of it
        self.refused: set[GenericConfig] = set()
        self.space = 0
        self.planned: dict[GenericConfig, Scenario] = {}
        self.floors: dict[GenericConfig, Floor | None] = {}
        self.cache = FloorCache()
        self.skipped = 0  # configurations their floor kept from simulation
        # the memory a plan may use (`fits` also asks the headroom)
        self.usable = hw.memory_capacity_bytes * (1.0 - opts.headroom)

    def valid(self, cfg: GenericConfig) -> bool:
        """Whether the scenario's rules accept `cfg` and it is no configuration already seen
        written another way (a knob set to the value it had)."""
        try:
            planned = cfg.apply(self.sc, self.per_node)
        except InputError:
            return False
        text = planned.model_dump_json(exclude={"source"})
        if self.same.setdefault(text, cfg) != cfg:
            return False
        self.planned[cfg] = planned
        return True

    def floor(self, cfg: GenericConfig) -> Floor | None:
        """`planner.floors` of a valid `cfg` (None: off; on a cluster of unequal devices,
        whose per-device speeds and jitter the floors do not price; or a configuration the
        lowering refuses, which its simulation would refuse too)."""
        if not self.opts.floors or not self.sc.cluster.uniform:
            return None
        if cfg not in self.floors:
            try:
                self.floors[cfg] = floor_of(self.planned[cfg], self.hw, self.cache)
            except InputError:
                self.floors[cfg] = None
        return self.floors[cfg]

    def low_key(self, cfg: GenericConfig) -> tuple:
        """A lower bound of `best_key` of `cfg` once simulated (from its floor)."""
        f = self.floor(cfg)
        if f is None:
            return (0, 0.0, 0.0)
        if f.peak_bytes > self.usable:  # it cannot fit
            return (1, f.peak_bytes, f.time_s)
        if self.opts.objective == "memory":
            return (0, f.peak_bytes, f.time_s)
        return (0, f.time_s, f.peak_bytes)

    def hopeless(self, cfg: GenericConfig, bar: tuple) -> bool:
        """Whether `cfg`'s floor shows it cannot do better than `bar` (a `best_key`)."""
        if self.low_key(cfg) > bar:
            self.skipped += 1
            return True
        return False

    def first_valid(self, cfg: GenericConfig) -> GenericConfig | None:
        """`cfg`, or it with the scenario's knobs reset one after another until valid."""
        if self.valid(cfg):
            return cfg
        items: dict[str, Any] = {}
        for reset in _RESETS:
            items.update(reset)
            cand = with_items(cfg, **{k.replace(".", "__"): v for k, v in items.items()})
            if self.valid(cand):
                return cand
        return None

    def simulate(self, cfg: GenericConfig) -> Any:
        """The candidate of `cfg`, simulated once (None: beyond `max_simulations`, or a
        configuration the lowering refuses though the scenario rules let it through)."""
        if cfg not in self.done and cfg not in self.refused and \
                len(self.done) < self.opts.max_simulations:
            self.progress("simulating", len(self.done), self.opts.max_simulations)
            try:
                ev = self.s.simulate_config(self.sc, self.hw, cfg, self.per_node,
                                            self.opts.headroom)
            except InputError:
                self.refused.add(cfg)
                return None
            self.done[cfg] = self.s.Candidate(cfg, ev.iteration_time_s, None, ev)
        return self.done.get(cfg)

    def key(self, cand: Any) -> tuple:
        return cand.key(self.opts.objective)

    def best_key(self, cand: Any) -> tuple:
        """What the search minimises: the fastest configuration that fits (the smallest
        peak under `--objective memory`), and, while none fits, the smallest peak."""
        ev = cand.ev
        if not ev.fits:
            return (1, ev.peak_bytes, ev.iteration_time_s)
        if self.opts.objective == "memory":
            return (0, ev.peak_bytes, ev.iteration_time_s)
        return (0, ev.iteration_time_s, ev.peak_bytes)

    def descend(self, start: Any, knobs: list[tuple[str, list[Any]]] | None = None) -> None:
        """Vary each knob in turn from the best configuration so far (`knobs`, default
        `knob_values` of the start's split)."""
        best = start
        if knobs is None:
            knobs = knob_values(self.sc, start.config, self.opts.limits.max_micro_batch,
                                self.opts.frameworks, self.hw)
        for knob, values in knobs:
            for value in values:
                cfg = with_items(best.config, **{knob.replace(".", "__"): value})
                if cfg == best.config or not self.valid(cfg):
                    continue
                self.space += 1
                if cfg not in self.done and self.hopeless(cfg, self.best_key(best)):
                    continue
                cand = self.simulate(cfg)
                if cand is not None and self.best_key(cand) < self.best_key(best):
                    best = cand


def generic_search(scenario: Scenario, hw: Any, devices: int, per_node: int, opts: Any,
                   progress: Any, kit: Any) -> Any:
    """A `planner.search.SearchResult` over `planner.generic`'s space (`kit`: the module
    planner.search)."""
    t0 = time.perf_counter()
    run = _Generic(scenario, hw, per_node, opts, progress, kit)
    interrupted = False
    try:
        splits = [c for c in (run.first_valid(s) for s in generic_splits(scenario, devices))
                  if c is not None]
        run.space = len(splits)
        if not scenario.model.writes_ops and scenario.devices == devices:
            own = run.first_valid(_own_split(scenario))
            splits = ([own] if own else []) + [s for s in splits if s != own]
        if not scenario.model.writes_ops:  # each split with lean memory knobs too
            splits += [c for c in (lean(s) for s in splits) if run.valid(c)]
            run.space = len(splits)
        for cand in _starts(run, splits):
            run.descend(cand)
    except KeyboardInterrupt:
        interrupted = True
    ranked = sorted(run.done.values(), key=run.key)
    return run.s.finish_result(scenario, hw, devices, per_node, opts, ranked, run.space,
                               run.skipped, 0, interrupted, t0)


def refine(scenario: Scenario, hw: Any, per_node: int, opts: Any, best: Any,
           progress: Any, kit: Any) -> list[Any]:
    """The dense search's best configuration with `extra_knobs` varied in turn by
    simulation (zero-bubble schedule, uneven stages, fusion buckets, multi-copy, offload of
    parameters and activations, `--framework`): the candidates simulated, which the
    ranking takes besides the dense ones."""
    run = _Generic(scenario, hw, per_node, opts, progress, kit)
    start_cfg = GenericConfig(str(best.config), (), best.config)
    planned = apply_generic(start_cfg.apply(scenario, per_node), GenericConfig("", ()),
                            per_node)
    run.same[planned.model_dump_json(exclude={"source"})] = start_cfg
    start = run.s.Candidate(start_cfg, best.estimate_s, None, best.evaluation)
    cfg = best.config
    knobs = extra_knobs(scenario, cfg.data, cfg.pipeline, opts.frameworks, hw)
    if cfg.virtual_stages > 1:  # an interleaved split is not one list per stage
        knobs = [(k, v) for k, v in knobs if k != "parallel.pipeline_layers"]
    with contextlib.suppress(KeyboardInterrupt):
        run.descend(start, knobs)
    return list(run.done.values())


def _starts(run: _Generic, splits: list[GenericConfig]) -> list[Any]:
    """The `KEEP` best splits by `best_key` (ties: the earlier in `splits`), each
    simulated only while its floor could still place it among them (in order of floor;
    the first of `splits`, the scenario's own where it is one, first)."""
    first, rest = splits[:1], splits[1:]
    order = first + sorted(rest, key=lambda c: (run.low_key(c), splits.index(c)))
    seen: list[tuple[tuple, int, Any]] = []
    for k, cfg in enumerate(order):
        if len(seen) >= KEEP:
            bar = sorted(seen)[KEEP - 1][0]
            if run.low_key(cfg) > bar:
                run.skipped += len(order) - k
                break
        cand = run.simulate(cfg)
        if cand is not None:
            seen.append((run.best_key(cand), splits.index(cfg), cand))
    return [c for _, _, c in sorted(seen, key=lambda x: (x[0], x[1]))[:KEEP]]


def _own_split(scenario: Scenario) -> GenericConfig:
    """The scenario's own degrees as a split."""
    p = scenario.parallel
    items: dict[str, Any] = {"parallel.data": p.data, "parallel.tensor": p.tensor,
                             "parallel.pipeline": p.pipeline}
    if p.context > 1:
        items["parallel.context"] = p.context
    if scenario.model.moe_spec() is not None:
        items["parallel.expert"] = p.expert
    if p.tensor_nd:
        items["parallel.tensor_nd"] = list(p.tensor_nd)
    return with_items(GenericConfig("", ()), **{k.replace(".", "__"): v
                                                for k, v in items.items()})
