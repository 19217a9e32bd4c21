"""The model-family registry: the one place that maps `model.type` to what the rest of
shardsim needs of a model (`models.family.ModelFamily`). A new family is a module of
`simulator.models` that defines FAMILY, and its schema class (`config.scenario.
schema_models`: its keys, its answers to the scenario rules, and `family_module`, the name
of that module) in the `ModelSpec` union; the registry finds the families through the
schema classes, so nothing here lists them."""

from __future__ import annotations

from importlib import import_module
from typing import Any

from simulator.config.scenario.schema_models import model_classes
from simulator.models.family import ModelFamily

__all__ = ["FAMILIES", "family"]


def _families() -> dict[str, ModelFamily]:
    """{model.type: its family}, in the order of the schema's `ModelSpec` union."""
    out: dict[str, ModelFamily] = {}
    for cls in model_classes():
        fam = import_module(f"simulator.models.{cls.family_module}").FAMILY
        out[fam.name] = fam
    return out


FAMILIES: dict[str, ModelFamily] = _families()


def family(model: Any) -> ModelFamily:
    """The family of a scenario's model (or of a `model.type` name)."""
    name = model if isinstance(model, str) else model.type
    try:
        return FAMILIES[name]
    except KeyError:
        raise KeyError(f"no model family {name!r} (registered: {', '.join(FAMILIES)})") \
            from None
