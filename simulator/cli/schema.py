"""`shardsim schema`: the JSON Schema of the scenario format, for editor completion."""

from __future__ import annotations

from typing import Annotated

import typer

from simulator.cli._common import EXIT_OK, emit_json, guarded

__all__ = ["schema"]

def schema(
    hardware: Annotated[bool, typer.Option(
        "--hardware", metavar="",
        help="The schema of a hardware profile instead of a scenario.")] = False,
) -> None:
    """Print the JSON Schema of the scenario YAML format (pydantic's model_json_schema).

    Point an editor at it, e.g. `# yaml-language-server: $schema=scenario.schema.json`."""
    with guarded() as stdout:
        from simulator import api  # the schema's models load here, not at start-up

        emit_json(api.json_schema(hardware), stdout)
    raise typer.Exit(EXIT_OK)
