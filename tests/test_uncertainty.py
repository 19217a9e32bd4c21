"""The error bar of every prediction (issue 24, CONTRACT section 3 `uncertainty`)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from benchmarks import golden
from simulator.report.uncertainty import (
    Measured,
    band,
    coverage,
    leave_one_out,
    order_band,
    read_table,
    regime_tags,
    scatter,
)

ROOT = Path(__file__).resolve().parent.parent


def _m(run, group, ratio, regime=(), predicted_s=10.0):
    fw, hw = group
    return Measured(run, fw, hw, "transformer", regime, predicted_s, predicted_s / ratio)


A, B = ("fwa", "hwa"), ("fwb", "hwb")
# group A: ratios 0.9, 1.0, 1.1 (median 1.0); group B: 1.0, 1.2 (median 1.1)
TOY = (_m("a1", A, 0.9), _m("a2", A, 1.0), _m("a3", A, 1.1), _m("b1", B, 1.0),
       _m("b2", B, 1.2))


def test_order_band_picks_the_order_statistics_of_80_percent():
    nine = [float(i) for i in range(9)]
    assert order_band(nine) == (0.0, 8.0, 0.8)  # k = 0: (9 - 1) / 10
    nineteen = [float(i) for i in range(19)]
    assert order_band(nineteen) == (1.0, 17.0, 0.8)  # k = 1: (19 - 3) / 20
    assert order_band([3.0, 1.0]) == (1.0, 3.0, pytest.approx(1 / 3))
    with pytest.raises(ValueError, match="2 or more"):
        order_band([1.0])


def test_regime_tags():
    assert regime_tags(0.99, "bf16", False) == ("small",)
    assert regime_tags(1.0, "bf16", False) == ()
    assert regime_tags(5.0, "fp8", True) == ("fp8", "moe")


def test_scatter_is_each_ratio_over_its_group_median():
    expected = sorted([0.9, 1.0, 1.1, 1.0 / 1.1, 1.2 / 1.1])
    assert scatter(TOY) == pytest.approx(expected)


def test_band_closed_cases():
    # pooled scatter of 5: range 0.9 .. 1.1 (k = 0, nominal 4/6)
    a = band(10.0, *A, "transformer", (), TOY)
    assert (a.low_s, a.high_s) == pytest.approx((10 / 1.1, 10 / 0.9))
    assert a.nominal_coverage == pytest.approx(0.6667) and a.runs == 3
    # group B: bias 1.1 times 0.9 .. 1.1 = 0.99 .. 1.21, already wider than its own 1.0 .. 1.2
    b = band(10.0, *B, "transformer", (), TOY)
    assert (b.low_s, b.high_s) == pytest.approx((10 / 1.21, 10 / 0.99))
    assert "fwb on hwb" in b.basis


def test_a_fast_group_moves_the_band_above_the_prediction():
    fast = TOY + tuple(_m(f"c{i}", ("fwc", "hwc"), 0.8) for i in range(3))
    c = band(10.0, "fwc", "hwc", "transformer", (), fast)
    assert c.low_s > 10.0  # measured runs took longer than predicted


def test_group_wider_than_the_pool_keeps_its_own_range():
    wide = TOY + (_m("a4", A, 1.5),)
    a = band(10.0, *A, "transformer", (), wide)
    assert a.low_s == pytest.approx(10 / 1.5)


def test_no_group_no_band():
    none = band(1.0, "fwz", "hwz", "transformer", (), TOY)
    assert none.low_s is None and none.high_s is None
    assert "no validated runs" in none.basis
    mlp = band(1.0, *A, "mlp", (), TOY)
    assert mlp.low_s is None
    lone = band(1.0, *A, "transformer", (), TOY[:1])
    assert lone.low_s is None and "too few" in lone.basis


def test_regime_subset_used_only_with_enough_runs():
    table = TOY + tuple(_m(f"s{i}", A, 0.5 + 0.01 * i, ("small",)) for i in range(3))
    small = band(0.5, *A, "transformer", ("small",), table)
    assert small.runs == 3 and "small work" in small.basis
    fp8 = band(5.0, *A, "transformer", ("fp8",), table)
    assert fp8.runs == 6 and "FP8 has 0 validated run(s)" in fp8.basis


def test_leave_one_out_and_coverage():
    pairs = leave_one_out(TOY)
    # a1 (0.9) without itself: group A = 1.0, 1.1 (bias 1.05); the pool of the rest has
    # ratios 1/1.05, 1.1/1.05, 1/1.1, 1.2/1.1: 1.05 x 1/1.1 .. 1.05 x 1.2/1.1 misses 0.9
    a1 = dict((m.run, b) for m, b in pairs)["a1"]
    assert not a1.holds(TOY[0].measured_s)
    held, banded = coverage(pairs)
    assert banded == 5 and held == sum(b.holds(m.measured_s) for m, b in pairs)
    in_sample = [(m, band(m.predicted_s, m.framework, m.hardware, m.model, m.regime, TOY))
                 for m in TOY]
    assert coverage(in_sample) == (5, 5)


def _published() -> dict[str, Path]:
    return {p.stem: p for d in ("validation", "calibration")
            for p in (ROOT / "scenarios" / d).glob("*.yaml")}


def test_table_is_current_with_the_golden_predictions():
    """validation_errors.csv holds every published run, with the prediction `run --json`
    gives today (the golden file) and the measured time of its case header: a change that
    moves a prediction must rewrite it (`python -m benchmarks.uncertainty_data --write`)."""
    table = {m.run: m for m in read_table()}
    published = _published()
    assert set(table) == set(published)
    runs = golden.load("run")
    for name, path in published.items():
        entry = runs[path.relative_to(ROOT).as_posix()]
        assert table[name].predicted_s == entry["stdout"]["iteration_time_s"], name
        target = re.search(r"target_iteration_time_s:\s*([0-9.eE+-]+)", path.read_text())
        assert target and table[name].measured_s == float(target.group(1)), name


def test_every_published_run_gets_a_band_in_run_json():
    runs = golden.load("run")
    published = _published()
    for name, path in published.items():
        u = runs[path.relative_to(ROOT).as_posix()]["stdout"]["uncertainty"]
        assert u["low_s"] is not None and u["low_s"] < u["high_s"], name


def test_plans_whose_error_bars_overlap_are_ties():
    from types import SimpleNamespace as NS

    from simulator.cli.plan_output import ties

    best = NS(low_s=9.0, high_s=11.0)
    assert ties(NS(low_s=10.5, high_s=12.0), best) is True
    assert ties(NS(low_s=11.5, high_s=12.0), best) is False
    assert ties(NS(low_s=None, high_s=None), best) is None
