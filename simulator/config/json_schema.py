"""The JSON Schema of the scenario YAML format (pydantic's model_json_schema, with the
`from_hf` form of the model) and of a hardware profile, for editor completion."""

from __future__ import annotations

from typing import Any

from simulator.config.hardware.schema import HardwareProfile
from simulator.config.scenario.schema import Scenario

__all__ = ["json_schema"]

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


# `from: {megatron_args: FILE}` (or torchtitan_toml, deepspeed_config, ...) is expanded into
# the scenario it imports to before validation (simulator/config/imports/key.py)
_FROM = {
    "type": "object", "title": "From",
    "oneOf": [{"required": ["megatron_args"]}, {"required": ["torchtitan_toml"]},
              {"required": ["deepspeed_config"]}, {"required": ["mindformers_yaml"]},
              {"required": ["nemo_yaml"]}, {"required": ["bridge_config"]}],
    "description": "A scenario imported from a training framework's own launch configuration "
                   "(`shardsim import`); the keys written beside `from` override the "
                   "imported ones.",
    "properties": {
        "megatron_args": {"type": "string", "description": (
            "A file of Megatron-LM arguments or a launch script with a `torchrun ... "
            "pretrain_gpt.py ARGS` line, relative to the scenario file.")},
        "torchtitan_toml": {"type": "string", "description": (
            "A torchtitan job config (TOML), relative to the scenario file; the world size "
            "is the scenario's cluster.")},
        "deepspeed_config": {"type": "string", "description": (
            "A DeepSpeed config (JSON), relative to the scenario file; the model is the "
            "scenario's model section, the world size its cluster.")},
        "mindformers_yaml": {"type": "string", "description": (
            "A MindFormers run config (YAML), relative to the scenario file; the world size "
            "is the scenario's cluster.")},
        "nemo_yaml": {"type": "string", "description": (
            "A NeMo training config (YAML: a NeMo-Framework-Launcher conf/training file), "
            "relative to the scenario file; the world size is its trainer's unless the "
            "scenario's cluster says otherwise.")},
        "bridge_config": {"type": "string", "description": (
            "A Megatron-Bridge ConfigContainer YAML or a file of its dotted overrides "
            "(NeMo 2's names too), relative to the scenario file; the world size is the "
            "scenario's cluster.")},
        "lenient": {"type": "boolean", "default": False, "description": (
            "Import without the flags that have no scenario key instead of refusing them.")}},
    "additionalProperties": False,
}


def _with_from_hf(model: dict[str, Any]) -> dict[str, Any]:
    """The model property: one of the model types, or a `from_hf` mapping (the property's
    description beside them)."""
    types = {k: v for k, v in model.items() if k != "description"}
    return {"title": model.get("title", "Model"), "description": model["description"],
            "anyOf": [types, _FROM_HF]}


def json_schema(hardware: bool = False) -> dict[str, Any]:
    """The schema document `shardsim schema [--hardware]` prints."""
    model = HardwareProfile if hardware else Scenario
    doc = model.model_json_schema(mode="validation")
    if not hardware:
        doc["properties"]["model"] = _with_from_hf(doc["properties"]["model"])
        doc["properties"]["from"] = _FROM
        # a model, or a `from` that gives it
        doc["required"] = [k for k in doc.get("required", []) if k != "model"]
        doc["anyOf"] = [{"required": ["model"]}, {"required": ["from"]}]
    doc["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    doc["title"] = "shardsim hardware profile" if hardware else "shardsim scenario"
    return doc
