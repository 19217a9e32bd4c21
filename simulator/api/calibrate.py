"""`shardsim calibrate`: a hardware profile fitted to the user's own nccl-tests logs and GEMM
sweep (issue 27; simulator/calibrate, docs/calibrate.md). Imports what it needs when called."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

__all__ = ["calibrate_profile"]


def calibrate_profile(logs: list[str], gemm: list[str], base: str | None = None,
                      name: str | None = None, collective: str | None = None
                      ) -> dict[str, Any]:
    """The profile calibrated from nccl-tests `logs` and GEMM sweeps `gemm` (paths),
    starting from `base` (a bundled name or a path; default: the profile the measured
    device's name matches): `yaml` (the profile's text), `base`, `name`, `fields` (key, base,
    value, sources of every replaced figure), `summary` (per file: points, median and worst
    error in % of the modelled busbw or TFLOP/s on the written profile), `checks` (every
    point: source, line, what, measured, modelled, error_pct), `notes`. InputError naming
    the file and line of a measurement it cannot read."""
    # imported when called: `import simulator` and the CLI start cheap
    from simulator.calibrate import calibrate, summary

    result = calibrate(list(logs), list(gemm), base, name, collective)
    return {"base": result.base, "name": result.name, "yaml": result.yaml,
            "fields": [asdict(f) for f in result.fields],
            "summary": summary(result.checks),
            "checks": [{**asdict(c), "error_pct": c.error_pct} for c in result.checks],
            "notes": list(result.notes)}
