"""GEMM peak fractions fitted to a measured sweep through the kernel model every simulated
GEMM is priced with (`simulator.cost.compute.compute_time_s`: tiles, waves, the k loop, the
memory roof and the launch).

Each dtype group fits its own figure: bf16 and fp16 rows `efficiency.gemm_peak_fraction`
(fp32 and tf32 rows fit it where the sweep has no bf16/fp16 row, and are left out
otherwise), fp8 rows `efficiency.gemm_peak_fraction_fp8`, fp4 rows
`efficiency.gemm_peak_fraction_fp4`. The model is run at full clocks
(`sustained_compute_fraction` 1), since a sweep times short bursts, as
benchmarks/kernel_accuracy.py does; the loss is the mean squared log of modelled over
measured time.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from simulator.calibrate.search import minimise
from simulator.calibrate.values import with_value
from simulator.config.hardware.schema import HardwareProfile
from simulator.config.measurements import GemmPoint, GemmSweep
from simulator.cost.compute import DTYPE_BYTES, compute_time_s
from simulator.cost.specs import ComputeSpec
from simulator.errors import InputError

__all__ = ["GemmFit", "fit_gemm", "gemm_time_s", "burst"]

_KEYS = {"bf16": "efficiency.gemm_peak_fraction", "fp16": "efficiency.gemm_peak_fraction",
         "fp32": "efficiency.gemm_peak_fraction", "tf32": "efficiency.gemm_peak_fraction",
         "fp8": "efficiency.gemm_peak_fraction_fp8", "fp4": "efficiency.gemm_peak_fraction_fp4"}


@dataclass(frozen=True)
class GemmFit:
    """The fitted profile, {key: value}, {key: the sweeps that cover it}, the points each
    key was fitted to, and the notes (rows left out and why)."""

    hw: HardwareProfile
    values: dict[str, object]
    sources: dict[str, tuple[str, ...]]
    points: dict[str, tuple[GemmPoint, ...]]
    notes: tuple[str, ...]


def burst(hw: HardwareProfile) -> HardwareProfile:
    """`hw` at full clocks: what a short benchmark sees."""
    return with_value(hw, "efficiency.sustained_compute_fraction", 1.0)


def gemm_time_s(p: GemmPoint, hw: HardwareProfile) -> float:
    """The modelled time of one measured GEMM (C written in 16 bits, or 32 for fp32)."""
    out = 4 if p.dtype in ("fp32", "tf32") else 2
    spec = ComputeSpec("gemm", "gemm", 2.0 * p.m * p.n * p.k,
                       DTYPE_BYTES[p.dtype] * (p.m * p.k + p.k * p.n) + out * p.m * p.n,
                       p.dtype, gemm_mnk=(p.m, p.n, p.k))
    return compute_time_s(spec, hw)


def measured_time_s(p: GemmPoint) -> float:
    return 2.0 * p.m * p.n * p.k / (p.tflops * 1e12)


def _loss(points: tuple[GemmPoint, ...], hw: HardwareProfile) -> float:
    errors = [math.log(gemm_time_s(p, hw) / measured_time_s(p)) for p in points]
    return sum(e * e for e in errors) / len(errors)


def _groups(sweeps: tuple[GemmSweep, ...], hw: HardwareProfile
            ) -> tuple[dict[str, list[tuple[GemmPoint, str]]], list[str]]:
    groups: dict[str, list[tuple[GemmPoint, str]]] = {}
    for sweep in sweeps:
        for p in sweep.points:
            if not hw.has_dtype(p.dtype):
                raise InputError(sweep.source, f"line {p.line}", (
                    f"dtype {p.dtype}: the base profile '{hw.name}' has no peak for it "
                    "(peak_tflops); choose a base that has, with --base"))
            groups.setdefault(_KEYS[p.dtype], []).append((p, sweep.source))
    notes = []
    main = groups.get(_KEYS["bf16"], [])
    if any(p.dtype in ("bf16", "fp16") for p, _ in main):
        kept = [(p, s) for p, s in main if p.dtype in ("bf16", "fp16")]
        if len(kept) < len(main):
            notes.append(f"{len(main) - len(kept)} fp32/tf32 rows left out: "
                         "gemm_peak_fraction is fitted to the bf16/fp16 rows")
        groups[_KEYS["bf16"]] = kept
    return groups, notes


def _gemm_loss(points: tuple[GemmPoint, ...], hw: HardwareProfile, key: str
               ) -> Callable[[float], float]:
    return lambda x: _loss(points, burst(with_value(hw, key, x)))


def fit_gemm(sweeps: tuple[GemmSweep, ...], hw: HardwareProfile) -> GemmFit:
    """Fit each covered peak fraction (see the module docstring)."""
    groups, notes = _groups(sweeps, hw)
    values: dict[str, object] = {}
    sources: dict[str, tuple[str, ...]] = {}
    fitted: dict[str, tuple[GemmPoint, ...]] = {}
    for key, rows in groups.items():
        points = tuple(p for p, _ in rows)
        best = minimise(_gemm_loss(points, hw, key), 0.01, 1.0)
        hw = with_value(hw, key, round(best, 3))
        values[key] = round(best, 3)
        sources[key] = tuple(dict.fromkeys(s for _, s in rows))
        fitted[key] = points
    return GemmFit(hw, values, sources, fitted, tuple(notes))
