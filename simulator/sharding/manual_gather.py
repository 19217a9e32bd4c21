"""The signature of a Gather with MindSpore's `manual_split` (explicit uneven blocks of the
table's rows), as MindSpore executes it (mindspore/ccsrc/frontend/parallel/ops_info/
gather_info.cc, `ManualImpl`):

- `ManualImpl::CheckStrategy`: only the ids' last dim is split ("Only the last dim of
  indices can be split"), as many ways as the table's dim 0 ("The param_strategy[0] ...
  must be equal to indices_strategy[-1]") and as there are blocks ("... must be equal to
  manual split size"); checked on the scenario (`config.scenario.manual_split_rules`);
- `ManualImpl::InferDevMatrixShape` / `InferTensorMap`: the device matrix is the table's
  strategy; the ids' last dim takes the same device-matrix dim as the table's rows and the
  output keeps the ids' split (`out_map` = the ids' leading dims unsplit, then the table's
  map): device k holds block k of the rows and column block k of the ids;
- `ManualImpl::InferOffset` / `GatherManualImpl::InferReplaceGraph`: device k subtracts
  its block's first row (`index_offsets_`, the running sum of the blocks) from its ids and
  gathers from its own block (Sub, then Gather): no reduction of the output. The user
  guarantees that column block k only indexes rows of block k (MindSpore does not check
  it; shardsim's Gather kernel looks up zeros for an id outside the device's block);
- `GatherInfo::InferMirrorOps`: the table's tensor map uses every device-matrix dim (no
  repeated calculation, "Manual split doesn't support repeated calc"), so its gradient is
  not reduced across the split: each block's gradient stays on its device.

Along each mesh axis that splits the table's rows the op's 1-D signature is then
(S(0)[blocks], S(last)) -> S(last); every other axis is what the MindSpore strategy makes
(`notation.from_mindspore`), the ids taken whole there."""

from __future__ import annotations

from simulator.graph.ops.base import LabelView
from simulator.sharding.mesh import Mesh
from simulator.sharding.notation import from_mindspore, from_sbp
from simulator.sharding.placement import Shard
from simulator.sharding.rules import Sig1D, Signature, SignatureError

__all__ = ["manual_gather_signature", "manual_from_placements"]


def manual_gather_signature(view: LabelView, mesh: Mesh, in_strategy: list[list[int]],
                            blocks: tuple[int, ...]) -> Signature:
    """The signature of a manual_split Gather under its MindSpore strategy
    [[k, ...], [1, ..., 1, k]] (checked on the scenario), the table's rows in `blocks`."""
    table, ids = in_strategy
    sig, taken = from_mindspore(view, mesh, [list(table), [1] * len(ids)])
    last = len(ids) - 1
    rows = set(taken.get(view.inputs[0][0] or "", []))
    return Signature(tuple(
        Sig1D((Shard(0, blocks), Shard(last)), Shard(last)) if a in rows else s
        for a, s in enumerate(sig.axes)))


def manual_from_placements(view: LabelView, mesh: Mesh, names: tuple[str, ...],
                           placements: dict[str, list[str]]) -> Signature:
    """The signature of a manual_split Gather given as placements (a strategy
    checkpoint's): a mesh axis with the table S(0), the ids and the output S(last) is
    ManualImpl's (above); every other axis must be a valid one of the op
    (`notation.from_sbp`)."""
    last = len(view.inputs[1]) - 1
    ids = f"S({last})"
    table, index = names[0], names[1]

    def manual(a: int) -> bool:
        try:
            return (placements[table][a], placements[index][a], placements["out"][a]) == (
                "S(0)", ids, ids)
        except (KeyError, IndexError, TypeError):
            return False
    axes = [a for a in range(mesh.ndim) if manual(a)]
    rows = [a for a in range(mesh.ndim) if a not in axes
            and isinstance(placements.get(table), list) and a < len(placements[table])
            and placements[table][a] == "S(0)"]
    if rows:
        a = rows[0]
        raise SignatureError(
            f"a manual_split Gather takes the ids and gives its output split on the ids' "
            f"last dim, {ids}, on every mesh axis that splits the table's rows (MindSpore's "
            f"ManualImpl::InferTensorMap, mindspore/ccsrc/frontend/parallel/ops_info/"
            f"gather_info.cc); mesh axis {a} has {table} S(0), {index} "
            f"{placements.get(index, [None] * mesh.ndim)[a]}, out "
            f"{placements.get('out', [None] * mesh.ndim)[a]}")
    standin = {k: ([{index: "B", "out": "P"}.get(k, p) if a in axes else p
                    for a, p in enumerate(v)] if k in (index, "out") else v)
               for k, v in placements.items()}
    sig = from_sbp(view, mesh, names, standin)
    return Signature(tuple(Sig1D((Shard(0), Shard(last)), Shard(last)) if a in axes else s
                           for a, s in enumerate(sig.axes)))
