"""The model-family registry: the one place that maps `model.type` to what the rest of
shardsim needs of a model (`models.family.ModelFamily`). A new family is a module that
defines FAMILY, one line here, and its schema class (`config.scenario.schema_models`: its
keys, and its answers to the scenario rules) in the `ModelSpec` union."""

from __future__ import annotations

from typing import Any

from simulator.models import mlp, opgraph, resnet, transformer
from simulator.models.family import ModelFamily

__all__ = ["FAMILIES", "family"]

FAMILIES: dict[str, ModelFamily] = {f.name: f for f in (
    transformer.FAMILY, mlp.FAMILY, resnet.FAMILY, opgraph.FAMILY)}


def family(model: Any) -> ModelFamily:
    """The family of a scenario's model (or of a `model.type` name)."""
    name = model if isinstance(model, str) else model.type
    try:
        return FAMILIES[name]
    except KeyError:
        raise KeyError(f"no model family {name!r} (registered: {', '.join(FAMILIES)})") \
            from None
