"""The error bar of a prediction: the measured error of the published runs of its group.

CONTRACT section 3 promises every `run` an `uncertainty: {low_s, high_s, basis}`. The
figures come from shardsim's own published validation runs (scenarios/validation and
scenarios/calibration): each run's predicted and measured seconds per iteration, written by
`python -m benchmarks.uncertainty_data --write` into `validation_errors.csv` beside this
module, so a `run` reads 72 rows instead of simulating 72 runs.

How the band is derived (a pure function of that table):

- The **group** of a prediction is its (framework profile, hardware profile, model family).
  A group without validated runs gives `low_s = high_s = null` and says so.
- Its **regime** is the set of tags of `regime_tags`: `small` (predicted < 1 s per
  iteration), `fp8`, `moe`. When the group holds at least `MIN_REGIME_RUNS` runs of the
  same regime, only those are used; otherwise the whole group, and `basis` says the regime
  itself is not (or thinly) validated.
- An error is the ratio `predicted / measured`. A prediction's **bias** is the median ratio
  of the runs used. The **scatter** about a bias is pooled over all groups: every published
  run's ratio over its own group's median (no group has the 9 runs an 80 % band of its own
  needs). Its 80 % band is distribution-free: sorted, the interval between the (k+1)-th
  smallest and the (k+1)-th largest of the n values, with the largest k whose nominal
  coverage `(n - 2k - 1) / (n + 1)` is >= 80 %: the rank of a new exchangeable value among
  the n + 1 is uniform (Wilks 1941, "Determination of sample sizes for setting tolerance
  limits", Ann. Math. Statist. 12(1); the argument of split conformal prediction).
- The ratio band is `bias x scatter band`, widened to the group's own lowest and highest
  ratio where the group scatters more than the pool; the measured time is then
  `[predicted / ratio_hi, predicted / ratio_lo]`.

Evaluated on the runs it was computed from, the band holds each of them by construction
(in-sample); `leave_one_out` recomputes each run's band without it, the honest figure
(`python -m benchmarks.accuracy` prints both).
"""

from __future__ import annotations

import csv
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

__all__ = ["Measured", "Band", "REGIMES", "SMALL_WORK_S", "TARGET_COVERAGE",
           "MIN_REGIME_RUNS", "TABLE_PATH", "regime_tags", "order_band", "band",
           "scatter", "leave_one_out", "coverage", "read_table", "write_table", "result_regime",
           "result_band"]

TABLE_PATH = Path(__file__).resolve().parent / "validation_errors.csv"
# regime names and what they mean (issue 24: small work, MoE, FP8 are off in their own ways)
REGIMES = {"small": "small work (< 1 s per iteration)", "fp8": "FP8", "moe": "mixture of experts"}
SMALL_WORK_S = 1.0
TARGET_COVERAGE = 0.8
MIN_REGIME_RUNS = 3
_FIELDS = ("run", "framework", "hardware", "model", "regime", "predicted_s", "measured_s")


@dataclass(frozen=True)
class Measured:
    """One published run: its group, regime tags (sorted), predicted and measured seconds."""

    run: str
    framework: str
    hardware: str
    model: str
    regime: tuple[str, ...]
    predicted_s: float
    measured_s: float

    @property
    def ratio(self) -> float:
        return self.predicted_s / self.measured_s


@dataclass(frozen=True)
class Band:
    """The interval of a measured time: None bounds when there is no basis for one."""

    low_s: float | None
    high_s: float | None
    basis: str
    runs: int = 0
    nominal_coverage: float | None = None
    group: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"low_s": self.low_s, "high_s": self.high_s, "basis": self.basis,
                "group": self.group, "runs": self.runs,
                "nominal_coverage": self.nominal_coverage}

    def holds(self, seconds: float) -> bool:
        """Whether `seconds` lies in the band (to 1e-12 relative: a run's own bound is
        predicted / (predicted / measured), one rounding away from measured)."""
        tol = 1e-12 * seconds
        return (self.low_s is not None and self.high_s is not None
                and self.low_s - tol <= seconds <= self.high_s + tol)


def regime_tags(predicted_s: float, dtype: str | None, moe: bool) -> tuple[str, ...]:
    """The sorted regime tags of a prediction (see REGIMES)."""
    tags = {"small"} if predicted_s < SMALL_WORK_S else set()
    if dtype == "fp8":
        tags.add("fp8")
    if moe:
        tags.add("moe")
    return tuple(sorted(tags))


def order_band(ratios: Sequence[float], target: float = TARGET_COVERAGE
               ) -> tuple[float, float, float]:
    """(lowest ratio, highest ratio, nominal coverage) of the order-statistic band of
    `ratios` (n >= 2): the largest k with (n - 2k - 1) / (n + 1) >= target, else k = 0."""
    n = len(ratios)
    if n < 2:
        raise ValueError(f"an order-statistic band needs 2 or more values, found {n}")
    k = max(0, math.floor((n - 1 - target * (n + 1)) / 2 + 1e-9))
    s = sorted(ratios)
    return s[k], s[n - 1 - k], (n - 2 * k - 1) / (n + 1)


def _pct(ratio: float) -> str:
    return f"{100 * (ratio - 1):+.1f}%"


def _group(table: Sequence[Measured], key: tuple[str, str, str]) -> list[Measured]:
    return [m for m in table if (m.framework, m.hardware, m.model) == key]


def _chosen(group: list[Measured], regime: tuple[str, ...]) -> tuple[list[Measured], str]:
    """The runs whose median is the prediction's bias, and what `basis` says of the regime."""
    label = " + ".join(REGIMES[t] for t in regime) or "plain (not small, FP8 or MoE)"
    same = [m for m in group if m.regime == regime]
    if len(same) >= MIN_REGIME_RUNS:
        return same, f"its {len(same)} runs of the regime {label}"
    return group, (f"all its {len(group)} runs; the regime {label} has {len(same)} "
                   f"validated run(s), fewer than {MIN_REGIME_RUNS}, so its own error is "
                   "not known")


def scatter(table: Sequence[Measured]) -> list[float]:
    """Each run's ratio over the median ratio of the runs its bias is drawn from (its group
    and regime, `_chosen`), for every run in a group of 2 or more: the pooled scatter of
    predictions about their group's bias, sorted."""
    out = []
    for m in table:
        group = _group(table, (m.framework, m.hardware, m.model))
        if len(group) >= 2:
            used, _ = _chosen(group, m.regime)
            out.append(m.ratio / statistics.median(o.ratio for o in used))
    return sorted(out)


def band(predicted_s: float, framework: str, hardware: str, model: str,
         regime: tuple[str, ...], table: Sequence[Measured]) -> Band:
    """The interval of the measured time of a prediction, from the validated runs of its
    group and regime in `table` (see the module docstring)."""
    name = f"{framework} on {hardware} ({model})"
    group = _group(table, (framework, hardware, model))
    if not group:
        return Band(None, None, f"{name}: no validated runs of this group, so no error bar",
                    group=name)
    used, how = _chosen(group, regime)
    ratios = [m.ratio for m in used]
    bias = statistics.median(ratios)
    pooled = scatter(table)
    if len(pooled) < 2:
        return Band(None, None, f"{name}: the published runs are too few (no two in one "
                    "group) to measure how predictions scatter, so no error bar", group=name)
    s_lo, s_hi, nominal = order_band(pooled)
    lo, hi = min(bias * s_lo, *ratios), max(bias * s_hi, *ratios)
    basis = (f"{name}, {how}: prediction error {_pct(min(ratios))} .. {_pct(max(ratios))}, "
             f"median {_pct(bias)}; band = that median times the {nominal:.0%} scatter of "
             f"{len(pooled)} published runs about their group's median ({_pct(s_lo)} .. "
             f"{_pct(s_hi)}), widened to the group's own range: error {_pct(lo)} .. "
             f"{_pct(hi)}")
    return Band(predicted_s / hi, predicted_s / lo, basis, len(used), round(nominal, 4), name)


def leave_one_out(table: Sequence[Measured]) -> list[tuple[Measured, Band]]:
    """Each run with the band its group gives it when the run itself is left out."""
    return [(m, band(m.predicted_s, m.framework, m.hardware, m.model, m.regime,
                     [o for o in table if o is not m])) for m in table]


def coverage(pairs: Sequence[tuple[Measured, Band]]) -> tuple[int, int]:
    """(runs whose band holds their measured time, runs that have a band)."""
    banded = [(m, b) for m, b in pairs if b.low_s is not None]
    return sum(b.holds(m.measured_s) for m, b in banded), len(banded)


def read_table(path: Path = TABLE_PATH) -> tuple[Measured, ...]:
    """The validated runs of `validation_errors.csv` (empty when the file is absent)."""
    return _read(str(path))


@lru_cache(maxsize=4)
def _read(path: str) -> tuple[Measured, ...]:
    if not Path(path).is_file():
        return ()
    with open(path, newline="") as fh:
        return tuple(Measured(r["run"], r["framework"], r["hardware"], r["model"],
                              tuple(t for t in r["regime"].split("+") if t),
                              float(r["predicted_s"]), float(r["measured_s"]))
                     for r in csv.DictReader(fh))


def write_table(rows: Sequence[Measured], path: Path = TABLE_PATH) -> None:
    """Write `rows` as validation_errors.csv (benchmarks.uncertainty_data --write)."""
    with open(path, "w", newline="") as fh:
        out = csv.writer(fh, lineterminator="\n")
        out.writerow(_FIELDS)
        for m in rows:
            out.writerow((m.run, m.framework, m.hardware, m.model, "+".join(m.regime),
                          repr(m.predicted_s), repr(m.measured_s)))
    _read.cache_clear()


def result_regime(result: Any) -> tuple[str, str, str, tuple[str, ...]]:
    """(framework, hardware, model family, regime tags) of a SimResult."""
    sc = result.scenario
    model = sc.model
    framework = result.framework.name if result.framework else "none"
    return (framework, str(sc.hardware), str(getattr(model, "type", "transformer")),
            regime_tags(result.iteration_time_s, getattr(model, "dtype", None),
                        getattr(model, "moe", None) is not None))


def result_band(result: Any, table: Sequence[Measured] | None = None) -> Band:
    """The band of a SimResult (`table` defaults to the bundled validation_errors.csv)."""
    framework, hardware, model, regime = result_regime(result)
    rows = read_table() if table is None else table
    return band(result.iteration_time_s, framework, hardware, model, regime, rows)
