"""2-D tensor parallel (parallel.tensor_nd: [x, y]; MindSpore's high dimension tensor
parallel, Optimus-style): every GEMM weight is split on both grid axes; the forward's
collectives, which the redistribution planner derives, are all-gathers, reduce-scatters and
all-to-alls on `tpx` and `tpy` with the bytes of the closed form (the FFN's equal to
MindSpore's table, its two axes exchanged); the plan verifies against one device and fails
when one of them is dropped; `run` places both axes on the cluster and the memory and traffic
move the way the technique says; the key is refused by name where it does not apply."""

from __future__ import annotations

import json
import math
from collections import Counter

import pytest
import yaml
from model_kinds import refusal

from simulator.config.resources import resolve_yaml
from simulator.config.scenario import parse_scenario
from simulator.cost.collectives import busbw_factor
from simulator.cost.specs import CommSpec
from simulator.errors import InputError
from simulator.graph.decoder import GptDims
from simulator.lower.layout import rank_mesh
from simulator.models.cases import build_case
from simulator.models.transformer_plan import planned_transformer
from simulator.numeric.execution import Faults
from simulator.numeric.verify import verify_case
from simulator.program.model_program import transformer_program
from simulator.sharding.placement import Shard
from simulator.sharding.plan import build_plan
from simulator.sharding.redist_steps import moved_bytes
from simulator.simulation.verify import verify_scenario

TINY = "tp2d-tiny-verify"
BIG = "tp2d-gpt-32b-64-h100"
ONE_STEP = ["model.layers=1", "training.global_batch_size=2"]  # one layer, one micro-batch


def _bundled(name: str, overrides=()):
    path = resolve_yaml(name, "scenarios")
    return parse_scenario(yaml.safe_load(path.read_text()), str(path), list(overrides))


def _dims(kv_heads: int = 8, swiglu: bool = False) -> GptDims:
    return GptDims(layers=1, hidden=32, heads=8, kv_heads=kv_heads, ffn=128, seq=16,
                   vocab=64, batch=2, swiglu=swiglu, bias=not swiglu)


def _layer_bytes(plan, items) -> Counter:
    """Bytes each device moves (nccl-tests bus bytes) per (mesh axis, collective) in the
    layer's steps of `items`."""
    out: Counter = Counter()
    for name, step in items:
        if step is not None and step.is_comm and name.startswith("l0."):
            out[(plan.mesh.names[step.axis], step.kind)] += moved_bytes(step, plan.mesh)
    return out


def _closed_form_2d(d: GptDims, x: int, y: int, e: int) -> dict[tuple[str, str], float]:
    """One layer's forward under sequence parallel, T = b*s tokens, per device: on tpx the
    all-gather of each sublayer's input (T*h/y gathered x ways) and the reduce-scatter of its
    row GEMM's output; on tpy the reduce-scatters of the column GEMMs' outputs (q, k, v, FC1
    and with SwiGLU FC3: T*width/x each), the all-gathers of the row GEMMs' inputs (context,
    FFN activation) and four all-to-alls that keep the norms' hidden dim whole (T*h/(x*y)
    each, the hidden split on tpy traded for the sequence)."""
    t, h, f = d.batch * d.seq, d.hidden, d.ffn
    q, kv = h, d.kv_heads * d.head_dim
    up = 2 * f if d.swiglu else f
    rx, ry = (x - 1) / x, (y - 1) / y
    return {("tpx", "all_gather"): 2 * rx * t * h / y * e,
            ("tpx", "reduce_scatter"): 2 * rx * t * h / y * e,
            ("tpy", "reduce_scatter"): ry * t * (q + 2 * kv + up) / x * e,
            ("tpy", "all_gather"): ry * t * (q + f) / x * e,
            ("tpy", "all_to_all"): 4 * ry * t * h / (x * y) * e}


@pytest.mark.parametrize("x,y,kv,swiglu", [(2, 2, 8, False), (2, 4, 8, False),
                                           (4, 2, 8, False), (2, 2, 4, True)])
def test_forward_bytes_follow_the_closed_form(x, y, kv, swiglu):
    d = _dims(kv, swiglu)
    plan = build_plan(*planned_transformer(d, 1, x * y, True, tensor_nd=(x, y)), 2)
    fwd = _layer_bytes(plan, plan.forward_items())
    assert fwd == pytest.approx(_closed_form_2d(d, x, y, 2))
    # the backward moves the same bytes on each axis (an all-gather's dual is a reduce-scatter)
    bwd = _layer_bytes(plan, plan.backward_items())
    for axis in ("tpx", "tpy"):
        assert sum(b for (a, _), b in bwd.items() if a == axis) == pytest.approx(
            sum(b for (a, _), b in fwd.items() if a == axis))


def test_one_d_moves_its_all_gathers_and_reduce_scatters_whole():
    """1-D with sequence parallel, for comparison: two all-gathers and two reduce-scatters of
    the whole T*h activation over all t devices per layer, 4 (t-1)/t * T*h bytes."""
    d, t = _dims(), 4
    plan = build_plan(*planned_transformer(d, 1, t, True), 2)
    tokens = d.batch * d.seq * d.hidden * 2
    assert _layer_bytes(plan, plan.forward_items()) == pytest.approx(
        {("tp", "all_gather"): 2 * (t - 1) / t * tokens,
         ("tp", "reduce_scatter"): 2 * (t - 1) / t * tokens})


def test_ffn_bytes_are_mindsporess_2d_row_with_the_axes_exchanged():
    """MindSpore's high dimension TP tutorial: a MatMul pair (bs, h) x (h, e) x (e, h) on x*y
    devices moves 2bs[e(x-1) + h(y-1)]/xy per device, e on its x; here the FFN dim is on
    tpy's reduce-scatter / all-gather and the hidden on tpx's, so the FFN's GEMM collectives
    (its norm's all-to-alls aside) move 2T[f(y-1) + h(x-1)]/xy."""
    d, x, y = _dims(), 4, 2
    plan = build_plan(*planned_transformer(d, 1, x * y, True, tensor_nd=(x, y)), 1)
    ffn = ("fc1_mm", "fc1", "act", "fc2", "fc2_bias", "fc2_drop", "res2")
    moved = sum(moved_bytes(s, plan.mesh) for n, s in plan.forward_steps()
                if s.is_comm and s.kind != "all_to_all" and n.startswith("l0.")
                and n.split(".")[1] in ffn)
    t = d.batch * d.seq
    assert moved == pytest.approx(2 * t * (d.ffn * (y - 1) + d.hidden * (x - 1)) / (x * y))


def test_weights_are_split_on_both_axes_and_no_all_reduce_runs_forward():
    d, x, y = _dims(), 2, 4
    plan = build_plan(*planned_transformer(d, 1, x * y, True, tensor_nd=(x, y)), 4)
    assert plan.mesh.names == ("dp", "tpx", "tpy")
    g = plan.graph
    for w, head_dim, hidden_dim in (("l0.wq", 1, 0), ("l0.wk", 1, 0), ("l0.w1", 1, 0),
                                    ("l0.wo", 0, 3), ("l0.w2", 0, 1)):
        layout = plan.layouts[w]
        assert layout.placements[1:] == (Shard(head_dim), Shard(hidden_dim)), w
        local = layout.local_shape(g.tensors[w].shape, plan.mesh)
        assert math.prod(local) * x * y == math.prod(g.tensors[w].shape)
    kinds = {(plan.mesh.names[s.axis], s.kind) for n, s in plan.forward_steps()
             if s.is_comm and n.startswith("l0.")}
    assert kinds == {("tpx", "all_gather"), ("tpx", "reduce_scatter"), ("tpy", "all_gather"),
                     ("tpy", "reduce_scatter"), ("tpy", "all_to_all")}


@pytest.mark.parametrize("overrides", [
    [],
    ["model.num_kv_heads=4", "model.ffn_activation=swiglu", "model.attention=flash"],
    ["parallel.sequence_parallel=false"],
    ["parallel.tensor=8", "parallel.data=1", "parallel.tensor_nd=[4,2]"],
])
def test_two_d_plans_verify(overrides):
    result = verify_scenario(_bundled(TINY, ONE_STEP + overrides))
    assert result.ok
    assert result.devices == 8


@pytest.mark.parametrize("kind,axis", [("reduce_scatter", "tpy"), ("all_gather", "tpx")])
def test_dropping_a_two_d_collective_fails(kind, axis):
    """The first reduce-scatter on tpy (a column GEMM's Partial output) or all-gather on tpx
    (a GEMM input) skipped: the layer's tensors differ from one device's."""
    case = build_case(_bundled(TINY, ONE_STEP))
    plan = build_plan(case.sharded, case.mesh, 8)
    comms = [(n, s) for n, s in plan.forward_steps() if s.is_comm]
    first = next(i for i, (n, s) in enumerate(comms)
                 if s.kind == kind and plan.mesh.names[s.axis] == axis and n.startswith("l0."))
    result = verify_case(case, faults=Faults(drop_comm=first))
    assert not result.ok
    assert next(c for c in result.checks if c.tensor == "embed_drop").ok  # before the fault
    assert not next(c for c in result.checks if c.tensor == "loss").ok


def test_mindspores_third_axis_is_a_zero3_data_axis_around_the_grid():
    """MindSpore's 3-D layout splits the tokens on z and all-gathers each weight over z
    before its MatMul (its gradient reduce-scattered back): data parallel with sharded
    parameters (optimizer_shard 3) around the 2-D grid. It verifies, and fails when the
    weights are used without their gather."""
    s = _bundled(TINY, ONE_STEP + ["parallel.optimizer_shard=3"])
    assert verify_scenario(s).ok
    assert not verify_scenario(s, Faults(skip_param_gather=True)).ok


def test_run_places_both_axes_and_prices_the_closed_form():
    """tpy's 4 ranks are consecutive (inside a node), tpx's 16 ranks 4 apart (across the 8
    nodes); the program's layer moves the closed form's bytes, well under 1-D's 4(t-1)/t*T*h
    on the same 64 devices."""
    s = _bundled(BIG)
    groups = rank_mesh(s).groups()
    assert (groups["tpy"].size, groups["tpy"].stride, groups["tpy"].crosses_nodes) == (4, 1,
                                                                                        False)
    assert (groups["tpx"].size, groups["tpx"].stride, groups["tpx"].crosses_nodes) == (16, 4,
                                                                                        True)
    m = s.model
    d = GptDims(layers=1, hidden=m.hidden_size, heads=m.num_heads, kv_heads=m.kv_heads,
                ffn=m.ffn, seq=m.seq_length, vocab=m.vocab_size, batch=1)
    two_d = _program_bytes(s)
    assert two_d == pytest.approx(sum(_closed_form_2d(d, 16, 4, 2).values()))
    one_d = _program_bytes(_bundled(BIG, ["parallel.tensor_nd=null"]))
    tokens = m.seq_length * m.hidden_size * 2
    assert one_d == pytest.approx(4 * 63 / 64 * tokens)
    assert two_d < 0.4 * one_d


def test_a_device_computes_at_the_pace_of_its_whole_grid():
    """A tensor-parallel group runs in lock step: under full fidelity a device's compute
    scope is its x * y grid (both axes), not one axis of it."""
    from simulator.config.hardware import load_profile
    from simulator.simulation.heterogeneous import Cluster

    s = _bundled(TINY, ["cluster.slow=[{devices: [3], compute: 0.5}]"])
    costs = Cluster(s, load_profile(s.hardware), "full", None).costs
    assert costs is not None
    assert costs.scope(0, None).tolist() == [0, 1, 2, 3]  # dp rank 0's 2 x 2 grid
    assert costs.scope(5, None).tolist() == [4, 5, 6, 7]
    assert costs.pacer(0) == 3 and costs.pacer(4) == 4


def _program_bytes(s) -> float:
    """Bus bytes per device of the forward of the layer `run` times for scenario `s`."""
    sizes = dict(rank_mesh(s).mesh.axes)
    return sum(busbw_factor(c.collective, sizes[c.axis]) * c.bytes
               for c in transformer_program(s).block("layer").fwd if isinstance(c, CommSpec))


def test_memory_shares_of_two_d():
    """Each device holds 1/(x*y) of every GEMM weight (as 1-D on x*y devices, 1/x of what 1-D
    on the x ranks of tpx holds), and under sequence parallel its activations are split x*y
    ways too: far below 1-D without sequence parallel, whose norm regions are whole."""
    two_d = transformer_program(_bundled(BIG))
    one_d = transformer_program(_bundled(BIG, ["parallel.tensor_nd=null"]))
    no_sp = transformer_program(_bundled(BIG, ["parallel.tensor_nd=null",
                                               "parallel.sequence_parallel=false"]))
    narrow = transformer_program(_bundled(BIG, [
        "parallel.tensor_nd=null", "parallel.tensor=16", "parallel.data=4",
        "training.global_batch_size=64"]))
    assert two_d.block("layer").params == one_d.block("layer").params
    h = 8192
    weights = 12 * h * h + 3 * h + 4 * h  # GEMM weights, q/k/v and FC1 biases: 1/64 each
    assert two_d.block("layer").params == weights // 64 + 6 * h  # + 2 norms, 2 row biases whole
    assert narrow.block("layer").params > 3.9 * two_d.block("layer").params
    assert two_d.block("layer").saved_bytes == pytest.approx(one_d.block("layer").saved_bytes,
                                                             rel=0.05)
    assert two_d.block("layer").saved_bytes < no_sp.block("layer").saved_bytes / 5


def test_bundled_two_d_runs_faster_and_moves_fewer_bytes_than_one_d(invoke_cli):
    out = {}
    for nd in ("[16,4]", "null"):
        result = invoke_cli("run", BIG, "--json", "--set", f"parallel.tensor_nd={nd}")
        assert result.exit_code == 0, result.output
        out[nd] = json.loads(result.stdout)
    two, one = out["[16,4]"], out["null"]
    assert two["communication"]["by_collective"].get("all_to_all", 0) > 0
    assert "all_to_all" not in one["communication"]["by_collective"]
    assert two["communication"]["bytes_per_device"] < 0.5 * one["communication"][
        "bytes_per_device"]
    assert two["iteration_time_s"] < one["iteration_time_s"]
    assert two["memory"]["by_category_bytes"]["parameters"] == one["memory"][
        "by_category_bytes"]["parameters"]


def _tiny(overrides):
    return _bundled(TINY, overrides)


@pytest.mark.parametrize("overrides,message", [
    (["parallel.tensor_nd=[2,4]"], "parallel.tensor_nd: [2, 4]: 2*4 = 8 must equal "
     "parallel.tensor=4"),
    (["parallel.tensor_nd=[2,2,1]"], "parallel.tensor_nd: [2, 2, 1]: a size of 1 is 2-D "
     "tensor parallel (give the other two sizes; allowed: sizes of at least 2)"),
    (["parallel.tensor_nd=[1,4]"], "parallel.tensor_nd: [1, 4]: a size of 1 is 1-D tensor "
     "parallel (remove the key; allowed: sizes of at least 2)"),
    (["parallel.overlap.tp_comm=true"], "parallel.overlap.tp_comm: true: chunked overlap of "
     "the 2-D tensor-parallel collectives (parallel.tensor_nd) is not simulated yet "
     "(allowed: auto, false)"),
    (["parallel.context=2", "parallel.data=1", "model.attention=flash"],
     "parallel.tensor_nd: [2, 2] with parallel.context is not simulated yet (allowed with "
     "2-D tensor parallel: no parallel.context)"),
    (["model.moe={experts: 4}"], "parallel.tensor_nd: [2, 2] with model.moe is not "
     "simulated yet (allowed with 2-D tensor parallel: no model.moe)"),
])
def test_bad_two_d_settings_are_refused_by_name(overrides, message):
    with pytest.raises(InputError) as err:
        _tiny(overrides)
    assert str(err.value).endswith(f": {message}")


@pytest.mark.parametrize("kind", ["mlp", "resnet", "graph"])
def test_tensor_nd_is_refused_by_name_on_other_models(kind, invoke_cli):
    message = refusal(invoke_cli, kind, "parallel.tensor_nd=[2,2]")
    assert ("parallel.tensor_nd: [2, 2]: 2-D tensor parallel splits a transformer's "
            f"attention and FFN weights; a model of type '{kind}' has none (remove the key)"
            ) in message


def test_plan_searches_the_tensor_grid():
    from simulator.api import load_scenario
    from simulator.planner.generic import generic_splits

    sc = load_scenario(BIG).scenario
    grids = {c.to_dict().get("parallel.tensor_nd") for c in generic_splits(sc, 64)
             if c.to_dict()["parallel.tensor"] == "64"}
    # 1-D, and every ordered 2-D factorisation of the 64 tensor devices
    assert grids == {"null", "[2,32]", "[4,16]", "[8,8]", "[16,4]", "[32,2]"}
