"""Uneven splits (issue 26): a dimension its mesh axes do not divide is sharded as
DTensor shards it, `torch.chunk` style -- chunks of ceil(n / k), the last ones shorter or
empty (torch/distributed/tensor/placement_types.py, `Shard`: "follows the torch.chunk(dim)
semantic, where the last few shards on the DeviceMesh dimension might be empty"). Its
collectives pad every shard to the full chunk and unpad after (`Shard._to_replicate_tensor`
pads before `all_gather_tensor`, `_reduce_shard_tensor` splits `with_padding` before
`reduce_scatter_tensor`): bytes are those of ceil(n / k) per rank, as if the dim were
padded to k * ceil(n / k). Time and memory follow the largest shard (`Layout.local_shape`);
`verify` computes exactly what one device computes (the padding never enters a value)."""

from __future__ import annotations

from typing import Any

import pytest

from simulator.config.scenario import parse_scenario
from simulator.numeric.execution import Faults
from simulator.program.graph_program import graph_program
from simulator.sharding.layout import Layout
from simulator.sharding.mesh import Mesh
from simulator.sharding.placement import B, P, Shard
from simulator.sharding.redistribute import plan_redistribution
from simulator.simulation.verify import verify_scenario


def _graph(rows: int, k: int, h: int, mesh: dict[str, int] | None = None,
           **first: Any) -> Any:
    """U (rows x k) . V (k x h), ReLU, . W (h x 6), cross-entropy, mean: the first MatMul
    with SBP placements (batch on the first mesh axis, k on the second: a partial sum),
    the second with a MindSpore strategy."""
    mesh = mesh or {"dp": 2, "mp": 2}
    uv = first or {"placements": {"U": ["S(0)", "S(1)"], "V": ["B", "S(0)"],
                                  "out": ["S(0)", "P"]}}
    return parse_scenario({
        "name": "uneven", "hardware": "cpu-x86",
        "cluster": {"nodes": 1, "devices_per_node": 4},
        "training": {"optimizer": "adam", "learning_rate": 0.1},
        "model": {"type": "graph", "dtype": "fp32", "mesh": mesh, "tensors": [
            {"name": "U", "shape": [rows, k], "kind": "input"},
            {"name": "labels", "shape": [rows], "kind": "label"},
            {"name": "V", "shape": [k, h], "kind": "parameter"},
            {"name": "W", "shape": [h, 6], "kind": "parameter"}], "ops": [
            {"name": "uv", "type": "MatMul", "inputs": ["U", "V"], "output": "UV", **uv},
            {"name": "act", "type": "ReLU", "inputs": ["UV"], "output": "A"},
            {"name": "uvw", "type": "MatMul", "inputs": ["A", "W"], "output": "Y",
             "strategy": [[2, 2], [2, 1]] if len(mesh) == 2 else [[4, 1], [1, 1]]},
            {"name": "ce", "type": "SoftmaxCrossEntropy", "inputs": ["Y", "labels"],
             "output": "ce"},
            {"name": "loss", "type": "ReduceMean", "inputs": ["ce"], "output": "loss"}]}},
        "uneven.yaml")


@pytest.mark.parametrize("rows, k, h", [
    (8, 12, 16),   # even: the control
    (7, 11, 15),   # every split short on its last rank
    (5, 3, 5),     # 5 rows on dp 2: 3 + 2; 3 on mp 2: 2 + 1
])
def test_uneven_operator_splits_compute_what_one_device_computes(rows, k, h):
    r = verify_scenario(_graph(rows, k, h))
    assert r.ok, [c for c in r.checks if not c.ok]
    assert {"UV", "Y", "V.grad", "W.updated"} <= {c.tensor for c in r.checks}


def test_an_empty_last_shard_on_a_data_parallel_batch():
    """5 samples on 4 data-parallel ranks: torch.chunk gives 2, 2, 1 and an empty shard."""
    s = _graph(5, 4, 6, {"dp": 4}, strategy=[[4, 1], [1, 1]])
    assert Layout((Shard(0),)).local_shape_at((5, 4), Mesh.of(dp=4), 3) == (0, 4)
    r = verify_scenario(s)
    assert r.ok, [c for c in r.checks if not c.ok]
    bad = verify_scenario(s, Faults(skip_grad_reduction=True))
    assert [c.tensor for c in bad.checks if not c.ok][0] == "V.grad"


def _flops(s) -> dict[str, float]:
    prog = graph_program(s).program
    return {spec.name: spec.flops for spec in prog.blocks[0].fwd if hasattr(spec, "flops")}


def test_time_and_memory_follow_the_largest_shard():
    """7 rows on dp 2 are shards of 4 and 3: each device is priced for 4, the same kernels
    as 8 rows; 6 rows are shards of 3. (The operators without a strategy take MindSpore's
    default, which splits the batch only on the axes that divide it: `notation.
    data_parallel_default`.)"""
    seven, eight, six = (_flops(_graph(n, 12, 16)) for n in (7, 8, 6))
    for op in ("uv", "uvw"):
        assert seven[op] == eight[op]
    assert seven["uv"] == 2 * 4 * 6 * 16 and six["uv"] == 2 * 3 * 6 * 16  # k 12 / 2, h 16


@pytest.mark.parametrize("src, dst, kind", [
    ((Shard(0),), (B,), "all_gather"), ((P,), (Shard(0),), "reduce_scatter"),
    ((Shard(0),), (Shard(1),), "all_to_all")])
def test_redistribution_bytes_are_the_padded_ones(src, dst, kind):
    """(7, 12) float32 on 4 ranks: every collective moves what (8, 12) moves, never more:
    DTensor pads each shard to ceil(7 / 4) = 2 rows first."""
    mesh = Mesh.of(x=4)
    uneven = plan_redistribution(Layout(src), Layout(dst), (7, 12), mesh, 4)
    padded = plan_redistribution(Layout(src), Layout(dst), (8, 12), mesh, 4)
    assert [s.kind for s in uneven] == [kind]
    assert [s.bytes for s in uneven] == [s.bytes for s in padded]
