"""The floors that prune plan's generic search (`planner.floors`) are safe: never above
what the event engine simulates (time and peak memory, on every configuration of small
searches of each family), and pruning with them changes no answer: the search with floors
returns what it returns without them, and a scan that skips what its floors rule out finds
the exhaustive scan's best."""

from __future__ import annotations

import functools
import itertools
import sys

import pytest

from simulator.api import load_hardware, load_scenario
from simulator.planner import search as search_mod
from simulator.planner.floors import floor_of
from simulator.planner.generic import GenericConfig, generic_splits, with_items
from simulator.planner.generic_search import _Generic
from simulator.planner.search import SearchOptions, estimated, search
from simulator.planner.space import SpaceLimits, apply_config

_LIMITS = SpaceLimits(max_micro_batch=2, max_virtual_stages=2)
# (scenario, devices): MoE (expert degree, DualPipe), context, 2-D / 3-D tensor, FP8 MoE
# on H100, a parameter server, an mlp pipeline, operator graphs with replicas of their mesh
# and a dense transformer, whose best the refinement (`generic_search.refine`) varies
CASES = [("moe-tiny-verify", 8), ("cp-tiny-verify", 8), ("tp2d-tiny-verify", 8),
         ("tp3d-tiny-verify", 8), ("moe-qwen3-30b-a3b-8-h100", 8),
         ("ps-gpt2-medium-16-a100", 16), ("pipeline-mlp-8-a100", 8),
         ("llama2-7b-8-ascend910b", 8), ("verify-tiny-dp8@b200", 8),
         ("graph-data-parallel-zero-8-cpu", 8), ("seed-a-weight-ops", 8)]
# a case name@profile: on that device, in bf16 (on a B200 the search tries FP4 recipes)
_ON = {"b200": ["hardware=b200-sxm", "model.dtype=bf16"]}


def _load(name: str):
    name, _, on = name.partition("@")
    loaded = load_scenario(name, _ON[on] if on else [])
    return loaded.scenario, load_hardware(loaded)


@functools.cache
def _search(name: str, devices: int, floors: bool):
    """The search of case `name` (deterministic: each runs once per worker, the tests below
    only read it)."""
    sc, hw = _load(name)
    opts = SearchOptions(top_k=3, limits=_LIMITS, floors=floors, max_simulations=400)
    return sc, hw, search(sc, hw, devices, None, opts)


@pytest.fixture(scope="module", params=CASES, ids=[f"{n}-{d}" for n, d in CASES])
def case(request) -> tuple[str, int]:
    """(scenario, devices) of CASES: module-scoped, so that pytest runs the tests of one
    case together and its unpruned search (`_search`) serves both."""
    return request.param


def test_floors_never_above_the_simulation(case):
    name, devices = case
    sc, hw, res = _search(name, devices, floors=False)
    per_node = min(sc.cluster.devices_per_node, devices)
    checked = 0
    if name.endswith("@b200"):
        assert any("fp4_recipe" in str(c.config) for c in res.ranked)
    for cand in res.ranked:
        cfg = cand.config
        planned = cfg.apply(sc, per_node) if isinstance(cfg, GenericConfig) else \
            apply_config(sc, cfg, per_node)
        f = floor_of(planned, hw)
        ev = cand.ev
        assert f.time_s <= ev.iteration_time_s * (1 + 1e-9), (str(cand.config), f, ev)
        assert f.peak_bytes <= ev.peak_bytes * (1 + 1e-9), (str(cand.config), f, ev)
        assert f.time_s > 0 and f.peak_bytes > 0
        checked += 1
    assert checked >= 5


def test_pruning_changes_no_answer(case):
    name, devices = case
    sc, _, plain = _search(name, devices, floors=False)
    _, _, pruned = _search(name, devices, floors=True)
    assert plain.best is not None and pruned.best is not None
    assert str(pruned.best.config) == str(plain.best.config)
    assert pruned.best.ev.iteration_time_s == plain.best.ev.iteration_time_s
    assert pruned.simulations <= plain.simulations
    if not estimated(sc):  # the dense search's own memory floor prunes either way
        assert plain.pruned == 0


def test_floors_prune_a_mixture_of_experts():
    # the MoE search on 8 H100 simulates fewer configurations with its floors
    _, _, plain = _search("moe-qwen3-30b-a3b-8-h100", 8, floors=False)
    _, _, pruned = _search("moe-qwen3-30b-a3b-8-h100", 8, floors=True)
    assert pruned.simulations < plain.simulations
    assert pruned.pruned > 0


def _space(run: _Generic, sc, devices: int) -> list:
    """Every split with every combination of schedule, recompute and ZeRO stage."""
    out = []
    for split in generic_splits(sc, devices):
        for sched, rec, zero in itertools.product(
                ("1f1b", "gpipe", "dualpipe"), ("none", "full"), (0, 1, 3)):
            cfg = with_items(split, parallel__schedule=sched, parallel__recompute=rec,
                             parallel__optimizer_shard=zero)
            if run.valid(cfg):
                out.append(cfg)
    return out


@pytest.mark.parametrize(("name", "devices"), [("moe-tiny-verify", 8),
                                               ("cp-tiny-verify", 8)])
def test_floor_pruned_scan_equals_the_exhaustive_scan(name, devices):
    sc, hw = _load(name)
    opts = SearchOptions(limits=_LIMITS, max_simulations=10_000)
    run = _Generic(sc, hw, min(sc.cluster.devices_per_node, devices), opts, None,
                   sys.modules[search_mod.__name__])
    space = _space(run, sc, devices)
    assert len(space) > 20
    every = [c for c in (run.simulate(cfg) for cfg in space) if c is not None]
    exhaustive = min(every, key=run.best_key)
    # the scan in order of floor, stopped at the first floor above the best simulated
    pruned = _Generic(sc, hw, run.per_node, opts, None, run.s)
    assert _space(pruned, sc, devices) == space
    best, simulated = None, 0
    for cfg in sorted(space, key=lambda c: (pruned.low_key(c), str(c))):
        if best is not None and pruned.low_key(cfg) > pruned.best_key(best):
            break
        cand = pruned.simulate(cfg)
        simulated += 1
        if cand is not None and (best is None or pruned.best_key(cand) < pruned.best_key(best)):
            best = cand
    assert best is not None and exhaustive.ev.fits
    assert run.best_key(best) == run.best_key(exhaustive)
    assert simulated < len(space)


def test_dualpipe_and_fp4_are_searched_knobs():
    from simulator.planner.generic import fp4_recipes, knob_values

    sc, hw = _load("moe-tiny-verify")
    split = with_items(GenericConfig("", ()), parallel__data=2, parallel__tensor=1,
                       parallel__pipeline=4, parallel__expert=2)
    knobs = dict(knob_values(sc, split, 2, (), hw))
    assert "dualpipe" in knobs["parallel.schedule"]
    odd = with_items(split, parallel__data=8, parallel__pipeline=1)
    assert "dualpipe" not in dict(knob_values(sc, odd, 2, (), hw))["parallel.schedule"]
    assert fp4_recipes(sc, hw) == []  # a CPU has no FP4 peak
    b200 = load_scenario("verify-tiny-dp8", ["hardware=b200-sxm", "model.dtype=bf16"])
    bhw = load_hardware(b200)
    assert fp4_recipes(b200.scenario, bhw) == ["nvfp4", "mxfp4"]
    fp8 = load_scenario("verify-tiny-dp8", ["hardware=b200-sxm", "model.dtype=fp8"])
    assert fp4_recipes(fp8.scenario, bhw) == []  # FP4 GEMMs run on a bf16 model


def test_plan_tries_fp4_on_blackwell_and_dualpipe_on_an_even_pipeline():
    loaded = load_scenario("verify-tiny-dp8", ["hardware=b200-sxm", "model.dtype=bf16"])
    sc, hw = loaded.scenario, load_hardware(loaded)
    res = search(sc, hw, 8, None, SearchOptions(top_k=3, limits=_LIMITS, floors=False))
    labels = [str(c.config) for c in res.ranked]
    assert any("fp4_recipe=nvfp4" in x for x in labels)
    assert any("fp4_recipe=mxfp4" in x for x in labels)
    _, _, mlp = _search("pipeline-mlp-8-a100", 8, floors=False)
    assert any("schedule=dualpipe" in str(c.config) for c in mlp.ranked)
