"""The bundled profile a calibration starts from: named (`--base`), or the one whose name
the measured device's name carries ('NVIDIA H100 80GB HBM3' -> h100-sxm, 'NVIDIA
A100-SXM4-80GB' -> a100-80gb)."""

from __future__ import annotations

import re

from simulator.config.resources import list_bundled
from simulator.errors import InputError

__all__ = ["choose_base"]


def _tokens(text: str) -> set[str]:
    return {t for t in re.split(r"[^a-z0-9]+", text.lower()) if t}


def _score(profile: str, device: set[str]) -> int:
    """How many of the profile name's parts the device name has; 0 unless the first (the
    chip: h100, a100, gb300, ascend) is among them."""
    parts = [p for p in profile.lower().split("-") if p]
    if not parts or parts[0] not in device:
        return 0
    return sum(1 for p in parts if p in device)


def choose_base(devices: list[str], where: str) -> str:
    """The bundled profile that best matches `devices` (the names the measurements give);
    InputError (naming `where`) when none or several match equally."""
    names = list_bundled("hardware_profiles")
    device = set().union(*(_tokens(d) for d in devices)) if devices else set()
    scored = sorted(((_score(n, device), n) for n in names), reverse=True)
    best = [n for s, n in scored if s and s == scored[0][0]]
    if len(best) != 1:
        said = "; ".join(sorted(set(devices))) or "no device name"
        why = f"several match ({', '.join(sorted(best))})" if best else "none matches"
        raise InputError(where, "--base", f"the measurements name {said!r} and {why}: "
                         f"choose the profile to start from with --base (bundled: "
                         f"{', '.join(names)}, or a YAML path)")
    return best[0]
