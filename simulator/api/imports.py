"""`shardsim import FORMAT SOURCE`: a scenario from a training framework's own launch
configuration (issue 27; simulator/config/imports). Each function imports what it needs
when called."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from simulator.errors import InputError

__all__ = ["import_config", "emit_config"]


def import_config(fmt: str, source: str, hardware: str = "h100-sxm",
                  nodes: int | None = None, per_node: int | None = None,
                  lenient: bool = False, command: str = "shardsim import",
                  fills: dict[str, Any] | None = None) -> dict[str, Any]:
    """The scenario SOURCE (a file in format `fmt`: `megatron`, `torchtitan`, `deepspeed`)
    imports to, validated:
    `scenario` (the mapping), `yaml` (its text, with comments naming the source), `rows`
    (what each flag became: flag, value, line, kind, detail), `notes`, `devices`.
    `fills` (deepspeed): model, seq_length, micro_batch_size, grad_accum, dtype, recompute.
    InputError naming the file, line and flag otherwise."""
    # imported when called: `import simulator` and the CLI start cheap
    from simulator.config.imports.formats import Fills
    from simulator.config.imports.load import import_file, scenario_yaml

    imported, scenario = import_file(fmt, source, hardware, nodes, per_node, lenient,
                                     Fills(**fills) if fills else None)
    return {"source": source, "format": fmt, "devices": scenario.devices,
            "scenario": imported.scenario, "rows": [asdict(r) for r in imported.rows],
            "notes": list(imported.notes),
            "yaml": scenario_yaml(imported, source, command, fmt)}


def emit_config(fmt: str, loaded: Any, overrides: list[str]) -> str:
    """The launch of `loaded` (a scenario as `load_scenario` gives it) with `overrides` (a
    plan's `--set` items) in format `fmt` (`megatron`: a torchrun line of Megatron-LM
    arguments; `torchtitan`: a job config TOML; `mindformers`: a run config YAML; `bridge`
    or `nemo`: Megatron-Bridge's dotted overrides, NeMo's current stack), which
    `import_config` reads back to the same scenario; InputError naming the keys the format
    cannot say."""
    # imported when called: `import simulator` and the CLI start cheap
    from simulator.api.core import load_hardware, load_scenario
    from simulator.config.framework.load import framework_for
    from simulator.config.imports.bridge_emit import emit_bridge
    from simulator.config.imports.megatron_emit import emit_megatron
    from simulator.config.imports.mindformers_emit import emit_mindformers
    from simulator.config.imports.torchtitan_emit import emit_torchtitan

    if fmt not in ("megatron", "torchtitan", "mindformers", "bridge", "nemo"):
        raise InputError("--emit", "", f"found {fmt!r}; allowed: megatron, torchtitan, "
                         "mindformers, bridge (or nemo)")
    ref = str(loaded.path) if loaded.path is not None else loaded.scenario.source
    plan = load_scenario(ref, [*loaded.overrides, *overrides])
    fw = framework_for(plan.scenario, load_hardware(plan))
    if fmt == "torchtitan":
        return emit_torchtitan(plan.scenario, fw.name)
    if fmt == "mindformers":
        return emit_mindformers(plan.scenario, fw.name)
    if fmt in ("bridge", "nemo"):
        return emit_bridge(plan.scenario, fw.name, fw.overlap.tp_comm_enabled)
    return emit_megatron(plan.scenario, fw.name, fw.overlap.tp_comm_enabled)
