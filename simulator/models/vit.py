"""The `vit` family: a vision transformer (Dosovitskiy et al. 2021; `config.scenario.
schema_models.VitModel`), built as a transformer graph with a patch stem and a class-token
head (`graph.builders.build_gpt` with `GptDims.patch`), so that the transformer's plans
(`models.transformer_plan`), program (`program.model_program`) and planner serve it as
they are: its patch embedding, class token and class-token selection run replicated on the
tensor-parallel ranks (as Megatron-LM's ViT runs its patch projection), its encoder blocks
and class head as a transformer's layers and LM head. Its verification case keeps the
scenario's dims where small, else the transformer's shrunk dims with a small image of
2 x 2 patches (or the fewest patches whose tokens the tensor-parallel ranks split under
sequence parallelism)."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from simulator.config.scenario.schema import Scenario
from simulator.config.scenario.schema_models import VitModel
from simulator.graph.builders import build_gpt
from simulator.graph.decoder import GptDims
from simulator.graph.graph import Graph
from simulator.models.family import ModelFamily, VerifyCase
from simulator.models.transformer import gpt_case, small_gpt
from simulator.models.transformer_plan import gpt_dims, uses_flash

__all__ = ["FAMILY"]

# a unit (block) starts at the patch embedding, at each layer's first norm and at the final
# norm
_UNIT_START = re.compile(r"embed_patch|l\d+\.ln1|lnf")
_SMALL_PATCH = 2  # pixels of a shrunk model's patch


def _grid(m: VitModel, s: Scenario) -> int:
    """Patches per side of a shrunk image: 2, or under sequence parallelism the fewest
    whose tokens (patches and the class token) the tensor-parallel ranks split evenly (the
    scenario's own grid does, `transformer_rules.shape`)."""
    own = m.image_size // m.patch_size
    if not s.parallel.sequence_parallel:
        return min(own, 2)
    t = s.parallel.tensor
    return next((g for g in range(2, own) if (g * g + 1) % t == 0), own)


def _small_vit(m: VitModel, s: Scenario, dims: GptDims, notes: list[str]
               ) -> tuple[GptDims, list[str]]:
    """`dims` (the transformer's shrunk dims) with a small image: its sequence the patches
    and the class token, as many classes as the shrunk vocabulary."""
    if not notes:
        return dims, notes
    grid = _grid(m, s)
    seq = grid * grid + 1
    small = dataclasses.replace(dims, patch=_SMALL_PATCH, image=_SMALL_PATCH * grid,
                                channels=min(m.channels, 3), seq=seq)
    first = notes[0].replace(f" seq={dims.seq} ", " ").replace(" vocab=", " classes=")
    first = first.replace("shrunk to ", f"shrunk to image={small.image} patch={small.patch} "
                                        f"channels={small.channels} (seq={seq}) ", 1)
    return small, [first, *notes[1:]]


def _case(s: Scenario, fused_attention: bool) -> VerifyCase:
    """The verification case of a vision transformer scenario (`ModelFamily.case`)."""
    m = s.model
    assert isinstance(m, VitModel)
    dims, notes = small_gpt(m, s, uses_flash(s, fused_attention))
    dims, notes = _small_vit(m, s, dims, notes)
    return gpt_case(s, dims, notes)


def _graph(s: Any, batch: int) -> Graph:
    return build_gpt(dataclasses.replace(gpt_dims(s, uses_flash(s)), batch=batch))


FAMILY = ModelFamily("vit", layered=True, unplanned=_graph,
                     unit_start=lambda name: _UNIT_START.fullmatch(name) is not None,
                     case=_case)
