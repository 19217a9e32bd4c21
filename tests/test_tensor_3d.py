"""3-D tensor parallel (parallel.tensor_nd: [x, y, z]; Bian et al. 2021, Colossal-AI's 3-D,
MindSpore's 3-D Layout): the 2-D grid on tpx and tpy plus tpz, which splits the batch and
keeps every parameter split. Each GEMM runs Bian's three collectives, derived by the
redistribution planner: its input all-gathered on one grid axis, its weight all-gathered on
tpz, its Partial output reduce-scattered on the other grid axis. The bytes per axis follow
the closed form; the plan verifies against one device and fails when a collective is
dropped; `run` places the cube on the cluster, re-gathers the weights in the backward and
reduce-scatters their gradients every micro-batch; weights are 1/(x*y*z) per device; bad
shapes are refused by name."""

from __future__ import annotations

import json
import math
from collections import Counter

import pytest
import yaml
from model_kinds import refusal, stderr_of

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
from simulator.sharding.placement import Broadcast, Shard
from simulator.sharding.plan import build_plan
from simulator.sharding.redist_steps import moved_bytes
from simulator.simulation.verify import verify_scenario

TINY = "tp3d-tiny-verify"
BIG = "tp3d-gpt-32b-64-h100"
ONE_LAYER = ["model.layers=1"]


def _bundled(name: str, overrides=()):
    path = resolve_yaml(name, "scenarios")
    return parse_scenario(yaml.safe_load(path.read_text()), str(path), list(overrides))


def _dims(kv_heads: int = 8, swiglu: bool = False, batch: int = 4) -> GptDims:
    return GptDims(layers=1, hidden=32, heads=8, kv_heads=kv_heads, ffn=128, seq=16,
                   vocab=64, batch=batch, swiglu=swiglu, bias=not swiglu)


def _plan(d: GptDims, nd: tuple[int, ...], data: int = 1, e: int = 2):
    return build_plan(*planned_transformer(d, data, math.prod(nd), True, tensor_nd=nd), e)


def _layer_bytes(plan, items) -> Counter:
    """Bytes each device moves (nccl-tests bus bytes) per (mesh axis, collective) in the
    layer's steps of `items`."""
    out: Counter = Counter()
    for name, step in items:
        if step is not None and step.is_comm and name.startswith("l0."):
            out[(plan.mesh.names[step.axis], step.kind)] += moved_bytes(step, plan.mesh)
    return out


def _grid_params(d: GptDims, x: int, y: int) -> float:
    """Elements of a layer's parameters as one device of the x * y grid reads them: the
    GEMM weights and the column GEMMs' biases split x*y ways, the norms' gains and biases
    and the row GEMMs' biases (read in the sequence-split norm region) whole."""
    h, f = d.hidden, d.ffn
    q, kv = h, d.kv_heads * d.head_dim
    weights = h * (q + 2 * kv) + q * h + (3 if d.swiglu else 2) * h * f
    biases = (q + 2 * kv + f) if d.bias else 0
    whole = 4 * h + (2 * h if d.bias else 0)
    return (weights + biases) / (x * y) + whole


def _closed_form_3d(d: GptDims, x: int, y: int, z: int, e: int
                    ) -> dict[tuple[str, str], float]:
    """One layer's forward under sequence parallel, per device, T = b*s tokens of the
    micro-batch. On tpx and tpy 2-D's collectives (test_tensor_2d._closed_form_2d) on the
    T/z tokens of one tpz slice: the input all-gathers (tpx for the column GEMMs, tpy for
    the row GEMMs' inputs), the Partial outputs' reduce-scatters (tpy, tpx) and the
    all-to-alls that keep the norms' hidden dim whole; on tpz the all-gather of every
    parameter the layer reads, (z-1)/z of its grid share (Bian et al. 2021's weight mode)."""
    t, h, f = d.batch * d.seq / z, d.hidden, d.ffn
    q, kv = h, d.kv_heads * d.head_dim
    up = 2 * f if d.swiglu else f
    rx, ry, rz = (x - 1) / x, (y - 1) / y, (z - 1) / z
    return {("tpx", "all_gather"): 2 * rx * t * h / y * e,
            ("tpx", "reduce_scatter"): 2 * rx * t * h / y * e,
            ("tpy", "reduce_scatter"): ry * t * (q + 2 * kv + up) / x * e,
            ("tpy", "all_gather"): ry * t * (q + f) / x * e,
            ("tpy", "all_to_all"): 4 * ry * t * h / (x * y) * e,
            ("tpz", "all_gather"): rz * _grid_params(d, x, y) * e}


@pytest.mark.parametrize("nd,kv,swiglu", [((2, 2, 2), 8, False), ((2, 4, 2), 8, False),
                                          ((2, 2, 4), 4, True)])
def test_forward_bytes_per_axis_follow_the_closed_form(nd, kv, swiglu):
    d = _dims(kv, swiglu)
    plan = _plan(d, nd)
    assert _layer_bytes(plan, plan.forward_items()) == pytest.approx(
        _closed_form_3d(d, *nd, 2))


def test_backward_moves_the_duals_and_the_weight_gradients_are_reduce_scattered_on_tpz():
    """The backward's activation-gradient collectives move as many bytes on tpx and tpy as
    the forward's (an all-gather's dual is a reduce-scatter) and none on tpz; each weight's
    gradient comes out Partial on tpz and is reduce-scattered to its kept shard: the
    forward's tpz all-gather bytes, as a reduce-scatter."""
    from simulator.sharding.lower import gradient_steps

    d, nd = _dims(), (2, 2, 2)
    plan = _plan(d, nd)
    fwd, bwd = (_layer_bytes(plan, plan.forward_items()),
                _layer_bytes(plan, plan.backward_items()))
    for axis in ("tpx", "tpy"):
        assert sum(b for (a, _), b in bwd.items() if a == axis) == pytest.approx(
            sum(b for (a, _), b in fwd.items() if a == axis))
    assert not [k for k in bwd if k[0] == "tpz"]
    sizes = dict(plan.mesh.axes)
    grads = [c for c in gradient_steps(plan, ("dp",)) if c.name.startswith("l0.")]
    assert {c.collective for c in grads if c.axis == "tpz"} == {"reduce_scatter"}
    rs = sum(busbw_factor(c.collective, sizes[c.axis]) * c.bytes for c in grads
             if c.axis == "tpz")
    assert rs == pytest.approx(fwd[("tpz", "all_gather")])


def test_each_gemm_runs_bians_three_collectives_on_three_axes():
    """Column GEMM (q): input all-gathered on tpx, weight on tpz, output reduce-scattered on
    tpy; row GEMM (FC2): input on tpy, weight on tpz, output on tpx (Colossal-AI's input
    and output modes exchanged from one GEMM to the next)."""
    plan = _plan(_dims(), (2, 2, 2))
    kinds = {}
    for name, s in plan.forward_steps():
        if s.is_comm and s.kind != "all_to_all":
            kinds.setdefault(name, set()).add((plan.mesh.names[s.axis], s.kind))
    assert kinds["l0.q_mm"] == {("tpx", "all_gather"), ("tpz", "all_gather")}
    assert kinds["l0.q"] >= {("tpy", "reduce_scatter")}
    assert kinds["l0.fc2"] == {("tpy", "all_gather"), ("tpz", "all_gather")}
    assert kinds["l0.fc2_bias"] >= {("tpx", "reduce_scatter")}


def test_weights_are_split_on_all_three_axes():
    d, nd = _dims(), (2, 4, 2)
    plan = _plan(d, nd, data=2)
    assert plan.mesh.names == ("dp", "tpx", "tpy", "tpz")
    g = plan.graph
    for w in ("l0.wq", "l0.wk", "l0.wo", "l0.w1", "l0.w2"):
        layout = plan.layouts[w]
        assert isinstance(layout.placements[0], Broadcast), w  # dp: replicated
        assert all(isinstance(p, Shard) for p in layout.placements[1:]), w
        local = layout.local_shape(g.tensors[w].shape, plan.mesh)
        assert math.prod(local) * 16 == math.prod(g.tensors[w].shape), w
    # activations: the batch split on dp and tpz, the norm regions' sequence on tpx and tpy
    ln = plan.layouts["l0.ln1"]
    assert ln.placements == (Shard(0), Shard(1), Shard(1), Shard(0))


@pytest.mark.parametrize("overrides", [
    [],
    ["model.num_kv_heads=4", "model.ffn_activation=swiglu", "model.attention=flash"],
    ["parallel.sequence_parallel=false"],
    ["parallel.optimizer_shard=1"],
])
def test_three_d_plans_verify(overrides):
    result = verify_scenario(_bundled(TINY, ONE_LAYER + overrides))
    assert result.ok
    assert result.devices == 8


@pytest.mark.parametrize("shard", [0, 3])
def test_three_d_inside_data_parallel_verifies(shard):
    """data=2 around the cube (the batch split on dp and tpz, dp outer), with and without
    ZeRO-3 on dp: 16 devices compute the single device's tensors."""
    s = _bundled(TINY, ONE_LAYER + ["cluster.nodes=2", "parallel.data=2",
                                    "training.global_batch_size=8",
                                    f"parallel.optimizer_shard={shard}"])
    result = verify_scenario(s)
    assert result.ok and result.devices == 16


def _first_comm(plan, op: str, kind: str, axis: str) -> int:
    comms = [(n, s) for n, s in plan.forward_steps() if s.is_comm]
    return next(i for i, (n, s) in enumerate(comms)
                if n == op and s.kind == kind and plan.mesh.names[s.axis] == axis)


@pytest.mark.parametrize("op,kind,axis", [("l0.q_mm", "all_gather", "tpz"),
                                          ("l0.q", "reduce_scatter", "tpy"),
                                          ("l0.fc2_bias", "reduce_scatter", "tpx")])
def test_dropping_a_three_d_collective_fails(op, kind, axis):
    """A GEMM computed with its own weight shard (the tpz gather skipped), or a Partial
    output taken for its sum (a reduce-scatter skipped): the tensors after it differ from
    one device's, those before it do not."""
    case = build_case(_bundled(TINY, ONE_LAYER))
    plan = build_plan(case.sharded, case.mesh, 8)
    result = verify_case(case, faults=Faults(drop_comm=_first_comm(plan, op, kind, axis)))
    assert not result.ok
    checks = {c.tensor: c.ok for c in result.checks}
    assert checks["l0.ln1"] and not checks["loss"]


def test_skipping_the_weight_gradient_reduce_scatter_fails():
    """Each device updating its weight shard with its own tpz summand of the gradient (the
    reduce-scatter over the batch split skipped): the gradients and updates differ."""
    result = verify_scenario(_bundled(TINY, ONE_LAYER), Faults(skip_grad_reduction=True))
    assert not result.ok
    checks = {c.tensor: c.ok for c in result.checks}
    assert checks["loss"] and not checks["l0.w1.grad"]


def _program_bytes(prog_ops, sizes) -> Counter:
    out: Counter = Counter()
    for c in prog_ops:
        if isinstance(c, CommSpec):
            out[(c.axis, c.collective)] += busbw_factor(c.collective, sizes[c.axis]) * c.bytes
    return out


def test_run_places_the_cube_and_prices_the_closed_form():
    """tpz's 4 ranks are consecutive (inside a node), tpy's 4 ranks 4 apart (two nodes),
    tpx's 16 apart; the timed layer's forward moves the closed form's bytes; its backward
    gathers the weights again and reduce-scatters their gradients on tpz (3 times the
    forward's tpz bytes in all), every micro-batch."""
    s = _bundled(BIG)
    groups = rank_mesh(s).groups()
    assert (groups["tpz"].size, groups["tpz"].stride, groups["tpz"].crosses_nodes) == (
        4, 1, False)
    assert (groups["tpy"].size, groups["tpy"].stride, groups["tpy"].crosses_nodes) == (
        4, 4, True)
    assert (groups["tpx"].size, groups["tpx"].stride) == (4, 16)
    m = s.model
    d = GptDims(layers=1, hidden=m.hidden_size, heads=m.num_heads, kv_heads=m.kv_heads,
                ffn=m.ffn, seq=m.seq_length, vocab=m.vocab_size, batch=4, bias=True)
    prog = transformer_program(s)
    sizes = dict(rank_mesh(s).mesh.axes)
    fwd = _program_bytes(prog.block("layer").fwd, sizes)
    assert fwd == pytest.approx(_closed_form_3d(d, 4, 4, 4, 2))
    bwd = _program_bytes(prog.block("layer").bwd, sizes)
    assert bwd[("tpz", "all_gather")] == pytest.approx(fwd[("tpz", "all_gather")])
    assert bwd[("tpz", "reduce_scatter")] == pytest.approx(fwd[("tpz", "all_gather")])
    assert not [c for c in prog.block("layer").grad_sync if c.axis == "tpz"]


def test_memory_shares_of_three_d():
    """Each device keeps 1/(x*y*z) of every GEMM weight (as 1-D and 2-D on as many devices)
    and 1/z of what the x*y grid reads whole; under sequence parallel its activations are
    split 64 ways as 2-D's; without it the norm regions are split z ways where 2-D keeps
    them whole."""
    three = transformer_program(_bundled(BIG))
    two = transformer_program(_bundled(BIG, ["parallel.tensor_nd=[16,4]"]))
    h = 8192
    gemm_and_biases = 12 * h * h + 7 * h
    assert three.block("layer").params == gemm_and_biases // 64 + 6 * h // 4
    assert two.block("layer").params == gemm_and_biases // 64 + 6 * h
    assert three.block("layer").saved_bytes == pytest.approx(
        two.block("layer").saved_bytes, rel=0.05)
    no_sp = ["parallel.sequence_parallel=false"]
    three_whole = transformer_program(_bundled(BIG, no_sp))
    two_whole = transformer_program(_bundled(BIG, no_sp + ["parallel.tensor_nd=[16,4]"]))
    assert three_whole.block("layer").saved_bytes < 0.6 * two_whole.block("layer").saved_bytes


def test_bundled_three_d_moves_fewer_bytes_than_two_d_and_one_d(invoke_cli):
    """Same model, batch and devices: 3-D's weight all-gathers on tpz (shared by the 4
    samples of a micro-batch) plus its grid's activation traffic on T/z tokens come to
    less than 2-D's and 1-D's activation traffic per device at 16 samples per micro-batch;
    the parameter memory is the same 1/64."""
    out = {}
    for nd in ("[4,4,4]", "[16,4]", "null"):
        result = invoke_cli("run", BIG, "--json", "--set", f"parallel.tensor_nd={nd}",
                            "--set", "training.micro_batch_size=16", "--set",
                            "training.global_batch_size=16")
        assert result.exit_code == 0, result.output
        out[nd] = json.loads(result.stdout)
    moved = {k: v["communication"]["bytes_per_device"] for k, v in out.items()}
    assert moved["[4,4,4]"] < 0.8 * moved["[16,4]"] < 0.8 * moved["null"]
    params = {k: v["memory"]["by_category_bytes"]["parameters"] for k, v in out.items()}
    assert params["[4,4,4]"] == pytest.approx(params["null"], rel=0.01)


@pytest.mark.parametrize("overrides,message", [
    (["parallel.tensor_nd=[2,2,4]"], "parallel.tensor_nd: [2, 2, 4]: 2*2*4 = 16 must equal "
     "parallel.tensor=8"),
    (["parallel.tensor_nd=[2,4,1]"], "parallel.tensor_nd: [2, 4, 1]: a size of 1 is 2-D "
     "tensor parallel (give the other two sizes; allowed: sizes of at least 2)"),
    (["training.micro_batch_size=1", "training.global_batch_size=2"],
     "parallel.tensor_nd: [2, 2, 2]: z=2 must divide training.micro_batch_size=1 (3-D "
     "tensor parallel splits each micro-batch's samples on z; valid z: 1)"),
    (["model.num_heads=2", "model.hidden_size=32"], "parallel.tensor_nd: [2, 2, 2]: x*y = "
     "4 must divide model.num_heads=2 (3-D tensor parallel splits it on x and y; valid "
     "x*y: 1, 2)"),
    (["model.seq_length=6"], "parallel.tensor_nd: [2, 2, 2]: x*y = 4 must divide "
     "model.seq_length=6 (3-D tensor parallel splits it on x and y; valid x*y: 1, 2, 3, 6)"),
    (["parallel.overlap.tp_comm=true"], "parallel.overlap.tp_comm: true: chunked overlap of "
     "the 3-D tensor-parallel collectives (parallel.tensor_nd) is not simulated yet "
     "(allowed: auto, false)"),
    (["model.moe={experts: 4}"], "parallel.tensor_nd: [2, 2, 2] with model.moe is not "
     "simulated yet (allowed with 3-D tensor parallel: no model.moe)"),
    (["parallel.tensor=4", "parallel.data=2"], "parallel.tensor_nd: [2, 2, 2]: 2*2*2 = 8 "
     "must equal parallel.tensor=4"),
])
def test_bad_three_d_settings_are_refused_by_name(overrides, message):
    with pytest.raises(InputError) as err:
        _bundled(TINY, overrides)
    assert str(err.value).endswith(f": {message}")


def test_the_device_count_is_checked_with_the_cube(invoke_cli):
    """data * tensor * pipeline * context equals the devices, tensor being x*y*z: a cube
    of 8 with data=2 needs 16 devices, and the CLI says so with exit 2."""
    result = invoke_cli("run", TINY, "--set", "parallel.data=2")
    assert result.exit_code == 2, result.output
    assert stderr_of(result).strip().endswith(
        "parallel: data*tensor*pipeline = 2*8*1 = 16 must equal cluster.nodes*"
        "cluster.devices_per_node = 1*8 = 8")


@pytest.mark.parametrize("kind", ["mlp", "resnet"])
def test_three_d_is_refused_by_name_on_other_models(kind, invoke_cli):
    message = refusal(invoke_cli, kind, "parallel.tensor_nd=[2,2,2]")
    assert ("parallel.tensor_nd: [2, 2, 2]: 3-D tensor parallel splits a transformer's "
            f"attention and FFN weights; a model of type '{kind}' has none (remove the key)"
            ) in message


def test_a_device_computes_at_the_pace_of_its_whole_cube():
    """Under full fidelity a device's compute scope is its x * y * z cube: the weight axis
    runs in lock step with the grid (every GEMM waits for its weight's gather)."""
    from simulator.config.hardware import load_profile
    from simulator.simulation.heterogeneous import Cluster

    s = _bundled(TINY, ["cluster.slow=[{devices: [5], compute: 0.5}]"])
    costs = Cluster(s, load_profile(s.hardware), "full", None).costs
    assert costs is not None
    assert costs.scope(0, None).tolist() == list(range(8))
    assert costs.pacer(0) == 5


def test_a_gathered_parameter_takes_the_first_dim_its_axis_still_divides():
    """`split_on`: the weight axis splits the first dim it divides after the other axes'
    splits (nested inside them: it is the innermost axis), or leaves the tensor whole."""
    from simulator.sharding.layout import Layout
    from simulator.sharding.mesh import Mesh
    from simulator.sharding.placement import B
    from simulator.sharding.plan import split_on

    mesh = Mesh.of(tpy=2, tpz=2)
    by_y = Layout((Shard(0), B))
    assert split_on(by_y, (4, 6), mesh, ("tpz",)).placements == (Shard(0), Shard(0))
    assert split_on(by_y, (2, 6), mesh, ("tpz",)).placements == (Shard(0), Shard(1))
    assert split_on(by_y, (2, 3), mesh, ("tpz",)).placements == (Shard(0), B)
