"""Multi-copy parallel of an operator graph (`parallel.overlap.copies = c` on `type: graph`;
MindSpore's multi-copy slices a micro-batch along its batch): the same graph with its batch
cut to 1/c, as `verify` executes it slice by slice. An input's or label's first dim is its
batch (`GraphTensor.shape`); a Reshape's explicit target keeps the batch in front, so its
first entry is cut too (`-1` infers itself). `config.scenario.graph_rules.copies` refuses
what does not divide."""

from __future__ import annotations

from typing import Any

__all__ = ["sliced_model"]


def _cut(shape: list[int], copies: int) -> list[int]:
    return [shape[0] // copies, *shape[1:]] if shape and shape[0] != -1 else list(shape)


def sliced_model(model: Any, copies: int) -> Any:
    """A `type: graph` model section whose batch is 1/`copies` of `model`'s."""
    tensors = [t.model_copy(update={"shape": _cut(list(t.shape), copies)})
               if t.kind in ("input", "label") else t for t in model.tensors]
    ops = [op.model_copy(update={"attrs": {**op.attrs, "shape": _cut(
        [int(n) for n in op.attrs["shape"]], copies)}})
           if op.type == "Reshape" and "shape" in op.attrs else op for op in model.ops]
    return model.model_copy(update={"tensors": tensors, "ops": ops})
