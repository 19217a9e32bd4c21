"""MindSpore's `manual_split` on a Gather (`Gather.add_prim_attr("manual_split", config)`:
the rows of its first input, dim 0, split into the given uneven pieces, one per slice of
that dim; MindSpore tutorial "Other Features", r1.9, interface table, operator parallel):
what the scenario alone can check (a Gather, positive pieces summing to the table's rows,
one per slice its strategy makes), and the strategy MindSpore requires of it
(mindspore/ccsrc/frontend/parallel/ops_info/gather_info.cc, `ManualImpl::CheckStrategy`:
"Only the last dim of indices can be split", "The param_strategy[0] ... must be equal to
indices_strategy[-1]", "... must be equal to manual split size", "The split value ... must
be larger than or equal to indices field slice size"). The pieces become explicit blocks of
the table's layout (`Shard.sizes`, `sharding.manual_gather`); that the table's other
readers take it in the same blocks is checked once the graph is built
(`models.manual_split`). `manual_split_with_offset` (gather_info.cc,
`GatherInfo::GetManualSplitAttr`: (rows, id offset) pairs, each device's ids shifted by its
own offset rather than the running sum of the blocks) is refused by name."""

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


CITE = ("MindSpore's ManualImpl::CheckStrategy, mindspore/ccsrc/frontend/parallel/"
        "ops_info/gather_info.cc")

WITH_OFFSET = (
    "not simulated: MindSpore's manual_split_with_offset (gather_info.cc, "
    "GatherInfo::GetManualSplitAttr) gives each slice of the table's rows as (rows, id "
    "offset), the offset subtracted from that device's ids in place of the running sum of "
    "the blocks, so the ids are not rows of one table; use manual_split (the offsets the "
    "running sums of its pieces)")


def _ids_strategy(m: GraphModel, op: GraphOp, k: int) -> str | None:
    """MindSpore's rule for the ids of a manual_split Gather: only their last dim split,
    into the table's k slices."""
    assert op.strategy is not None
    ids = next((t for t in m.tensors if t.name == op.inputs[1]), None)
    given = len(op.strategy[1]) if len(op.strategy) > 1 else 1
    rank = len(ids.shape) if ids is not None and ids.shape else given
    want = [1] * (rank - 1) + [k]
    if len(op.strategy) > 1 and list(op.strategy[1]) == want:
        return None
    table = list(op.strategy[0])
    return (f"a manual_split Gather splits only the ids' last dim, as many ways as the "
            f"table's dim 0 ({CITE}: \"Only the last dim of indices can be split\", "
            f"\"The param_strategy[0] must be equal to indices_strategy[-1]\"): expected "
            f"{[table, want]}, got {[list(s) for s in op.strategy]}")


def _block_rows(m: GraphModel, op: GraphOp, pieces: list[int], k: int) -> str | None:
    """Every block holds at least one column slice of the ids' rows (MindSpore's
    min_param_slice_row)."""
    ids = next((t for t in m.tensors if t.name == op.inputs[1]), None)
    if ids is None or not ids.shape:
        return None
    least = ids.shape[-1] // k
    if min(pieces) < least:
        return (f"{pieces}: every block must hold at least the ids' column slice, "
                f"{ids.shape[-1]} / {k} = {least} rows ({CITE}: \"The split value ... must "
                f"be larger than or equal to indices field slice size\")")
    return None


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
    return _block_rows(m, op, pieces, k)


def manual_split(m: GraphModel) -> Iterator[Problem]:
    """Every `attrs.manual_split` is on a Gather with MindSpore's strategy for it and
    splits all of its table's rows, one piece per slice, or is refused at its key path;
    `manual_split_with_offset` is refused by name."""
    for i, op in enumerate(m.ops):
        if "manual_split_with_offset" in op.attrs:
            yield f"model.ops[{i}].attrs.manual_split_with_offset", WITH_OFFSET
        if "manual_split" not in op.attrs:
            continue
        why = _problem(m, op)
        if why is not None:
            yield f"model.ops[{i}].attrs.manual_split", why
        elif op.placements is None and op.strategy is not None:
            why = _ids_strategy(m, op, op.strategy[0][0])
            if why is not None:
                yield f"model.ops[{i}].strategy", why
