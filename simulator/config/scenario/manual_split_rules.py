"""MindSpore's `manual_split` on a Gather (`Gather.add_prim_attr("manual_split", config)`:
the rows of its first input, dim 0, split into the given uneven pieces, one per slice of
that dim; MindSpore tutorial "Other Features", r1.9, interface table, operator parallel):
what the scenario alone can check (a Gather, positive pieces summing to the table's rows,
one per slice its strategy makes). The pieces become explicit blocks of the table's layout
(`Shard.sizes`); that the table's other readers take it in the same blocks is checked once
the graph is built (`models.manual_split`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from simulator.config.scenario.rule_helpers import Problem

if TYPE_CHECKING:
    from simulator.config.scenario.schema_graph_models import GraphModel, GraphOp

__all__ = ["manual_split"]


def _pieces(value: Any) -> list[int] | None:
    if not isinstance(value, list | tuple) or not value:
        return None
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value):
        return None
    return list(value)


def _problem(m: GraphModel, op: GraphOp) -> str | None:
    if op.type != "Gather":
        return f"applies to a Gather only (MindSpore's interface), not {op.type}"
    pieces = _pieces(op.attrs["manual_split"])
    if pieces is None:
        return (f"{op.attrs['manual_split']!r}: expected a list of positive row counts, "
                f"one per slice of the table's dim 0, such as [8, 8, 8, 4]")
    table = next((t for t in m.tensors if t.name == op.inputs[0]), None)
    if table is None or not table.shape:
        return (f"the table {op.inputs[0]!r} must be a tensor of model.tensors (its rows "
                f"are what is split)")
    n = table.shape[0]
    if sum(pieces) != n:
        return f"{pieces} sums to {sum(pieces)}, not the table's {n} rows"
    if op.placements is not None:
        # (a strategy checkpoint's: the table's placements say which mesh axes cut its
        # rows; that the pieces are one per slice is checked with the mesh, `Layout.check`)
        return None
    if op.strategy is None or not op.strategy[0]:
        return (f"needs strategy on the op with {len(pieces)} slices of the table's dim 0 "
                f"(strategy: [[{len(pieces)}, 1], ...])")
    k = op.strategy[0][0]
    if k != len(pieces):
        return (f"{len(pieces)} pieces, but strategy slices the table's dim 0 into {k} "
                f"(one piece per slice)")
    return None


def manual_split(m: GraphModel) -> Iterator[Problem]:
    """Every `attrs.manual_split` is on a Gather with a strategy and splits all of its
    table's rows, one piece per slice, or is refused at its key path."""
    for i, op in enumerate(m.ops):
        if "manual_split" in op.attrs:
            why = _problem(m, op)
            if why is not None:
                yield f"model.ops[{i}].attrs.manual_split", why
