"""MindSpore's `manual_split` on a Gather (`add_prim_attr("manual_split", config)`: the rows
of the table, dim 0 of its first input, in the given uneven pieces; MindSpore tutorial "Other
Features" r1.9), as MindSpore executes it (mindspore/ccsrc/frontend/parallel/ops_info/
gather_info.cc, `ManualImpl`): the strategy splits only the ids' last dim, as many ways as
the table's rows (`ManualImpl::CheckStrategy`; any other is refused at
`model.ops[i].strategy`); device k holds block k of the rows, [sum(pieces[:k]),
sum(pieces[:k+1])), and column block k of the ids, subtracts its block's first row and
gathers locally (`ManualImpl::InferOffset`, `GatherManualImpl::InferReplaceGraph`): the
output keeps the ids' split, nothing is reduced, the table's gradient stays in its block.
`verify` draws ids whose column block k indexes rows of block k (the data MindSpore's user
guarantees) and equals one device; a shifted block, or ids that break the contract, fail.
Memory is the largest block's. Sizes that do not sum to the rows, a count other than the
slices, non-positive sizes, blocks smaller than the ids' column slice and a table that
another op reads in other blocks are refused at their key path; a second Gather taking the
table in the same blocks shares it (MindSpore's CheckParameterSplit);
`manual_split_with_offset` is refused by name."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml
from model_kinds import refused_flat, stderr_of

from simulator.api.core import load_scenario
from simulator.config.resources import resolve_yaml
from simulator.config.scenario import parse_scenario
from simulator.errors import InputError
from simulator.models.cases import build_case
from simulator.models.manual_split import planned_pieces
from simulator.numeric import inputs
from simulator.numeric.execution import Faults
from simulator.numeric.inputs import _block_ids, _data
from simulator.sharding.graph_yaml import graph_from_model
from simulator.sharding.layout import Layout, LayoutError
from simulator.sharding.mesh import Mesh
from simulator.sharding.placement import B, P, Shard
from simulator.sharding.plan import build_plan
from simulator.sharding.redistribute import plan_redistribution
from simulator.simulation.verify import verify_scenario

NAME = "manual-split-embedding-8-cpu"
UNEVEN = "manual-split-gather-64-rows-4-cpu"  # the seed's (10, 20, 30, 4) of 64 rows


def _scenario(name=NAME, attrs=True):
    """The bundled scenario; attrs=False: the plain row split of its table (no
    manual_split, the ids whole: MindSpore's ShardAxisImpl, Partial output)."""
    path = resolve_yaml(name, "scenarios")
    raw = yaml.safe_load(path.read_text())
    if not attrs:
        op = raw["model"]["ops"][0]
        op["attrs"], op["strategy"] = {}, [op["strategy"][0], [1, 1]]
    return parse_scenario(raw, str(path))


def _plain(rows: int) -> tuple[str, str]:
    """--set values of the plain row split of op 0 (no manual_split, the ids whole)."""
    return "model.ops[0].attrs={}", f"model.ops[0].strategy=[[{rows},1],[1,1]]"


@pytest.mark.parametrize("mesh, pieces", [
    ({"a": 2, "b": 2, "c": 2}, [8, 7, 8, 7, 8, 7, 8, 7]),  # 30 | 30, 15 | 15, 8 | 7
    ({"a": 2, "b": 4}, [8, 8, 8, 6, 8, 8, 8, 6]),      # 30 | 30, then 8, 8, 8, 6
])
def test_the_pieces_are_torch_chunk_s_nested_over_the_mesh_axes(mesh, pieces):
    """The table's 60 rows on 8 slices: each mesh axis a torch.chunk of the block the outer
    axes left (DTensor's nested Shard(0)), in slice order."""
    s = _scenario(attrs=False)
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


def test_each_device_gathers_its_column_block_with_no_reduction():
    """ManualImpl's tensor maps (gather_info.cc, InferTensorMap): on each mesh axis of the
    table's rows the ids' last dim and the output's ids dim are split with them; the
    output is not Partial, and the table's gradient stays in its blocks (no reduction)."""
    s = _scenario(UNEVEN)
    case = build_case(s)
    plan = build_plan(case.sharded, case.mesh)
    p = plan.op_plan("embedding")
    rows = Shard(0, (10, 20, 30, 4))
    assert p.sig.input_layout(0) == Layout((rows, rows))
    assert p.sig.input_layout(1) == Layout((Shard(1), Shard(1)))
    assert p.out_layout == Layout((Shard(1), Shard(1)))
    assert p.out_layout.local_shape((8, 4, 16), case.mesh) == (8, 1, 16)  # local gather
    assert plan.grad_layout("embedding_table") == plan.layouts["embedding_table"]
    assert not [st for name, st in plan.backward_items()
                if st is not None and st.kind in ("all_reduce", "reduce_scatter")
                and name == "embedding"]


def test_verify_equals_one_device_and_a_shifted_block_fails():
    s = _scenario()
    r = verify_scenario(s)
    assert r.ok, [c for c in r.checks if not c.ok]
    assert "embedding_table.updated" in {c.tensor for c in r.checks}
    bad = verify_scenario(s, Faults(block_shift=True))
    assert not bad.ok


@pytest.mark.parametrize("override, message", [
    ("[8,8,8,8,8,8,8,3]", "[8, 8, 8, 8, 8, 8, 8, 3] sums to 59, not the table's 60 rows"),
    ("[10,20,26,4]", "4 pieces, but strategy slices the table's dim 0 into 8 (one piece "
     "per slice)"),
    ("[8,8,8,8,8,8,8,4,0]", "[8, 8, 8, 8, 8, 8, 8, 4, 0]: expected a list of positive row "
     "counts, one per slice of the table's dim 0, such as [8, 8, 8, 4]"),
])
def test_other_pieces_are_refused_at_their_key(invoke_cli, override, message):
    result = invoke_cli("run", NAME, "--set", f"model.ops[0].attrs.manual_split={override}")
    text = stderr_of(result)
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
    text = stderr_of(result)
    assert result.exit_code == 2, text
    assert f"model.ops[0].attrs.manual_split: {message}" in text


def test_each_device_holds_its_own_block_of_rows():
    """(10, 20, 30, 4) over the mesh m0=2, m1=2: slice k (row-major over the two axes that
    split dim 0) holds rows [sum(sizes[:k]), sum(sizes[:k+1]))."""
    s = _scenario(UNEVEN)
    case = build_case(s)
    layout = build_plan(case.sharded, case.mesh).layouts["embedding_table"]
    rows = [layout.region((64, 16), case.mesh, r)[0] for r in range(4)]
    assert [(r.start, r.stop) for r in rows] == [(0, 10), (10, 30), (30, 60), (60, 64)]
    assert layout.local_shape((64, 16), case.mesh) == (30, 16)  # the largest block
    assert not layout.is_even((64, 16), case.mesh)


def _bytes(invoke_cli, *sets):
    args = [a for kv in sets for a in ("--set", kv)]
    d = json.loads(invoke_cli("run", UNEVEN, "--json", *args).output)
    return d["memory"]["by_category_bytes"]


def test_memory_is_the_largest_block_s(invoke_cli):
    """fp32 parameters per device: the table's largest block, 30 x 16, with ffn.w1 and
    ffn.w2 halved (16 x 16 each) and head.w whole (16 x 10); under torch.chunk's even
    pieces (no attribute) the table's block is 16 x 16."""
    given = _bytes(invoke_cli)
    assert given["parameters"] == 4 * (30 * 16 + 16 * 16 + 16 * 16 + 16 * 10) == 4608
    assert given["gradients"] == given["parameters"]
    assert given["optimizer_states"] == 2 * given["parameters"]  # Adam's two moments
    chunked = _bytes(invoke_cli, *_plain(4))
    assert given["parameters"] - chunked["parameters"] == 4 * (30 - 16) * 16


def _comm(invoke_cli, *sets):
    args = [a for kv in sets for a in ("--set", kv)]
    d = json.loads(invoke_cli("run", UNEVEN, "--json", *args).output)
    return d["communication"]["by_collective"]


def test_run_moves_the_ids_split_output_not_a_reduction(invoke_cli):
    """The output emb [8, 4, 16] fp32 (E = 2048 B whole) leaves the Gather split on the
    ids' last dim over m0, m1 and reaches the Reshape's (S(0), S(0)) by three all-to-alls
    of the local block E / 4, forward and backward; the plain row split (Partial output,
    MindSpore's ShardAxisImpl) reduce-scatters it instead, E on m0 then E / 2 on m1, and
    all-gathers its gradient back. The table's gradient is reduced in neither."""
    e = 8 * 4 * 16 * 4
    manual, plain = _comm(invoke_cli), _comm(invoke_cli, *_plain(4))
    assert manual["all_to_all"] - plain["all_to_all"] == 2 * 3 * (e // 4)
    assert plain["reduce_scatter"] - manual["reduce_scatter"] == e + e // 2
    assert plain["all_gather"] - manual["all_gather"] == e + e // 2
    assert manual["all_reduce"] == plain["all_reduce"]


def test_uneven_blocks_verify_equal_to_one_device_and_a_shifted_block_fails():
    s = _scenario(UNEVEN)
    r = verify_scenario(s)
    assert r.ok, [c for c in r.checks if not c.ok]
    assert {"emb", "embedding_table.grad", "embedding_table.updated"} <= {
        c.tensor for c in r.checks}
    bad = verify_scenario(s, Faults(block_shift=True))
    assert [c.tensor for c in bad.checks if not c.ok][0] == "emb"


@pytest.mark.parametrize("override, message", [
    ("[10,20,30,3]", "[10, 20, 30, 3] sums to 63, not the table's 64 rows"),
    ("[10,20,34]", "3 pieces, but strategy slices the table's dim 0 into 4 (one piece per "
     "slice)"),
    ("[10,20,34,0]", "[10, 20, 34, 0]: expected a list of positive row counts, one per "
     "slice of the table's dim 0, such as [8, 8, 8, 4]"),
    ("[10,20,38,-4]", "[10, 20, 38, -4]: expected a list of positive row counts, one per "
     "slice of the table's dim 0, such as [8, 8, 8, 4]"),
])
def test_impossible_blocks_are_refused_at_their_key(invoke_cli, override, message):
    result = invoke_cli("run", UNEVEN, "--set",
                        f"model.ops[0].attrs.manual_split={override}")
    text = stderr_of(result)
    assert result.exit_code == 2, text
    assert f"model.ops[0].attrs.manual_split: {message}" in text


SHARED = "manual-split-shared-table-4-cpu"  # the same table read by two Gathers


def _refused(raw, path):
    s = parse_scenario(raw, str(path))
    with pytest.raises(InputError) as err:
        build_case(s)
    return str(err.value)


def test_a_reader_taking_the_table_in_other_blocks_is_refused():
    """MindSpore's CheckParameterSplit (parameter_manager.cc): every reader of a parameter
    takes it in the same TensorInfo. A GeLU reading the table in the default layout (rows
    chunked over both axes) differs from the Gather's explicit blocks."""
    path = resolve_yaml(UNEVEN, "scenarios")
    raw = yaml.safe_load(path.read_text())
    raw["model"]["ops"].insert(1, {"name": "table_norm", "type": "GeLU",
                                   "inputs": ["embedding_table"], "output": "t2"})
    assert _refused(raw, path).endswith(
        "model.ops[0].attrs.manual_split: the table 'embedding_table' is read in the "
        "blocks (S(0)[10, 20, 30, 4], S(0)[10, 20, 30, 4]) by embedding, but table_norm "
        "takes (S(0), S(0)): MindSpore requires every reader of a parameter to take it in "
        "the same layout (CheckParameterSplit, \"has multiple users, but the TensorInfo are "
        "different\"); give each reader the same strategy and manual_split")


@pytest.mark.parametrize("attrs, strategy, takes", [
    ({}, [[4, 1], [1, 1]], "(S(0), S(0))"),                    # chunked 16-row blocks
    ({"manual_split": [20, 10, 30, 4]}, [[4, 1], [1, 4]],      # other blocks
     "(S(0)[20, 10, 30, 4], S(0)[20, 10, 30, 4])"),
    ({}, [[1, 4], [1, 1]], "(S(1), S(1))"),                     # columns, not rows
])
def test_a_second_gather_with_another_split_is_refused(attrs, strategy, takes):
    path = resolve_yaml(SHARED, "scenarios")
    raw = yaml.safe_load(path.read_text())
    raw["model"]["ops"][1].update(attrs=attrs, strategy=strategy)
    assert f"but context_embedding takes {takes}: MindSpore requires" in _refused(raw, path)


def test_two_gathers_in_the_same_blocks_share_the_table():
    """Both lookups hold the table in the seed's blocks; verify equals one device (the
    table's gradient the sum of both lookups' on the same blocks) and fails when every
    block is read one row early."""
    s = _scenario(SHARED)
    case = build_case(s)
    plan = build_plan(case.sharded, case.mesh)
    rows = [plan.layouts["embedding_table"].region((64, 16), case.mesh, r)[0]
            for r in range(4)]
    assert [(r.start, r.stop) for r in rows] == [(0, 10), (10, 30), (30, 60), (60, 64)]
    r = verify_scenario(s)
    assert r.ok, [c for c in r.checks if not c.ok]
    assert {"emb", "ctx", "embedding_table.grad", "embedding_table.updated"} <= {
        c.tensor for c in r.checks}
    bad = verify_scenario(s, Faults(block_shift=True))
    assert [c.tensor for c in bad.checks if not c.ok][0] == "emb"


@pytest.mark.parametrize("shard", ["1", "3"])
def test_a_shared_table_keeps_its_blocks_across_replicas(shard):
    s = load_scenario(SHARED, ["parallel.data=2", "cluster.devices_per_node=8",
                               f"parallel.optimizer_shard={shard}"]).scenario
    r = verify_scenario(s)
    assert r.ok, [c for c in r.checks if not c.ok]


def test_a_shared_table_costs_the_largest_block(invoke_cli):
    """Parameters per device: the table's 30-row block once (both lookups read the same
    copy), ffn.w1 and ffn.w2 halved, head.w whole; the even split holds 16 rows."""
    def params(*sets):
        args = [a for kv in sets for a in ("--set", kv)]
        d = json.loads(invoke_cli("run", SHARED, "--json", *args).output)
        return d["memory"]["by_category_bytes"]["parameters"]
    assert params() == 4 * (30 * 16 + 16 * 16 + 16 * 16 + 16 * 10) == 4608
    assert params(*_plain(4), "model.ops[1].attrs={}",
                  "model.ops[1].strategy=[[4,1],[1,1]]") == params() - 4 * (30 - 16) * 16


@pytest.mark.parametrize("shard", ["0", "1", "3"])
def test_blocks_survive_data_parallel_replicas(shard):
    """Two replicas (parallel.data=2, the outer axis dp) with optimizer sharding 0, 1 or 3:
    the table's gradient is reduced and its optimizer states sharded on dp without
    touching its explicit blocks; verify equals one device."""
    s = load_scenario(UNEVEN, ["parallel.data=2", "cluster.devices_per_node=8",
                               f"parallel.optimizer_shard={shard}"]).scenario
    r = verify_scenario(s)
    assert r.ok, [c for c in r.checks if not c.ok]


def test_the_data_parallel_reduction_moves_the_largest_block(invoke_cli):
    """The table gradient's all-reduce over the replicas carries the 30-row block: 30 x 16
    fp32 where the even split carries 16 x 16 (every other message the same)."""
    def reduced(*sets):
        args = [a for kv in ("parallel.data=2", "cluster.devices_per_node=8", *sets)
                for a in ("--set", kv)]
        d = json.loads(invoke_cli("run", UNEVEN, "--json", *args).output)
        return d["communication"]["by_collective"]["all_reduce"]
    assert reduced() - reduced(*_plain(4)) == 4 * (30 - 16) * 16


def test_explicit_blocks_are_never_gathered_or_re_split():
    """The redistribution planner keeps explicit blocks as they are: gathering them (to B)
    or re-cutting them as torch.chunk does is refused, not planned with chunk sizes."""
    mesh = Mesh((("m0", 2), ("m1", 2)))
    sized = Layout((Shard(0, (10, 20, 30, 4)),) * 2)
    for other in (Layout((B, B)), Layout((Shard(0), Shard(0)))):
        with pytest.raises(LayoutError, match="explicit blocks of dim 0 are kept as they "
                                              "are, not gathered or re-split"):
            plan_redistribution(sized, other, (64, 16), mesh)
    # a reduction on another axis keeps them, and moves the largest block (30 x 16 fp32)
    mesh = Mesh((("dp", 2), ("m0", 2), ("m1", 2)))
    rows = Shard(0, (10, 20, 30, 4))
    (step,) = plan_redistribution(Layout((P, rows, rows)), Layout((B, rows, rows)),
                                  (64, 16), mesh)
    assert (step.kind, step.bytes, step.dst) == ("all_reduce", 30 * 16 * 4,
                                                  Layout((B, rows, rows)))


@pytest.mark.parametrize("name", [NAME, UNEVEN])
def test_explain_keeps_the_configured_uneven_gather(invoke_cli, name):
    """The search takes the configured Gather as it is (it refused its uneven split
    before) and chooses the unconfigured operators around it."""
    result = invoke_cli("explain", name)
    assert result.exit_code == 0, result.output
    assert "embedding (Gather), configured" in result.output


@pytest.mark.parametrize("strategy, got", [
    ("[[4,1],[1,1]]", "[[4, 1], [1, 1]]"),  # the ids whole (shardsim's former strategy)
    ("[[4,1],[4,1]]", "[[4, 1], [4, 1]]"),  # the ids' first dim split
    ("[[4,1],[2,2]]", "[[4, 1], [2, 2]]"),  # both dims split
])
def test_a_strategy_other_than_mindspore_s_is_refused(invoke_cli, strategy, got):
    """ManualImpl::CheckStrategy (gather_info.cc): only the ids' last dim is split, as
    many ways as the table's dim 0."""
    result = invoke_cli("run", UNEVEN, "--set", f"model.ops[0].strategy={strategy}")
    text = refused_flat(result)
    assert ("model.ops[0].strategy: a manual_split Gather splits only the ids' last dim, "
            "as many ways as the table's dim 0 (MindSpore's ManualImpl::CheckStrategy, "
            "mindspore/ccsrc/frontend/parallel/ops_info/gather_info.cc: \"Only the last dim "
            "of indices can be split\", \"The param_strategy[0] must be equal to "
            f"indices_strategy[-1]\"): expected [[4, 1], [1, 4]], got {got}") in text, text


def test_blocks_smaller_than_the_ids_column_slice_are_refused(invoke_cli):
    """ids [1, 32] in 4 column slices of 8: the 4-row block cannot hold one (MindSpore's
    min_param_slice_row, ManualImpl::CheckStrategy)."""
    result = invoke_cli("run", UNEVEN, "--set", "model.tensors[0].shape=[1,32]")
    text = refused_flat(result)
    assert ("model.ops[0].attrs.manual_split: [10, 20, 30, 4]: every block must hold at "
            "least the ids' column slice, 32 / 4 = 8 rows (MindSpore's "
            "ManualImpl::CheckStrategy, mindspore/ccsrc/frontend/parallel/ops_info/"
            "gather_info.cc: \"The split value ... must be larger than or equal to indices "
            "field slice size\")") in text, text


def test_manual_split_with_offset_is_refused_by_name(invoke_cli):
    result = invoke_cli("run", UNEVEN, "--set",
                        "model.ops[0].attrs.manual_split_with_offset=[[32,0],[32,32]]")
    text = refused_flat(result)
    assert ("model.ops[0].attrs.manual_split_with_offset: not simulated: MindSpore's "
            "manual_split_with_offset (gather_info.cc, GatherInfo::GetManualSplitAttr) gives "
            "each slice of the table's rows as (rows, id offset), the offset subtracted from "
            "that device's ids in place of the running sum of the blocks, so the ids are "
            "not rows of one table; use manual_split (the offsets the running sums of its "
            "pieces)") in text, text


@pytest.mark.parametrize("name, shape, blocks", [
    (UNEVEN, (8, 4), (10, 20, 30, 4)),
    (NAME, (4, 8), (8, 7, 8, 7, 8, 7, 8, 7)),
])
def test_verify_draws_each_column_block_from_its_own_rows(name, shape, blocks):
    """The ids verify draws: column block k within rows [sum(blocks[:k]),
    sum(blocks[:k+1])), every row of each block reachable (the generator, not a
    constant)."""
    case = build_case(_scenario(name))
    ids = _data(case.whole, np.random.default_rng(0), np.float32)["ids"]
    assert ids.shape == shape
    start = 0
    for k, rows in enumerate(blocks):
        col = ids[..., k * shape[-1] // len(blocks):(k + 1) * shape[-1] // len(blocks)]
        assert start <= col.min() and col.max() < start + rows
        start += rows
    many = _block_ids(np.random.default_rng(1), (4096, 4), (10, 20, 30, 4))
    assert [len(set(many[:, k])) for k in range(4)] == [10, 20, 30, 4]


@pytest.mark.parametrize("name", [UNEVEN, SHARED])
def test_ids_outside_their_block_fail_verify(name, monkeypatch):
    """The contract matters: ids drawn over the whole table (each device then misses the
    rows of other blocks its column asks for, which MindSpore does not check) make the
    sharded lookup differ from one device's."""
    s = _scenario(name)
    monkeypatch.setattr(inputs, "_manual_blocks", lambda graph, name: None)
    bad = verify_scenario(s)
    assert [c.tensor for c in bad.checks if not c.ok][0] == "emb"


def test_a_strategy_leaving_devices_of_the_stage_over_is_refused(invoke_cli):
    """[[4, 1], [1, 4]] on 8 devices would repeat the op on two groups of 4: MindSpore's
    ManualImpl::CheckStrategy refuses repeated calculation (parallel.data replicas, outside
    the stage's mesh here, are not that: test_blocks_survive_data_parallel_replicas)."""
    result = invoke_cli("run", UNEVEN, "--set", "cluster.devices_per_node=8")
    text = refused_flat(result)
    assert ("model.ops[0].strategy: [[4, 1], [1, 4]] uses 4 of the 8 devices of the stage: "
            "a manual_split Gather's strategy must use them all (MindSpore's "
            "ManualImpl::CheckStrategy, mindspore/ccsrc/frontend/parallel/ops_info/"
            "gather_info.cc: \"Manual split doesn't support repeated calc\")") in text, text


def test_the_table_s_columns_may_be_split_too():
    """MindSpore's ManualImpl takes the table strategy [a, b] (its device matrix; the
    output's last dim split b ways): [[2, 2], [1, 2]] with blocks (30, 34) equals one
    device, and fails with a shifted block."""
    s = load_scenario(UNEVEN, ["model.ops[0].strategy=[[2,2],[1,2]]",
                               "model.ops[0].attrs.manual_split=[30,34]"]).scenario
    r = verify_scenario(s)
    assert r.ok, [c for c in r.checks if not c.ok]
    assert not verify_scenario(s, Faults(block_shift=True)).ok
