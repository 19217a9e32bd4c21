"""MindSpore's `manual_split` on a Gather (`add_prim_attr("manual_split", config)`: the rows
of the table, dim 0 of its first input, in the given uneven pieces; MindSpore tutorial "Other
Features" r1.9). An operator graph's split that does not divide its dim is already sharded
as DTensor shards it (`torch.chunk` pieces: tests/test_uneven_splits.py), so a manual_split
naming exactly those pieces is the same plan (identical program, `verify` equal to one
device) and any other pieces are refused at their key path."""

from __future__ import annotations

import json

import pytest
import yaml

from simulator.config.resources import resolve_yaml
from simulator.config.scenario import parse_scenario
from simulator.models.cases import build_case
from simulator.models.manual_split import planned_pieces
from simulator.numeric.execution import Faults
from simulator.sharding.graph_yaml import graph_from_model
from simulator.sharding.mesh import Mesh
from simulator.sharding.plan import build_plan
from simulator.simulation.verify import verify_scenario

NAME = "manual-split-embedding-8-cpu"


def _scenario():
    path = resolve_yaml(NAME, "scenarios")
    return parse_scenario(yaml.safe_load(path.read_text()), str(path))


@pytest.mark.parametrize("mesh, pieces", [
    ({"a": 2, "b": 2, "c": 2}, [8, 7, 8, 7, 8, 7, 8, 7]),  # 30 | 30, 15 | 15, 8 | 7
    ({"a": 2, "b": 4}, [8, 8, 8, 6, 8, 8, 8, 6]),      # 30 | 30, then 8, 8, 8, 6
])
def test_the_pieces_are_torch_chunk_s_nested_over_the_mesh_axes(mesh, pieces):
    """The table's 60 rows on 8 slices: each mesh axis a torch.chunk of the block the outer
    axes left (DTensor's nested Shard(0)), in slice order."""
    s = _scenario()
    graph = graph_from_model(s.model, s.source)
    assert sum(pieces) == 60
    assert planned_pieces(graph, Mesh(tuple(mesh.items())), "embedding_table") == pieces


def test_the_table_holds_the_given_rows_on_each_device():
    s = _scenario()
    case = build_case(s)
    plan = build_plan(case.sharded, case.mesh)
    table = s.model.tensors[2]
    layout = plan.layouts[table.name]
    rows = [layout.local_shape_at(tuple(table.shape), case.mesh, r)[0] for r in range(8)]
    assert rows == s.model.ops[0].attrs["manual_split"] == [8, 7, 8, 7, 8, 7, 8, 7]


def test_manual_split_is_the_plan_the_strategy_makes(invoke_cli):
    """The same scenario without the attribute runs the same program: every figure equal."""
    with_it = json.loads(invoke_cli("run", NAME, "--json").output)
    without = json.loads(invoke_cli("run", NAME, "--json", "--set",
                                    "model.ops[0].attrs={}").output)
    for d in (with_it, without):
        d.pop("wall_s", None)
        d.get("simulation", {}).pop("wall_s", None)
    assert with_it == without


def test_verify_equals_one_device_and_a_wrong_slice_fails():
    s = _scenario()
    r = verify_scenario(s)
    assert r.ok, [c for c in r.checks if not c.ok]
    assert "embedding_table.updated" in {c.tensor for c in r.checks}
    bad = verify_scenario(s, Faults(wrong_slice=True))
    assert not bad.ok


@pytest.mark.parametrize("override, message", [
    ("[8,8,8,8,8,8,8,4]", "[8, 8, 8, 8, 8, 8, 8, 4]: only the pieces the strategy makes on "
     "model.mesh, [8, 7, 8, 7, 8, 7, 8, 7], are simulated (each mesh axis a torch.chunk of "
     "the block the outer axes left, as DTensor splits); other uneven blocks are not "
     "simulated yet"),
    ("[8,8,8,8,8,8,8,3]", "[8, 8, 8, 8, 8, 8, 8, 3] sums to 59, not the table's 60 rows"),
    ("[10,20,26,4]", "4 pieces, but strategy slices the table's dim 0 into 8 (one piece "
     "per slice)"),
    ("[8,8,8,8,8,8,8,4,0]", "[8, 8, 8, 8, 8, 8, 8, 4, 0]: expected a list of positive row "
     "counts, one per slice of the table's dim 0, such as [8, 8, 8, 4]"),
])
def test_other_pieces_are_refused_at_their_key(invoke_cli, override, message):
    result = invoke_cli("run", NAME, "--set", f"model.ops[0].attrs.manual_split={override}")
    text = result.stderr if hasattr(result, "stderr") else result.output
    assert result.exit_code == 2, text
    assert f"model.ops[0].attrs.manual_split: {message}" in text


@pytest.mark.parametrize("override, message", [
    ("model.ops[0].type=MatMul", "applies to a Gather only (MindSpore's interface), not "
     "MatMul"),
    ("model.ops[0].strategy=null", "needs strategy on the op with 8 slices of the table's "
     "dim 0 (strategy: [[8, 1], ...])"),
])
def test_it_needs_a_gather_with_a_strategy(invoke_cli, override, message):
    result = invoke_cli("run", NAME, "--set", override)
    text = result.stderr if hasattr(result, "stderr") else result.output
    assert result.exit_code == 2, text
    assert f"model.ops[0].attrs.manual_split: {message}" in text
