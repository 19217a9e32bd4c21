"""The rules of a transformer's attention variants (`TransformerModel`'s dense keys: head
size, positions, windows, sinks), each a (dotted key, message) problem: a value the
simulator cannot express is refused with its key and the reason."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from simulator.config.scenario.rule_helpers import Problem

if TYPE_CHECKING:
    from simulator.config.scenario.schema import Scenario
    from simulator.config.scenario.schema_models import TransformerModel, VitModel

__all__ = ["attention", "vit"]


def attention(m: TransformerModel, s: Scenario) -> Iterator[Problem]:
    """Rotary positions need an even head size; YaRN needs rotary positions; a window
    pattern needs a window; windows and sinks run in a fused attention kernel; sinks are not
    simulated under context parallel."""
    if m.positions == "rope" and m.head_size % 2:
        key = "model.head_dim" if m.head_dim is not None else "model.position"
        yield key, (f"rotary positions rotate pairs of a head's dims: the head size "
                    f"{m.head_size} must be even (or set model.position: learned or none)")
    if m.yarn_factor is not None and m.positions != "rope":
        yield "model.yarn_factor", (
            f"{m.yarn_factor}: YaRN rescales rotary positions, and model.position is "
            f"{m.positions} (allowed: null, or model.position: rope)")
    if m.global_every and m.sliding_window is None:
        yield "model.global_every", (
            f"{m.global_every}: a pattern of global layers needs model.sliding_window (the "
            f"window of the other layers); allowed: 0")
    fused = [k for k, on in (("model.sliding_window", m.sliding_window is not None),
                             ("model.attention_sinks", m.attention_sinks)) if on]
    if fused and m.attention == "standard":
        yield "model.attention", (
            f"standard (unfused) attention has no window and no sink logits ({fused[0]} is "
            f"set): they run in a fused kernel, FlashAttention's window_size (allowed: auto, "
            f"flash, fa2, fa3, cudnn, te)")
    if m.attention_sinks and s.parallel.context > 1:
        yield "model.attention_sinks", (
            f"sink logits under context parallel (ring attention over "
            f"parallel.context={s.parallel.context} ranks) are not simulated (allowed: false, "
            f"or parallel.context: 1)")


def vit(m: VitModel) -> Iterator[Problem]:
    """A vision transformer keeps its learned positions and untied class head and attends
    bidirectionally over the whole image."""
    if m.position not in (None, "learned"):
        yield "model.position", (f"{m.position}: a vision transformer adds learned positions "
                                 f"to its patches (allowed: learned, or leave it out)")
    if m.tie_embeddings:
        yield "model.tie_embeddings", ("true: a vision transformer has no token embedding "
                                       "to tie its class head to (allowed: false)")
    if m.sliding_window is not None or m.attention_sinks:
        yield "model.sliding_window" if m.sliding_window is not None \
            else "model.attention_sinks", (
                "windowed or sink attention of a vision transformer is not simulated "
                "(its attention is bidirectional over the whole image)")
