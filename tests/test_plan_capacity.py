"""Capacity answers are the true minimum over the device counts searched: `--target-time`,
`--tokens --days` and `--budget` compared with a scan of every count on a small case whose
best time does not fall monotonically with devices (tiny-cpu: 4 devices are faster than 8)."""

from __future__ import annotations

import pytest

from simulator.api import load_hardware, load_scenario
from simulator.planner import capacity
from simulator.planner.capacity import Budget, device_counts, fewest_devices, soonest_within
from simulator.planner.search import SearchOptions, search
from simulator.planner.space import SpaceLimits

OPTS = SearchOptions(top_k=1, limits=SpaceLimits(2, 2, 3))
MAX = 16
PER_NODE = 4


@pytest.fixture(scope="module")
def every_count():
    """{devices: best seconds or None} for every count 1..MAX, each searched on its own."""
    loaded = load_scenario("tiny-cpu")
    hw = load_hardware(loaded)
    results = {n: search(loaded.scenario, hw, n, min(PER_NODE, n), OPTS)
               for n in range(1, MAX + 1)}
    return loaded.scenario, hw, results


@pytest.fixture
def cached(every_count, monkeypatch):
    """The capacity searches answered from the scan (the same deterministic searches)."""
    sc, hw, results = every_count
    monkeypatch.setattr(capacity, "search", lambda s, h, n, *a, **k: results[n])
    return sc, hw, {n: (r.best.ev.iteration_time_s if r.best else None)
                    for n, r in results.items()}


def _counts() -> list[int]:
    return list(device_counts(PER_NODE, 1, MAX))


def test_counts_are_every_cluster_size():
    assert _counts() == [1, 2, 3, 4, 8, 12, 16]
    assert list(device_counts(8, 296, 600))[:3] == [296, 304, 312]


def test_the_case_is_not_monotone(cached):
    _, _, best = cached
    assert best[8] > best[4]  # more devices, slower: what a bisection gets wrong
    assert best[3] is None  # no configuration on 3 devices


def test_target_time_equals_the_scan(cached):
    sc, hw, best = cached
    times = sorted({t for n, t in best.items() if t is not None and n in _counts()})
    targets = [t * f for t in times for f in (0.999, 1.0, 1.001)]
    for target in targets:
        want = min((n for n in _counts() if best[n] is not None and best[n] <= target),
                   default=None)
        got = fewest_devices(sc, hw, target, PER_NODE, MAX, OPTS)
        assert got.chosen == want, target


def test_tokens_days_equals_the_scan(cached):
    sc, hw, best = cached
    tokens = 1e6
    for days in (1e-5, 2e-5, 2.3e-5, 1e-4):
        target = capacity.target_time_s(tokens, days, sc.training.global_batch_size,
                                        sc.model.seq_length)
        want = min((n for n in _counts() if best[n] is not None and best[n] <= target),
                   default=None)
        assert fewest_devices(sc, hw, target, PER_NODE, MAX, OPTS).chosen == want


def _cost(n: int, t: float, budget: Budget) -> float:
    return n * t / 3600 * budget.iterations * (budget.price or 1.0)


@pytest.mark.parametrize("price", [None, 2.5])
def test_budget_equals_the_scan(cached, price):
    sc, hw, best = cached
    iterations = 1e6 / (sc.training.global_batch_size * sc.model.seq_length)
    costs = sorted(_cost(n, t, Budget(1, iterations, price)) for n, t in best.items()
                   if t is not None and n in _counts())
    for limit in [c * f for c in costs for f in (0.999, 1.0001)]:
        budget = Budget(limit, iterations, price)
        ok = [n for n in _counts() if best[n] is not None and _cost(n, best[n], budget) <= limit]
        want = min(ok, key=lambda n: (best[n], n)) if ok else None
        assert soonest_within(sc, hw, budget, PER_NODE, MAX, OPTS).chosen == want
        # with a deadline too: the fewest devices within both
        target = max(t for t in best.values() if t is not None)
        fewest = min((n for n in ok if best[n] <= target), default=None)
        assert fewest_devices(sc, hw, target, PER_NODE, MAX, OPTS, budget=budget).chosen \
            == fewest


def test_real_searches_answer_as_the_scan(every_count):
    """One capacity search with its own searches (not the scan's): the same answer."""
    sc, hw, results = every_count
    t4 = results[4].best.ev.iteration_time_s
    res = fewest_devices(sc, hw, t4 * 1.0001, PER_NODE, MAX, OPTS)
    want = min(n for n in _counts() if results[n].best
               and results[n].best.ev.iteration_time_s <= t4 * 1.0001)
    assert res.chosen == want and res.no_configuration == (1 if want > 3 else 0)
