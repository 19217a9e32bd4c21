"""A scenario as the commands load it: a file or a bundled name (or, from the Python API, a
plain mapping), `--set` overrides split between the scenario and its hardware profile, the
profile loaded with its overrides, and the checks every command shares."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simulator.config.framework.load import framework_for
from simulator.config.hardware.cluster import cluster_hardware
from simulator.config.hardware.load import load_profile
from simulator.config.resources import is_file, list_bundled, resolve_yaml
from simulator.config.scenario import parse_scenario, resolve_hardware, split_overrides
from simulator.config.yamlio import blame_override, did_you_mean, parse_override, read_yaml_file
from simulator.errors import InputError

__all__ = ["LoadedScenario", "scenario_path", "load_scenario", "load_hardware",
           "check_overrides", "check_supported", "nvme_refused", "load_checked", "shorten",
           "NAME_MAX_BYTES"]


def check_overrides(overrides: Sequence[str]) -> None:
    """InputError for the first `--set` item that is not KEY=VALUE with a dotted key."""

    for item in overrides:
        parse_override(item)


@dataclass(frozen=True)
class LoadedScenario:
    """A validated scenario, the profile file it names, and the `hardware.` overrides."""

    scenario: Any
    hardware_path: Path
    hardware_overrides: list[str]
    stem: str
    overrides: tuple[str, ...] = ()
    path: Path | None = None  # the scenario file (None: a mapping)

    @property
    def scenario_overrides(self) -> list[str]:
        """The `--set` items that override the scenario itself (not `hardware.` fields)."""
        return list(split_overrides(self.overrides)[0])


def _short_list(names: list[str]) -> str:
    """Top-level names in full, each subfolder as `folder/* (N)`, to keep messages short."""
    top = [n for n in names if "/" not in n]
    folders: dict[str, int] = {}
    for n in names:
        if "/" in n:
            folders[n.split("/")[0]] = folders.get(n.split("/")[0], 0) + 1
    return ", ".join(top + [f"{f}/* ({k})" for f, k in folders.items()]) or "(none)"


def scenario_path(arg: str) -> tuple[Path, str]:
    """The file SCENARIO names and how messages call it; InputError when there is none (or
    when it is a name no file system holds)."""

    long = [p for p in Path(arg).parts if len(os.fsencode(p)) > NAME_MAX_BYTES]
    if long:
        raise InputError(shorten(arg), "", f"a name of {len(os.fsencode(long[0])):,} bytes; "
                         f"a file system allows at most {NAME_MAX_BYTES}")
    path = resolve_yaml(arg, "scenarios")
    if path is None:
        names = list_bundled("scenarios")
        hint = did_you_mean(arg, names)
        raise InputError(shorten(arg), "", f"no such file or bundled scenario{hint}; bundled: "
                         f"{_short_list(names)} (`shardsim scenarios` lists them)")
    shown = arg if is_file(Path(arg)) else f"scenarios/{arg}.yaml"
    return path, shown


NAME_MAX_BYTES = 255  # a file or folder name, on every common file system


def shorten(text: str, keep: int = 80) -> str:
    """`text` cut to `keep` characters for a message (a 4,000-character path is unreadable)."""
    return text if len(text) <= keep else f"{text[:keep - 30]}...{text[-27:]}"


def load_scenario(arg: str | Mapping[str, Any], overrides: Sequence[str] = (),
                  source: str = "<dict>") -> LoadedScenario:
    """Read and validate SCENARIO (a path, a bundled name, or a mapping of the YAML's keys
    called `source` in messages) with `--set` overrides. A mapping's relative paths
    (`hardware:` files, `from_hf:` configs) are looked up from the current folder."""

    check_overrides(overrides)
    file: Path | None = None
    if isinstance(arg, Mapping):
        data: Any = dict(arg)
        folder, shown, stem = Path.cwd(), source, Path(source).stem
    else:
        file, shown = scenario_path(arg)
        data, folder, stem = read_yaml_file(file, shown), file.parent, file.stem
    # the file is read (a hostile one refused) before the validation code is imported

    scen_o, hw_o = split_overrides(overrides)
    scenario = parse_scenario(data, shown, scen_o)
    hw_path = resolve_hardware(scenario, folder, scen_o)
    return LoadedScenario(scenario, hw_path, hw_o, stem, tuple(overrides), file)


def load_hardware(loaded: LoadedScenario) -> Any:
    """The scenario's hardware profile with the `--set hardware.KEY=VALUE` overrides; an
    error caused by one of them names it."""

    try:
        return load_profile(str(loaded.hardware_path), loaded.hardware_overrides)
    except InputError as err:
        raise blame_override(err, loaded.hardware_overrides, "hardware.") from None


def check_supported(loaded: LoadedScenario, hw: Any) -> None:
    """What `run` refuses and a scenario alone cannot tell, checked the same way for every
    command: a dtype the device has no peak for. (Offloads that are not simulated are a
    scenario rule, simulator.config.scenario.rules.)"""

    scenario = loaded.scenario
    dtype = scenario.model.dtype
    framework_for(scenario, hw)  # a framework: that is no framework profile, before any work
    err = _no_peak(hw, dtype)
    if err is not None:
        raise InputError(err.source, err.key, f"{err.message} (the scenario's model.dtype "
                         f"is {dtype})")
    _fp4_refused(scenario, hw, "training.fp4_recipe")
    if scenario.training.fp8_scaling == "mxfp8" and not hw.fp8_gemm_any_layout:
        raise InputError(scenario.source, "training.fp8_scaling",
                         f"mxfp8 is Blackwell's block-scaled FP8; '{hw.name}' has no MXFP8 "
                         "GEMMs (Transformer Engine's MXFP8BlockScaling needs compute "
                         "capability 10.0); with them: b200-sxm, gb200-nvl72, b300-sxm, "
                         "gb300-nvl72")
    nvme_refused(scenario, hw)
    if scenario.cluster.node_types is None:
        return

    # every node kind loads and runs the model's dtype, for `verify` as for `run`
    cluster = cluster_hardware(scenario, hw)
    first_node = 0
    for i, t in enumerate(scenario.cluster.node_types):
        prof = cluster.profiles[cluster.kind[first_node * scenario.cluster.devices_per_node]]
        first_node += t.nodes
        err = _no_peak(prof, dtype)
        if err is not None:
            raise InputError(scenario.source, f"cluster.node_types[{i}].hardware",
                             f"{err.message} (the scenario's model.dtype is {dtype})")
        _fp4_refused(scenario, prof, f"cluster.node_types[{i}].hardware")


def _fp4_refused(scenario: Any, hw: Any, key: str) -> None:
    """An InputError at `key` when the scenario's FP4 recipe meets a device without FP4
    tensor cores (a profile with no `peak_tflops.fp4`)."""
    fp4 = scenario.training.fp4_recipe
    if fp4 != "none" and not hw.has_dtype("fp4"):
        what = fp4 if key == "training.fp4_recipe" else f"training.fp4_recipe {fp4}"
        raise InputError(scenario.source, key,
                         f"{what} runs GEMMs on FP4 tensor cores; "
                         f"'{hw.name}' has none (its profile gives no peak_tflops.fp4); "
                         f"Blackwell has them: b200-sxm, gb200-nvl72, b300-sxm, gb300-nvl72")


def nvme_refused(scenario: Any, hw: Any) -> None:
    """An InputError at parallel.offload.optimizer_states when the states go to NVMe on a
    profile that gives no NVMe figures (no public source states its system's drives)."""
    missing = hw.nvme_fields
    if scenario.parallel.offload.optimizer_on_nvme and missing:
        raise InputError(scenario.source, "parallel.offload.optimizer_states",
                         f"nvme needs the node's NVMe drives; '{hw.name}' gives no "
                         f"{', '.join(missing)} (set them with --set hardware.host.nvme_GB=... "
                         "etc., or offload to host memory: optimizer_states true); profiles "
                         "with NVMe: a100-40gb, a100-80gb, h100-sxm, h200-sxm, b200-sxm")


def _no_peak(hw: Any, dtype: str) -> InputError | None:
    """The profile's own refusal of `dtype` when it has no peak for it, else None."""
    if hw.has_dtype(dtype):
        return None
    try:
        hw.peak_flops_per_s(dtype)
    except InputError as err:
        return err
    return None


def load_checked(arg: str, overrides: Sequence[str]) -> tuple[LoadedScenario, Any]:
    """The scenario, its hardware profile, and the checks `run` and `verify` share (an
    error names the `--set` that caused it: `guarded`)."""
    loaded = load_scenario(arg, overrides)
    hw = load_hardware(loaded)
    check_supported(loaded, hw)
    return loaded, hw
