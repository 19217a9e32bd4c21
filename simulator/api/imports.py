"""`shardsim import FORMAT SOURCE`: a scenario from a training framework's own launch
configuration (issue 27; simulator/config/imports). Each function imports what it needs
when called."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

__all__ = ["import_config"]


def import_config(fmt: str, source: str, hardware: str = "h100-sxm",
                  nodes: int | None = None, per_node: int | None = None,
                  lenient: bool = False, command: str = "shardsim import") -> dict[str, Any]:
    """The scenario SOURCE (a file in format `fmt`: `megatron`) imports to, validated:
    `scenario` (the mapping), `yaml` (its text, with comments naming the source), `rows`
    (what each flag became: flag, value, line, kind, detail), `notes`, `devices`.
    InputError naming the file, line and flag otherwise."""
    # imported when called: `import simulator` and the CLI start cheap
    from simulator.config.imports.load import import_file, scenario_yaml

    imported, scenario = import_file(fmt, source, hardware, nodes, per_node, lenient)
    return {"source": source, "format": fmt, "devices": scenario.devices,
            "scenario": imported.scenario, "rows": [asdict(r) for r in imported.rows],
            "notes": list(imported.notes),
            "yaml": scenario_yaml(imported, source, command)}
