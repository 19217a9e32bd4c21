"""Finding, reading and validating hardware profiles (bundled names or paths).

Every bad input becomes one InputError that names the file and the dotted key, says what
was found and what is allowed, with a did-you-mean for misspelled names and keys.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from simulator.config.hardware.schema import HardwareProfile
from simulator.config.resources import bundled_dir, list_bundled, resolve_yaml
from simulator.config.validation import validate_profile
from simulator.config.yamlio import apply_overrides, did_you_mean, read_yaml_file
from simulator.errors import InputError

__all__ = ["load_profile", "parse_profile", "list_profiles", "profile_summary", "raw_profile"]

_KIND = "hardware_profiles"


def parse_profile(data: dict[str, Any], source: str,
                  overrides: Sequence[str] = ()) -> HardwareProfile:
    """Validate a mapping (with `overrides`, dotted paths without `hardware.`) into a profile.

    An override of a key the schema does not know is reported against `--set hardware.KEY`.
    """
    hw = validate_profile(HardwareProfile, apply_overrides(data, list(overrides)), source)
    _check_curve(hw, source)
    return hw


def _check_curve(hw: HardwareProfile, source: str) -> None:
    """A measured curve is read by interpolation between neighbours, so its message sizes
    must increase: an unsorted one would give wrong times without a word."""
    curve = hw.intra_node.allreduce_busbw_GBps or ()
    for i in range(1, len(curve)):
        if curve[i][0] <= curve[i - 1][0]:
            raise InputError(source, f"intra_node.allreduce_busbw_GBps[{i}]", (
                f"message size {curve[i][0]:g} bytes after {curve[i - 1][0]:g}: the points "
                "must be in increasing order of message size, each size once"))


def load_profile(name_or_path: str, overrides: Sequence[str] = ()) -> HardwareProfile:
    """The profile `name_or_path` (a bundled name such as 'a100-80gb', or a YAML path) with
    `overrides` such as 'memory_GB=40' or 'intra_node.bandwidth_GBps=450' applied."""
    path = resolve_yaml(name_or_path, _KIND)
    if path is None:
        names = list_bundled(_KIND)
        hint = did_you_mean(name_or_path, names)
        raise InputError("hardware", "", f"unknown hardware profile '{name_or_path}'{hint}; "
                         f"bundled: {', '.join(names)} (or give a path to a YAML file)")
    return parse_profile(read_yaml_file(path), _display(path), overrides)


def raw_profile(name_or_path: str) -> dict[str, Any]:
    """The profile's YAML mapping as written (for telling file values from defaults)."""
    path = resolve_yaml(name_or_path, _KIND)
    if path is None:
        return {}  # load_profile, called first, has said what is wrong
    return read_yaml_file(path)


def _display(path: Any) -> str:
    """A short name for messages: 'hardware_profiles/x.yaml' for bundled files."""
    try:
        return str(path.resolve().relative_to(bundled_dir(_KIND).resolve().parent))
    except ValueError:
        return str(path)


def list_profiles() -> list[HardwareProfile]:
    """Every bundled profile, sorted by name."""
    return [load_profile(name) for name in list_bundled(_KIND)]


def profile_summary(hw: HardwareProfile) -> dict[str, Any]:
    """Key figures for the `shardsim profiles` table (datasheet units, None where absent)."""
    def tflops(dtype: str) -> float | None:
        return getattr(hw.peak_tflops, dtype)

    return {
        "name": hw.name,
        "description": hw.description,
        "bf16_tflops": tflops("bf16"),
        "fp16_tflops": tflops("fp16"),
        "fp32_tflops": tflops("fp32"),
        "fp8_tflops": tflops("fp8"),
        "memory_GB": hw.memory_GB,
        "memory_bandwidth_GBps": hw.memory_bandwidth_GBps,
        "intra_node_GBps": hw.intra_node.bandwidth_GBps,
        "intra_node_topology": hw.intra_node.topology,
        "nvls": hw.intra_node.nvls is not None,
        "nic_Gbps_per_node": hw.inter_node.nic_bandwidth_Gbps * hw.inter_node.nics_per_node,
        "devices_per_node": hw.devices_per_node_default,
    }
