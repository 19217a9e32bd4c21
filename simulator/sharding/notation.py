"""Three ways to ask for an operator's sharding, all resolved to one N-D Signature:

- per mesh axis, a choice: a dimension label to split, `B`, `P<i>` (Partial in input i) or
  `PP` (Partial in every input) -- the internal form model builders use;
- MindSpore's `in_strategy`: per input, the number of slices of each dim. Its device matrix
  is [repeat, n_label1, n_label2, ...] in row-major rank order (labels in order of first
  appearance), so the numbers consume the mesh axes outermost first; `out_strategy` asks for
  the output to be re-laid (reduce-scatter or all-reduce of the Partial axes);
- SBP `placements`: per input and for `out`, one placement per mesh axis.
"""

from __future__ import annotations

import math
from typing import Any

from simulator.graph.ops.base import LabelView
from simulator.sharding.layout import Layout
from simulator.sharding.mesh import Mesh
from simulator.sharding.placement import B, P, Partial, Shard, parse_placement
from simulator.sharding.rules import (
    Sig1D,
    Signature,
    SignatureError,
    signatures_1d,
    split_label,
)

__all__ = ["from_axis_choices", "from_mindspore", "from_sbp", "mindspore_out_layout",
           "data_parallel_default", "label_size", "dataset_layout"]


def _choice(view: LabelView, choice: str) -> Sig1D:
    n = len(view.inputs)
    if choice == "B":
        return Sig1D((B,) * n, B)
    if choice == "PP":
        return Sig1D((P,) * n, P)
    if choice.startswith("P") and choice[1:].isdigit():
        i = int(choice[1:])
        return Sig1D(tuple(P if j == i else B for j in range(n)), P)
    return split_label(view, choice)


def from_axis_choices(view: LabelView, mesh: Mesh, choices: dict[str, str]) -> Signature:
    """`{'dp': 'b', 'tp': 'n'}`: split label b on dp, n on tp; absent axes broadcast."""
    unknown = set(choices) - set(mesh.names)
    if unknown:
        raise SignatureError(f"no mesh axis {sorted(unknown)} (axes: {', '.join(mesh.names)})")
    sigs = tuple(_choice(view, choices.get(name, "B")) for name in mesh.names)
    _check_valid(view, sigs)
    return Signature(sigs)


def _check_valid(view: LabelView, sigs: tuple[Sig1D, ...]) -> None:
    valid = signatures_1d(view)
    for s in sigs:
        if s not in valid:
            raise SignatureError(f"{s} is not a valid signature (valid on one axis: "
                                 f"{'; '.join(str(v) for v in valid)})")


def _label_numbers(view: LabelView, strategy: list[list[int]]) -> dict[str, int]:
    if len(strategy) != len(view.inputs):
        raise SignatureError(f"strategy has {len(strategy)} tuples for {len(view.inputs)} "
                             "inputs")
    numbers: dict[str, int] = {}
    for i, (labs, tup) in enumerate(zip(view.inputs, strategy)):
        if len(tup) != len(labs):
            raise SignatureError(f"strategy tuple {i} has {len(tup)} numbers for a "
                                 f"{len(labs)}-D input")
        for lab, n in zip(labs, tup):
            if lab is None:
                if n != 1:
                    raise SignatureError(f"input {i} has a broadcast dim; its number must "
                                         f"be 1, got {n}")
                continue
            if numbers.setdefault(lab, n) != n:
                raise SignatureError(f"inputs split the same dimension {numbers[lab]} and "
                                     f"{n} ways")
    return numbers


def _take_axes(mesh: Mesh, start: int, want: int) -> int:
    """Index after the run of mesh axes from `start` whose sizes multiply to `want`."""
    prod, i = 1, start
    while prod < want and i < mesh.ndim:
        prod *= mesh.shape[i]
        i += 1
    if prod != want:
        raise SignatureError(f"{want} slices do not match mesh axes {mesh} from axis "
                             f"{start} (give model.mesh axes that match the strategy)")
    return i


def from_mindspore(view: LabelView, mesh: Mesh, strategy: list[list[int]]
                   ) -> tuple[Signature, dict[str, list[int]]]:
    """The Signature of a MindSpore in_strategy, and which mesh axes each label took."""
    numbers = _label_numbers(view, strategy)
    used = math.prod(numbers.values())
    if mesh.size % used:
        raise SignatureError(f"strategy uses {used} devices, which does not divide the "
                             f"{mesh.size} devices")
    axis = _take_axes(mesh, 0, mesh.size // used)
    owner: dict[int, str] = {}
    taken: dict[str, list[int]] = {}
    for lab in view.labels():
        n = numbers.get(lab, 1)
        if n > 1:
            end = _take_axes(mesh, axis, n)
            taken[lab] = list(range(axis, end))
            owner.update({a: lab for a in range(axis, end)})
            axis = end
    sigs = tuple(split_label(view, owner[a]) if a in owner else Sig1D((B,) * len(
        view.inputs), B) for a in range(mesh.ndim))
    return Signature(sigs), taken


def mindspore_out_layout(view: LabelView, mesh: Mesh, sig: Signature,
                         taken: dict[str, list[int]], out_strategy: list[list[int]]
                         ) -> Layout:
    """The output layout MindSpore's out_strategy asks for: each output dim split by its
    number, using first its own label's axes, then the Partial (contracted) axes in order;
    Partial axes left over are all-reduced (B)."""
    if len(out_strategy) != 1 or len(out_strategy[0]) != len(view.output):
        raise SignatureError(f"out_strategy needs one tuple of {len(view.output)} numbers")
    natural = sig.output_layout.placements
    spare = [a for a, p in enumerate(natural) if isinstance(p, Partial)]
    placements = [B if isinstance(p, Partial) else p for p in natural]
    for d, (lab, want) in enumerate(zip(view.output, out_strategy[0])):
        have = math.prod(mesh.shape[a] for a in (taken.get(lab, []) if lab else []))
        while have < want and spare:
            a = spare.pop(0)
            placements[a] = Shard(d)
            have *= mesh.shape[a]
        if have != want:
            raise SignatureError(f"out_strategy dim {d} asks {want} slices; the op yields "
                                 f"{have}")
    return Layout(tuple(placements))


def from_sbp(view: LabelView, mesh: Mesh, input_names: tuple[str, ...],
             placements: dict[str, list[str]]) -> Signature:
    """SBP placements keyed by input tensor name and 'out', one string per mesh axis."""
    keys = (*input_names, "out")
    extra = set(placements) - set(keys)
    if extra:
        raise SignatureError(f"placements for unknown tensors {sorted(extra)} (allowed: "
                             f"{', '.join(keys)})")
    table: dict[str, list[Any]] = {}
    for key in keys:
        raw = placements.get(key)
        if raw is None:
            raise SignatureError(f"placements for {key!r} are missing")
        if len(raw) != mesh.ndim:
            raise SignatureError(f"placements for {key!r} need {mesh.ndim} entries (mesh "
                                 f"{mesh}), got {len(raw)}")
        table[key] = [parse_placement(t) for t in raw]
    sigs = tuple(Sig1D(tuple(table[k][a] for k in input_names), table["out"][a])
                 for a in range(mesh.ndim))
    _check_valid(view, sigs)
    return Signature(sigs)


def label_size(view: LabelView, shapes: list[tuple[int, ...]], label: str) -> int:
    for labs, shape in zip(view.inputs, shapes):
        if label in labs:
            return shape[labs.index(label)]
    raise SignatureError(f"label {label!r} is in no input")


def data_parallel_default(view: LabelView, mesh: Mesh, shapes: list[tuple[int, ...]]
                          ) -> Signature:
    """MindSpore's default for unconfigured operators: split the batch (dim 0 of the output,
    or of the first input for a full reduction) over every mesh axis that divides it;
    an op of scalars (a sum of losses) runs whole."""
    batch = view.output[0] if view.output and view.output[0] else \
        (view.inputs[0][0] if view.inputs and view.inputs[0] else None)  # None: scalars
    size = label_size(view, shapes, batch) if batch else 1
    sigs, used = [], 1
    for axis_size in mesh.shape:
        ok = batch is not None and batch in view.splittable() and size % (used * axis_size) == 0
        sigs.append(split_label(view, batch) if ok and batch is not None
                    else Sig1D((B,) * len(view.inputs), B))
        used *= axis_size if ok else 1
    return Signature(tuple(sigs))


def dataset_layout(load: str | tuple[int, ...] | None, shape: tuple[int, ...], mesh: Mesh
                   ) -> Layout | None:
    """The layout a dataset loads a tensor in (MindSpore `set_auto_parallel_context(
    dataset_strategy=...)`, mindspore/python/mindspore/context.py): 'full_batch' every
    device the whole tensor (`full_batch=True`); 'data_parallel' dim 0 split over every
    device (`full_batch=False`); a tuple of slices per dim, which take the mesh axes
    outermost first as an in_strategy does. None without a strategy or on one device.
    SignatureError when the split does not fit the tensor or the mesh."""
    if load is None or mesh.size == 1:
        return None
    if load == "full_batch":
        return Layout((B,) * mesh.ndim)
    if load == "data_parallel":
        if not shape or shape[0] % mesh.size:
            raise SignatureError(f"data_parallel splits dim 0 over all {mesh.size} devices; "
                                 f"the shape is {list(shape)}")
        return Layout((Shard(0),) * mesh.ndim)
    if isinstance(load, str):
        raise SignatureError(f"unknown dataset strategy {load!r} (allowed: full_batch, "
                             "data_parallel, or slices per dim)")
    labels = tuple(f"d{i}" for i in range(len(shape)))
    view = LabelView((labels,), labels)
    sig, _ = from_mindspore(view, mesh, [list(load)])
    layout = sig.input_layout(0)
    try:
        layout.check(shape, mesh)
    except ValueError as exc:
        raise SignatureError(str(exc)) from None
    return layout
