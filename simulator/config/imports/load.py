"""Importing a foreign launch configuration into a validated scenario: `shardsim import
FORMAT SOURCE` (`import_file`; the scenario key `from: {megatron_args: FILE}` and its
siblings are `key.expand_from`), through each format's reader (`megatron.import_megatron`,
`torchtitan.import_torchtitan`)."""

from __future__ import annotations

from typing import Any

from simulator.config.imports.formats import LABELS, Fills, read_format
from simulator.config.imports.megatron import Imported
from simulator.config.scenario.load import parse_scenario
from simulator.errors import InputError

__all__ = ["import_file", "scenario_yaml", "FORMATS"]

FORMATS = tuple(LABELS)


def _blame(err: InputError, imported: Imported, path: str) -> InputError:
    """A validation error of the imported scenario, named by the flag its key came from
    (the last flag of the file that sets that key or a key above it)."""
    rows = [r for r in imported.rows if r.kind == "mapped" and r.line and (
        err.key == r.detail or err.key.startswith(r.detail + "."))]
    if not rows:
        return InputError(path, err.key, f"{err.message} (in the imported scenario)")
    row = rows[-1]
    return InputError(f"{path}:{row.line}", row.flag, f"{row.value}: {err.message} "
                      f"(scenario key {err.key})")


def import_file(fmt: str, path: str, hardware: str = "h100-sxm", nodes: int | None = None,
                per_node: int | None = None, lenient: bool = False,
                fills: Fills | None = None) -> tuple[Imported, Any]:
    """(what the import made, the validated Scenario) of the file at `path` (or the bundled
    launch script of that name) in format `fmt`."""
    if fmt not in FORMATS:
        raise InputError("FORMAT", "", f"found {fmt!r}; allowed: {', '.join(FORMATS)}")
    imported, shown = read_format(fmt, path, hardware, nodes, per_node, lenient, fills=fills)
    try:
        scenario = parse_scenario(dict(imported.scenario), shown)
    except InputError as err:
        raise _blame(err, imported, shown) from None
    return imported, scenario


def scenario_yaml(imported: Imported, source: str, command: str, fmt: str = "megatron"
                  ) -> str:
    """The scenario as YAML, headed by comments naming the file it came from, the command,
    and the notes of the import."""
    import yaml

    head = [f"# imported from {source} ({LABELS[fmt]}) by `{command}`"]
    head += [f"# note: {n}" for n in imported.notes]
    body = yaml.safe_dump(imported.scenario, sort_keys=False, default_flow_style=False)
    return "\n".join(head) + "\n" + body
