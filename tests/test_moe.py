"""Mixture of experts (GShard / Switch): the routing ops equal ground truth under every
sharding, the MoE layer verifies against one device on an expert-parallel mesh and fails
when tokens reach the wrong experts, run's all-to-all bytes follow the closed form, and
`parallel.expert` / `model.moe.*` change what the technique says or are refused by name."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
import yaml
from model_kinds import refusal

from simulator.config.hardware import load_profile
from simulator.config.resources import resolve_yaml
from simulator.config.scenario import parse_scenario
from simulator.errors import InputError
from simulator.graph.graph import Graph, GraphBuilder
from simulator.graph.ops import KernelCtx, get_family
from simulator.graph.ops import base as ops_base
from simulator.graph.ops.moe import expert_capacity, gate_weights, route_tokens
from simulator.models.cases import build_case
from simulator.numeric.execution import Faults
from simulator.numeric.rulecheck import check_signature
from simulator.numeric.verify import verify_case
from simulator.program.model_program import transformer_program
from simulator.sharding.mesh import Mesh
from simulator.sharding.placement import Partial, Shard
from simulator.sharding.plan import build_plan
from simulator.sharding.rules import signatures
from simulator.simulation.simulate import simulate
from simulator.simulation.verify import verify_scenario


def _bundled(name: str, overrides=()):
    path = resolve_yaml(name, "scenarios")
    return parse_scenario(yaml.safe_load(path.read_text()), str(path), list(overrides))


def _moe_data(**moe) -> dict:
    """A small MoE GPT on 8 H100s: data 8 (expert 4), 4 layers, 8 experts top-2."""
    return {"name": "moe", "hardware": "h100-sxm",
            "cluster": {"nodes": 1, "devices_per_node": 8},
            "model": {"type": "transformer", "layers": 4, "hidden_size": 512,
                      "num_heads": 8, "ffn_hidden_size": 1024, "seq_length": 256,
                      "vocab_size": 1024, "dtype": "bf16",
                      "moe": {"experts": 8, "top_k": 2, "capacity_factor": 1.25, **moe}},
            "training": {"global_batch_size": 32, "micro_batch_size": 2},
            "parallel": {"data": 8, "tensor": 1, "expert": 4}}


def _parse(data: dict, overrides=()):
    return parse_scenario(data, "s.yaml", list(overrides))


# ---- the routing ops ------------------------------------------------------------------

def test_capacity_and_routing_follow_gshard():
    """C = ceil(k * cf * s / E); first choices take slots before any second choice; a token
    over capacity is dropped there (slot -1, weight 0)."""
    assert expert_capacity(8, 2, 1.25, 4096) == 1280
    assert expert_capacity(8, 1, 1.0, 3) == 1
    logits = np.array([[[3.0, 2.0, 0.0], [3.0, 0.0, 2.0], [0.0, 3.0, 2.0]]])
    route = route_tokens(logits, top_k=2, capacity=2)
    # first choices: experts 0, 0, 1 -> slots 0, 1, 0; second choices: 1, 2, 2: expert 1
    # already holds one first choice (slot 1), expert 2 fills slots 0 and 1
    assert route[0, :, 0].tolist() == [[0, 0], [0, 1], [1, 0]]
    assert route[0, :, 1].tolist() == [[1, 1], [2, 0], [2, 1]]
    dropped = route_tokens(logits, top_k=1, capacity=1)
    assert dropped[0, :, 0].tolist() == [[0, 0], [0, -1], [1, 0]]
    w = gate_weights(logits, dropped)
    assert w[0, 1, 0] == 0.0  # dropped: passes through the residual only
    p = np.exp(logits[0, 0]) / np.exp(logits[0, 0]).sum()
    assert w[0, 0, 0] == pytest.approx(p[0])  # Switch: the softmax probability, top-1
    w2 = gate_weights(logits, route)
    assert w2.sum(axis=-1) == pytest.approx(np.ones((1, 3)))  # GShard: renormalised top-2


def _op_graph(kind: str) -> Graph:
    g = GraphBuilder()
    if kind == "route":
        g.op("MoeRoute", [g.tensor("x0", (4, 6, 4))], "y", top_k=2, capacity=3)
    elif kind == "gate":
        g.op("MoeGateWeights", [g.tensor("x0", (4, 6, 4)), g.tensor("x1", (4, 6, 2, 2))], "y")
    elif kind == "dispatch":
        g.op("MoeDispatch", [g.tensor("x0", (4, 6, 2, 2)), g.tensor("x1", (4, 6, 4))], "y",
             experts=4, capacity=2)
    else:
        g.op("MoeCombine", [g.tensor("x0", (4, 6, 2, 2)), g.tensor("x1", (4, 6, 2)),
                            g.tensor("x2", (4, 4, 2, 4))], "y")
    return g.build()


@pytest.mark.parametrize("kind", ["route", "gate", "dispatch", "combine"])
def test_every_signature_of_the_routing_ops_matches_ground_truth(kind):
    """Forward and VJP of every valid signature on a 2 x 2 mesh equal one device's, Partial
    inputs as unequal summands (dispatch and combine split experts, slots and tokens)."""
    graph = _op_graph(kind)
    op = graph.ops[0]
    mesh = Mesh.of(a=2, b=2)
    sigs = signatures(graph.labels(op), mesh, graph.shapes(op))
    assert len(sigs) == {"route": 4, "gate": 8, "dispatch": 62, "combine": 78}[kind]
    worst = max(check_signature(graph, mesh, s, seed=i).worst for i, s in enumerate(sigs))
    assert worst < 1e-12


@pytest.mark.parametrize("k", [1, 2])
def test_gate_weight_gradient_matches_finite_differences(k):
    rng = np.random.default_rng(k)
    logits = rng.standard_normal((2, 5, 4))
    route = route_tokens(logits, k, 2)
    fam = get_family("MoeGateWeights")
    ctx = KernelCtx.whole([logits.shape, route.shape], (2, 5, k))
    dy = rng.standard_normal((2, 5, k))
    got = fam.vjp([logits, route], None, dy, {}, ctx)[0]
    want = np.zeros_like(logits)
    for idx in np.ndindex(logits.shape):
        hi, lo = logits.copy(), logits.copy()
        hi[idx] += 1e-6
        lo[idx] -= 1e-6
        want[idx] = ((gate_weights(hi, route) - gate_weights(lo, route)) * dy).sum() / 2e-6
    assert np.abs(got - want).max() < 1e-8


# ---- verify -----------------------------------------------------------------------------

def test_moe_layer_verifies_on_an_expert_parallel_mesh():
    """data=4 (expert=4) x tensor=2 with sequence parallel: tokens dropped at capacity, the
    all-to-all dispatch and combine forward and backward (2 micro-batches x 4), every
    gradient and update equal to one device's."""
    s = _bundled("moe-tiny-verify")
    case = build_case(s)
    assert case.mesh.axes == (("dp", 1), ("ep", 4), ("tp", 2))
    result = verify_scenario(s)
    assert result.ok, [c for c in result.checks if not c.ok]
    assert result.collectives["all_to_all"] == 2 * 4
    names = {c.tensor for c in result.checks}
    assert {"l1.dispatch", "l1.combine", "l1.experts.w1.grad", "l1.router.w.updated"} <= names
    # capacity ceil(2 * 1.25 * 8 / 8) = 3 slots for 16 choices over 8 experts a sample:
    # random logits overflow some expert, so dropped tokens are part of the proof
    attrs = next(op.attrs for op in case.sharded.ops if op.type == "MoeRoute")
    assert (attrs["top_k"], attrs["capacity"]) == (2, 3)
    route = route_tokens(np.random.default_rng(0).standard_normal((4, 8, 8)), 2, 3)
    assert (route[..., 1] < 0).any()


def _wrong_route(monkeypatch):
    """MoeRoute that sends each token to the next expert (a routing bug), registered for
    this test only."""
    base = get_family("MoeRoute")

    def forward(xs, attrs, ctx):
        route = base.forward(xs, attrs, ctx)
        route[..., 0] = (route[..., 0] + 1) % xs[0].shape[-1]
        return route

    monkeypatch.setitem(ops_base._REGISTRY, "moeroutewrong",
                        dataclasses.replace(base, name="MoeRouteWrong", forward=forward))


def test_verify_fails_when_tokens_reach_the_wrong_experts(monkeypatch):
    s = _bundled("moe-tiny-verify")
    case = build_case(s)
    # 1. the dispatch all-to-all skipped: each rank runs its own tokens through its own
    #    experts, the slots labelled as other experts' (the first forward all-to-all)
    plan = build_plan(case.sharded, case.mesh, 8)
    comms = [st for _, st in plan.forward_steps() if st.is_comm]
    first = next(i for i, st in enumerate(comms) if st.kind == "all_to_all")
    assert not verify_case(case, faults=Faults(drop_comm=first)).ok
    # 2. the sharded run routes every token to the next expert
    _wrong_route(monkeypatch)
    ops = tuple(dataclasses.replace(op, type="MoeRouteWrong") if op.type == "MoeRoute"
                else op for op in case.sharded.ops)
    bad = dataclasses.replace(case, sharded=Graph(case.sharded.tensors, ops))
    result = verify_case(bad)
    assert not result.ok
    assert not next(c for c in result.checks if c.tensor == "l1.dispatch").ok
    assert next(c for c in result.checks if c.tensor == "l1.router").ok  # before the bug


def test_expert_weights_split_on_ep_and_reduce_over_dp_only():
    """Expert FFN weights are split on ep (experts/ep per rank) and their gradients Partial
    on dp alone; the dense weights are data parallel over dp and ep."""
    case = build_case(_parse(_moe_data()))
    mesh = case.mesh
    plan = build_plan(case.sharded, mesh)
    ep, dp = mesh.axis_index("ep"), mesh.axis_index("dp")
    assert plan.layouts["l1.experts.w1"].placements[ep] == Shard(0)
    grad = plan.grad_layout("l1.experts.w1").placements
    assert isinstance(grad[dp], Partial) and grad[ep] == Shard(0)
    dense = plan.grad_layout("l1.wq").placements
    assert isinstance(dense[dp], Partial) and isinstance(dense[ep], Partial)


# ---- run: closed forms --------------------------------------------------------------------

def _a2a_bytes(m, mbs: int, e: int) -> float:
    """One all-to-all's send buffer per device: the micro-batch's expert slots,
    mbs * E * ceil(k * cf * s / E) * h * e bytes (GShard Sec. 3.2's [E, C, M] per group)."""
    moe = m.moe
    cap = math.ceil(moe.top_k * moe.capacity_factor * m.seq_length / moe.experts)
    return mbs * moe.experts * cap * m.hidden_size * e


@pytest.mark.parametrize("expert", [2, 4, 8])
def test_all_to_all_bytes_per_device_follow_the_closed_form(expert):
    """Per MoE layer and micro-batch: dispatch and combine forward, their transposes
    backward, each of mbs * E * C * h * e bytes on the `ep` axis (whatever the degree: a
    device sends its tokens' slots for every expert); per iteration that times the MoE
    layers and the micro-batches."""
    s = _parse(_moe_data(), [f"parallel.expert={expert}"])
    prog = transformer_program(s)
    one = _a2a_bytes(s.model, s.training.micro_batch_size, 2)
    a2a = [c for c in prog.block("layer").fwd + prog.block("layer").bwd
           if getattr(c, "collective", None) == "all_to_all"]
    assert [(c.axis, c.phase, c.bytes) for c in a2a] == \
        [("ep", "fwd", one)] * 2 + [("ep", "bwd", one)] * 2
    if expert == 4:
        result = simulate(s, load_profile("h100-sxm"))
        total = dict(result.comm_bytes)["all_to_all"]
        assert total == pytest.approx(4 * one * s.model.layers * s.grad_accum_steps)


def test_tensor_parallel_experts_shrink_the_backward_all_to_all():
    """With the expert FFN split on tp the slot gradient arrives Partial on tp: the planner
    reduce-scatters it on tp, all-to-alls the half on ep and all-gathers on tp (cheaper than
    an all-reduce before a whole all-to-all); the forward pair is the closed form."""
    s = _parse(_moe_data(), ["parallel.expert=2", "parallel.tensor=2", "parallel.data=4"])
    prog = transformer_program(s)
    one = _a2a_bytes(s.model, s.training.micro_batch_size, 2)
    fwd = [c.bytes for c in prog.block("layer").fwd if getattr(c, "collective", "") == "all_to_all"]
    assert fwd == [one, one]
    back = [(c.collective, c.axis, c.bytes) for c in prog.block("layer").bwd
            if c.name.startswith("l1.dispatch.")]
    assert back == [("reduce_scatter", "tp", one), ("all_to_all", "ep", one / 2),
                    ("all_gather", "tp", one)]


def test_mixtral_all_to_all_closed_form():
    """The bundled Mixtral scenario: C = ceil(2 * 1.25 * 4096 / 8) = 1280 slots, 83.9 MB a
    collective, 4 per layer and micro-batch, 8 layers a stage, 16 micro-batches."""
    s = _bundled("moe-mixtral-8x7b-64-h100")
    one = _a2a_bytes(s.model, 1, 2)
    assert one == 8 * 1280 * 4096 * 2
    prog = transformer_program(s)
    assert [c.bytes for c in prog.block("layer").fwd
            if getattr(c, "collective", "") == "all_to_all"] == [one, one]
    assert 4 * one * 8 * 16 == pytest.approx(42.95e9, rel=1e-3)


def test_model_flops_count_top_k_experts_per_token():
    """The capacity factor pads slots (hardware FLOPs), the model FLOPs count each token's
    top_k experts: equal to a dense model whose FFN is top_k times wider, plus the router
    GEMM (2 * tokens * h * E forward, twice that backward)."""
    hw = load_profile("h100-sxm")
    moe = _parse(_moe_data(), ["parallel.expert=1"])
    dense_data = _moe_data()
    del dense_data["model"]["moe"]
    dense_data["model"]["ffn_hidden_size"] = 2 * 1024
    dense_data["parallel"]["expert"] = 1
    dense = _parse(dense_data)
    m = moe.model
    tokens = moe.training.global_batch_size * m.seq_length
    router = 3 * 2 * tokens * m.hidden_size * m.moe.experts * m.layers
    got, want = simulate(moe, hw), simulate(dense, hw)
    assert got.model_flops == pytest.approx(want.model_flops + router, rel=1e-12)
    # E * C = 8 * ceil(2 * 1.25 * 256 / 8) = 640 slots for 2 * 256 choices: 25% padding of
    # the expert GEMMs' 12 * tokens * h * (k f) FLOPs (two GEMMs, forward and backward)
    experts = 12 * tokens * m.hidden_size * 2 * m.ffn * m.layers
    assert got.hardware_flops - got.model_flops == pytest.approx(0.25 * experts, rel=1e-12)


def test_parameters_count_every_expert_split_over_ep():
    """Per device: the dense layer weights plus experts/ep of the experts (each 2 * h * f),
    and the router (h * E)."""
    for expert in (1, 2, 4, 8):
        s = _parse(_moe_data(), [f"parallel.expert={expert}"])
        prog = transformer_program(s)
        h, f, E = 512, 1024, 8
        attn = 4 * h * h + 4 * h + 2 * 2 * h  # q, k, v, o with biases; two norms
        experts = E // expert * 2 * h * f
        assert prog.block("layer").params == attn + h * E + experts


# ---- run: what-ifs and knobs --------------------------------------------------------------

def test_imbalance_slows_the_busiest_rank_and_not_the_model_flops():
    """On sequences long enough that the layers' kernels outlast the host's launches (the
    small model's 256-token layers are host-bound: lower.moe_host)."""
    hw = load_profile("h100-sxm")
    longer = ["model.seq_length=4096"]
    even = simulate(_parse(_moe_data(), longer), hw)
    hot = simulate(_parse(_moe_data(imbalance=2.0), longer), hw)
    assert hot.iteration_time_s > even.iteration_time_s
    assert dict(hot.comm_bytes)["all_to_all"] == pytest.approx(
        2.0 * dict(even.comm_bytes)["all_to_all"])
    assert hot.model_flops == pytest.approx(even.model_flops, rel=1e-12)
    assert hot.hardware_flops == pytest.approx(even.hardware_flops, rel=1e-12)


def test_moe_every_other_layer_halves_the_moe_layers():
    """every=2 (GShard): layers 1 and 3 are MoE; the program's block is two layers."""
    s = _parse(_moe_data(every=2))
    prog = transformer_program(s)
    assert prog.block("layer").layers == 2
    assert sum(getattr(c, "collective", "") == "all_to_all" for c in prog.block("layer").fwd) == 2
    hw = load_profile("h100-sxm")
    result = simulate(s, hw)
    one = _a2a_bytes(s.model, 2, 2)
    assert dict(result.comm_bytes)["all_to_all"] == pytest.approx(
        4 * one * 2 * s.grad_accum_steps)
    assert list(result.plan.stage_layers) == [4]


def test_pipeline_splits_whole_moe_blocks():
    s = _parse(_moe_data(every=2), ["parallel.pipeline=2", "parallel.data=4",
                                    "parallel.expert=2"])
    assert list(simulate(s, load_profile("h100-sxm")).plan.stage_layers) == [2, 2]
    with pytest.raises(InputError) as err:
        _parse(_moe_data(every=2), ["parallel.pipeline=2", "parallel.data=4",
                                    "parallel.expert=2", "parallel.pipeline_layers=[1,3]"])
    assert str(err.value).endswith("parallel.pipeline_layers: [1, 3]: each stage's layers "
                                   "must be a multiple of model.moe.every=2 (the block of "
                                   "dense layers and one MoE layer that repeats)")


@pytest.mark.parametrize("override,message", [
    ("parallel.expert=3", "parallel.expert: 3 must divide parallel.data=8 (valid: 1, 2, 4, "
                          "8)"),
    ("model.moe.experts=6", "parallel.expert: 4 must divide model.moe.experts=6 (valid: 1, "
                            "2, 3, 6)"),
    ("model.moe.every=3", "model.moe.every: 3 must divide model.layers=4 (valid: 1, 2, 4)"),
    ("model.moe.top_k=9", "model.moe.top_k: 9 must be at most model.moe.experts=8"),
])
def test_bad_moe_settings_are_refused_by_name(override, message):
    with pytest.raises(InputError) as err:
        _parse(_moe_data(), [override])
    assert str(err.value) == f"s.yaml with --set {override}: {message}"


def test_imbalance_needs_expert_parallel_ranks():
    """With one expert-parallel rank the knob would be inert: refused by name."""
    with pytest.raises(InputError) as err:
        _parse(_moe_data(imbalance=2.0), ["parallel.expert=1"])
    assert str(err.value) == (
        "s.yaml with --set parallel.expert=1: model.moe.imbalance: 2 needs parallel.expert "
        "> 1: on one expert-parallel rank every device runs all experts on its own tokens, "
        "so no rank is busier than another (allowed: 1.0)")


@pytest.mark.parametrize("kind", ["transformer", "mlp", "resnet", "graph"])
def test_parallel_expert_is_refused_by_name_without_experts(kind, invoke_cli):
    message = refusal(invoke_cli, kind, "parallel.expert=2")
    assert "parallel.expert: 2 needs a mixture-of-experts transformer (model.moe" in message
    assert "allowed: 1)" in message


def test_parallel_expert_changes_the_moe_result(invoke_cli):
    """Each expert degree runs, moves tokens by all-to-all (none at expert=1: every rank
    holds every expert), holds fewer expert parameters per device as it grows, and takes
    another time."""
    seen = {}
    for expert in (1, 2, 8):
        result = invoke_cli("run", "moe-tiny-verify", "--json", "--set",
                            f"parallel.expert={expert}", "--set", "parallel.data=8",
                            "--set", "parallel.tensor=1", "--set",
                            "parallel.sequence_parallel=false")
        assert result.exit_code == 0, result.output
        out = json.loads(result.stdout)
        seen[expert] = (out["communication"]["by_collective"].get("all_to_all", 0),
                        out["memory"]["by_category_bytes"]["parameters"],
                        out["iteration_time_s"])
    assert seen[1][0] == 0 and seen[2][0] > 0 and seen[8][0] > 0
    assert seen[1][1] > seen[2][1] > seen[8][1]
    assert len({t for _, _, t in seen.values()}) == 3


def test_plan_searches_the_expert_degree():
    """`plan`'s space has the expert degree: every divisor of the data degree that divides
    the experts (planner.generic.generic_splits)."""
    from simulator.api import load_scenario
    from simulator.planner.generic import generic_splits

    sc = load_scenario("moe-mixtral-8x7b-64-h100").scenario
    splits = [c.to_dict() for c in generic_splits(sc, 64)]
    experts = {s["parallel.expert"] for s in splits if s["parallel.data"] == "16"}
    assert experts == {"1", "2", "4", "8"}  # Mixtral: 8 experts
