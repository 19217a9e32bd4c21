"""`shardsim schema`: the JSON Schema of the scenario format, for editor completion."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from simulator.cli._common import EXIT_OK, emit_json, guarded

__all__ = ["schema"]

# `model: {from_hf: NAME, ...}` is expanded into a transformer before validation
# (simulator/config/scenario/hf.py), so pydantic's schema does not know it
_FROM_HF = {
    "type": "object", "required": ["from_hf"], "title": "ModelFromHf",
    "description": "A transformer read from a Hugging Face config.json; every other key "
                   "written here (seq_length, dtype, moe, ...) is a transformer key that "
                   "overrides the config's value.",
    "properties": {"from_hf": {
        "type": "string",
        "description": "A bundled config name (llama-2-7b, mixtral-8x7b, gpt2, ...) or the "
                       "path of a config.json, relative to the scenario file."}},
    "additionalProperties": True,
}


def _with_from_hf(model: dict[str, Any]) -> dict[str, Any]:
    """The model property: one of the model types, or a `from_hf` mapping."""
    return {"title": model.get("title", "Model"), "anyOf": [model, _FROM_HF]}


def schema(
    hardware: Annotated[bool, typer.Option(
        "--hardware", metavar="",
        help="The schema of a hardware profile instead of a scenario.")] = False,
) -> None:
    """Print the JSON Schema of the scenario YAML format (pydantic's model_json_schema).

    Point an editor at it, e.g. `# yaml-language-server: $schema=scenario.schema.json`."""
    with guarded() as stdout:
        from simulator.config.hardware.schema import HardwareProfile
        from simulator.config.scenario.schema import Scenario

        model = HardwareProfile if hardware else Scenario
        doc = model.model_json_schema(mode="validation")
        if not hardware:
            doc["properties"]["model"] = _with_from_hf(doc["properties"]["model"])
        doc["$schema"] = "https://json-schema.org/draft/2020-12/schema"
        doc["title"] = "shardsim hardware profile" if hardware else "shardsim scenario"
        emit_json(doc, stdout)
    raise typer.Exit(EXIT_OK)
