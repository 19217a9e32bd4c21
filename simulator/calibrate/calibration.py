"""`shardsim calibrate`: a hardware profile from the user's own nccl-tests logs and GEMM sweep.

It starts from a bundled profile (named, or the one the measured device's name matches),
fits the figures the measurements cover through the models `comm` and `run` price with
(`comm_fit`, `gemm_fit`), writes the base's YAML with those fields replaced, each commented
with the files it came from, reads the result back through the profile schema, and prices
every measured point on it: the checks it returns are what `shardsim comm` (and, for GEMMs,
the kernel model of `run` at full clocks) gives for each measured point.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

from simulator.calibrate.base import choose_base
from simulator.calibrate.comm_fit import CURVE_KEY, fit_comm
from simulator.calibrate.gemm_fit import burst, fit_gemm, gemm_time_s
from simulator.calibrate.profile_text import set_field
from simulator.calibrate.values import get_value
from simulator.config.hardware import load_profile
from simulator.config.hardware.load import parse_profile
from simulator.config.hardware.schema import HardwareProfile
from simulator.config.measurements import (
    GemmSweep,
    NcclLog,
    read_gemm_sweep,
    read_nccl_log,
    read_text,
)
from simulator.config.measurements.nccl_log import bus_factor
from simulator.config.resources import resolve_yaml
from simulator.config.yamlio import load_yaml_text
from simulator.cost.collectives import comm_benchmark
from simulator.errors import InputError

__all__ = ["Field", "Check", "Calibration", "calibrate", "summary"]


@dataclass(frozen=True)
class Field:
    """One replaced figure: dotted key, the base's value, the fitted one, the files."""

    key: str
    base: object
    value: object
    sources: tuple[str, ...]


@dataclass(frozen=True)
class Check:
    """One measured point priced on the written profile: the file and line, what it is,
    measured and modelled figure (busbw GB/s or TFLOP/s) and the error in %."""

    source: str
    line: int
    what: str
    measured: float
    modelled: float

    @property
    def error_pct(self) -> float:
        return 100.0 * (self.modelled / self.measured - 1.0)


@dataclass(frozen=True)
class Calibration:
    """The written profile (`yaml`), its base, the replaced fields, the checks, notes."""

    base: str
    name: str
    yaml: str
    fields: tuple[Field, ...]
    checks: tuple[Check, ...]
    notes: tuple[str, ...]


def calibrate(logs: list[str], sweeps: list[str], base: str | None = None,
              name: str | None = None, collective: str | None = None) -> Calibration:
    """Calibrate from nccl-tests logs and GEMM sweeps (paths); see the module docstring.
    `collective` names the collective of logs that do not say it themselves."""
    if not logs and not sweeps:
        raise InputError("calibrate", "", "nothing to calibrate from: give nccl-tests logs "
                         "and/or a GEMM sweep (--gemm FILE)")
    parsed = tuple(read_nccl_log(p, collective) for p in logs)
    gemm = tuple(read_gemm_sweep(p) for p in sweeps)
    devices = [d for d in (*(x.device for x in parsed), *(g.device for g in gemm)) if d]
    base = base or choose_base(devices, (logs or sweeps)[0])
    base_hw = load_profile(base)
    for log in parsed:
        _check_nodes(log, base_hw)
    hw, fields, notes = _fit(parsed, gemm, base_hw)
    name = name or f"{base_hw.name}-calibrated"
    text = _write(base, base_hw, fields, name, [*logs, *sweeps])
    written = parse_profile(load_yaml_text(text), name)
    for f in fields:  # what was written is what was fitted
        assert get_value(written, f.key) == get_value(hw, f.key), f.key
    checks = (*_comm_checks(parsed, written), *_gemm_checks(gemm, written))
    return Calibration(base_hw.source, name, text, tuple(fields), checks, notes)


def _check_nodes(log: NcclLog, hw: HardwareProfile) -> None:
    """Ranks across nodes must fill whole nodes, as `comm` and `run` place them."""
    per_node = log.ranks_per_node or hw.devices_per_node_default
    if log.ranks > per_node and log.ranks % per_node:
        said = "its rank lines" if log.ranks_per_node else f"the base profile ({hw.name})"
        raise InputError(log.source, "", f"{log.ranks} ranks with {per_node} per node (from "
                         f"{said}) do not fill whole nodes; expected a multiple of {per_node}")


def _fit(logs: tuple[NcclLog, ...], sweeps: tuple[GemmSweep, ...], hw: HardwareProfile
         ) -> tuple[HardwareProfile, list[Field], tuple[str, ...]]:
    fields: list[Field] = []
    notes: tuple[str, ...] = ()
    base = hw
    if logs:
        comm = fit_comm(logs, hw)
        hw = comm.hw
        fields += [Field(k, get_value(base, k), v, comm.sources[k])
                   for k, v in comm.values.items()]
    if sweeps:
        gemm = fit_gemm(sweeps, hw)
        hw, notes = gemm.hw, gemm.notes
        fields += [Field(k, get_value(base, k), v, gemm.sources[k])
                   for k, v in gemm.values.items()]
    return hw, fields, notes


def _comment(f: Field) -> str:
    files = ", ".join(Path(s).name for s in f.sources)
    was = "a measured curve" if f.key == CURVE_KEY else f.base
    return f"calibrated from {files} (shardsim calibrate; base: {was})"


def _write(base: str, hw: HardwareProfile, fields: list[Field], name: str,
           files: list[str]) -> str:
    path = resolve_yaml(base, "hardware_profiles")
    assert path is not None  # load_profile found it
    text = read_text(str(path), "hardware profile")
    for f in fields:
        text = set_field(text, f.key, f.value, _comment(f))
    text = set_field(text, "name", name, f"{hw.name} calibrated by shardsim calibrate")
    header = ["# Written by `shardsim calibrate` from", *(f"#   {f}" for f in files),
              f"# starting from {hw.source}: the fields commented 'calibrated from' were "
              "fitted to those", "# measurements; every other figure is the base's, with "
              "its source.", ""]
    return "\n".join(header) + text


def _comm_checks(logs: tuple[NcclLog, ...], hw: HardwareProfile) -> list[Check]:
    out = []
    for log in logs:
        per_node = min(log.ranks_per_node or hw.devices_per_node_default, log.ranks)
        factor = bus_factor(log.collective, log.ranks)
        for p in log.points:
            res = comm_benchmark(log.collective, p.nbytes, log.ranks, per_node, hw)
            measured = factor * p.nbytes / p.time_us / 1e3
            out.append(Check(log.source, p.line, f"{log.collective} {p.nbytes} B",
                             measured, float(res["busbw_GBps"])))
    return out


def _gemm_checks(sweeps: tuple[GemmSweep, ...], hw: HardwareProfile) -> list[Check]:
    fast = burst(hw)
    return [Check(s.source, p.line, f"{p.dtype} {p.m}x{p.n}x{p.k}", p.tflops,
                  2.0 * p.m * p.n * p.k / gemm_time_s(p, fast) / 1e12)
            for s in sweeps for p in s.points]


def summary(checks: tuple[Check, ...]) -> list[dict[str, object]]:
    """Per file: points, median and worst absolute error (%) of the modelled figure."""
    rows = []
    for source in dict.fromkeys(c.source for c in checks):
        mine = [c for c in checks if c.source == source]
        errors = [abs(c.error_pct) for c in mine]
        rows.append({"file": source, "points": len(mine),
                     "median_error_pct": statistics.median(errors),
                     "worst_error_pct": max(errors)})
    return rows
