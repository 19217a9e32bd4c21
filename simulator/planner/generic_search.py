"""The search over `planner.generic`'s space: every degree split simulated with the
scenario's own knobs (reset to what the split allows where they do not apply), then, on
the `KEEP` best splits, each knob varied in turn from the best configuration so far (a
coordinate search), within `max_simulations`. Every configuration returned was simulated
by the event engine as `run` simulates it."""

from __future__ import annotations

import contextlib
import time
from typing import Any

from simulator.config.scenario.schema import Scenario
from simulator.errors import InputError
from simulator.planner.generic import (
    GenericConfig,
    apply_generic,
    extra_knobs,
    generic_splits,
    knob_values,
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

    def valid(self, cfg: GenericConfig) -> bool:
        """Whether the scenario's rules accept `cfg` and it is no configuration already seen
        written another way (a knob set to the value it had)."""
        try:
            planned = apply_generic(self.sc, cfg, self.per_node)
        except InputError:
            return False
        text = planned.model_dump_json(exclude={"source"})
        return self.same.setdefault(text, cfg) == cfg

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

    def descend(self, start: Any, knobs: list[tuple[str, list[Any]]] | None = None) -> None:
        """Vary each knob in turn from the best configuration so far (`knobs`, default
        `knob_values` of the start's split)."""
        best = start
        if knobs is None:
            knobs = knob_values(self.sc, start.config, self.opts.limits.max_micro_batch,
                                self.opts.frameworks)
        for knob, values in knobs:
            for value in values:
                cfg = with_items(best.config, **{knob.replace(".", "__"): value})
                if cfg == best.config or not self.valid(cfg):
                    continue
                self.space += 1
                cand = self.simulate(cfg)
                if cand is not None and self.key(cand) < self.key(best):
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
        firsts = [c for c in (run.simulate(s) for s in splits) if c is not None]
        for cand in sorted(firsts, key=run.key)[:KEEP]:
            run.descend(cand)
    except KeyboardInterrupt:
        interrupted = True
    ranked = sorted(run.done.values(), key=run.key)
    return run.s.finish_result(scenario, hw, devices, per_node, opts, ranked, run.space, 0,
                               0, interrupted, t0)


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
    knobs = extra_knobs(scenario, cfg.data, cfg.pipeline, opts.frameworks)
    if cfg.virtual_stages > 1:  # an interleaved split is not one list per stage
        knobs = [(k, v) for k, v in knobs if k != "parallel.pipeline_layers"]
    with contextlib.suppress(KeyboardInterrupt):
        run.descend(start, knobs)
    return list(run.done.values())


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
