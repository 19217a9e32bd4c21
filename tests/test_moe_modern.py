"""Mixture of experts as trained today (issue 22 item 2): routed experts of their own width,
shared experts, dense leading layers, softmax or sigmoid scores renormalised or not and
scaled, dropless routing. The gate op equals finite differences and ground truth under every
sharding; one MoE layer of the graph equals a numpy reference written from the papers'
equations, and fails it under a mutation (a dropped shared-expert output, sigmoid and
softmax swapped); verify proves it on an expert- and tensor-parallel mesh and fails when the
sharded run drops the shared experts or swaps the score function."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from test_moe import _moe_data

from benchmarks.deepep_alltoall import bottleneck_GBps
from simulator.config.hardware import load_profile
from simulator.config.scenario import parse_scenario
from simulator.cost.compute import compute_efficiency
from simulator.errors import InputError
from simulator.graph.builders import FFNS
from simulator.graph.decoder import GptDims, LayerKind
from simulator.graph.graph import Graph, GraphBuilder
from simulator.graph.ops import KernelCtx, get_family
from simulator.graph.ops import base as ops_base
from simulator.graph.ops.moe import gate_weights, route_tokens
from simulator.models.cases import build_case
from simulator.models.layers import layer_kinds
from simulator.models.transformer_plan import gpt_dims
from simulator.numeric.rulecheck import check_signature
from simulator.numeric.verify import verify_case
from simulator.program.model_program import transformer_program
from simulator.sharding.mesh import Mesh
from simulator.sharding.placement import Shard
from simulator.sharding.plan import build_plan
from simulator.sharding.rules import signatures
from simulator.simulation.simulate import simulate

ROUTE_ATTRS = [{"groups": 2, "top_groups": 1}, {"groups": 2, "top_groups": 1,
                                                 "score": "sigmoid"}]
GATE_ATTRS = [{}, {"score": "sigmoid"}, {"score": "sigmoid", "normalize": False},
              {"normalize": False, "scale": 2.5}, {"score": "sigmoid", "scale": 2.5}]


def _data(**moe) -> dict:
    """8 CPU devices, data 4 (expert 4) x tensor 2 with sequence parallel, 2 layers, the
    second an MoE layer of 8 experts (top-2): the shape of moe-tiny-verify."""
    return {"name": "moe", "hardware": "cpu-x86",
            "cluster": {"nodes": 1, "devices_per_node": 8},
            "model": {"type": "transformer", "layers": 2, "hidden_size": 32, "num_heads": 4,
                      "ffn_hidden_size": 32, "seq_length": 8, "vocab_size": 64,
                      "dtype": "fp32",
                      "moe": {"experts": 8, "top_k": 2, "capacity_factor": 1.25,
                              "every": 2, **moe}},
            "training": {"global_batch_size": 16, "micro_batch_size": 2,
                         "optimizer": "adam", "learning_rate": 0.001},
            "parallel": {"data": 4, "tensor": 2, "expert": 4, "sequence_parallel": True}}


def _parse(data: dict, overrides=()):
    return parse_scenario(data, "s.yaml", list(overrides))


# ---- the gate op ---------------------------------------------------------------------------

def test_sigmoid_gates_follow_deepseek_v3():
    """DeepSeek-V3 (arXiv:2412.19437) eqs. 13-15: s = sigmoid(u . e_i); the top-k scores
    divided by their sum; times routed_scaling_factor. Without normalisation: the sigmoid
    itself; softmax normalised over the chosen: a softmax over the chosen logits."""
    logits = np.array([[[2.0, -1.0, 0.5, 1.0]]])
    route = route_tokens(logits, top_k=2, capacity=4)
    assert route[0, 0, :, 0].tolist() == [0, 3]
    s = 1 / (1 + np.exp(-np.array([2.0, 1.0])))
    got = gate_weights(logits, route, {"score": "sigmoid", "scale": 2.5})
    assert got[0, 0] == pytest.approx(2.5 * s / s.sum(), rel=1e-12)
    raw = gate_weights(logits, route, {"score": "sigmoid", "normalize": False})
    assert raw[0, 0] == pytest.approx(s, rel=1e-12)
    soft = gate_weights(logits, route, {"normalize": False})
    p = np.exp(logits[0, 0]) / np.exp(logits[0, 0]).sum()
    assert soft[0, 0] == pytest.approx(p[[0, 3]], rel=1e-12)
    assert gate_weights(logits, route)[0, 0] == pytest.approx(
        np.exp([2.0, 1.0]) / np.exp([2.0, 1.0]).sum(), rel=1e-12)


@pytest.mark.parametrize("attrs", GATE_ATTRS)
@pytest.mark.parametrize("k", [1, 2])
def test_gate_gradient_matches_finite_differences(attrs, k):
    rng = np.random.default_rng(k)
    logits = rng.standard_normal((2, 5, 4))
    route = route_tokens(logits, k, 2)  # capacity 2 of 5 tokens: some choices dropped
    ctx = KernelCtx.whole([logits.shape, route.shape], (2, 5, k))
    dy = rng.standard_normal((2, 5, k))
    got = get_family("MoeGateWeights").vjp([logits, route], None, dy, attrs, ctx)[0]
    want = np.zeros_like(logits)
    for idx in np.ndindex(logits.shape):
        hi, lo = logits.copy(), logits.copy()
        hi[idx] += 1e-6
        lo[idx] -= 1e-6
        want[idx] = ((gate_weights(hi, route, attrs) - gate_weights(lo, route, attrs))
                     * dy).sum() / 2e-6
    assert np.abs(got - want).max() < 1e-8


@pytest.mark.parametrize("attrs", GATE_ATTRS[1:])
def test_every_signature_of_the_gate_matches_ground_truth(attrs):
    """The rule property check of the gate's new attributes: every valid signature on a
    2 x 2 mesh, forward and VJP, equals one device's."""
    g = GraphBuilder()
    g.op("MoeGateWeights", [g.tensor("x0", (4, 6, 4)), g.tensor("x1", (4, 6, 2, 2))], "y",
         **attrs)
    graph = g.build()
    mesh = Mesh.of(a=2, b=2)
    sigs = signatures(graph.labels(graph.ops[0]), mesh, graph.shapes(graph.ops[0]))
    assert len(sigs) == 8
    worst = max(check_signature(graph, mesh, s, seed=i).worst for i, s in enumerate(sigs))
    assert worst < 1e-12


@pytest.mark.parametrize("attrs", ROUTE_ATTRS)
def test_every_signature_of_group_limited_routing_matches_ground_truth(attrs):
    g = GraphBuilder()
    g.op("MoeRoute", [g.tensor("x0", (4, 6, 4))], "y", top_k=2, capacity=3, **attrs)
    graph = g.build()
    mesh = Mesh.of(a=2, b=2)
    sigs = signatures(graph.labels(graph.ops[0]), mesh, graph.shapes(graph.ops[0]))
    assert len(sigs) == 4
    worst = max(check_signature(graph, mesh, s, seed=i).worst for i, s in enumerate(sigs))
    assert worst < 1e-12


# ---- one MoE layer against a numpy reference -------------------------------------------------

_DIMS = GptDims(layers=1, hidden=8, heads=2, kv_heads=2, ffn=12, seq=6, vocab=16, batch=2,
                swiglu=True, dropout=0.0, experts=4, top_k=2, capacity=6, expert_ffn=5,
                shared_ffn=7, score="sigmoid", normalize=True, route_scale=2.5)


def _run_layer(d: GptDims, rng: np.random.Generator) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """(every parameter and the input, the output) of the graph's MoE FFN for `d`, each op's
    registered forward run on one device in graph order."""
    g = GraphBuilder()
    x = g.tensor("x", [d.batch, d.seq, d.hidden], "input")
    out = FFNS["moe"](g, x, "l0", d, LayerKind(ffn="moe"))
    graph = g.build()
    vals = {n: rng.standard_normal(t.shape) for n, t in graph.tensors.items()
            if t.kind in ("parameter", "input")}
    for op in graph.ops:
        xs = [vals[i] for i in op.inputs]
        ctx = KernelCtx.whole([v.shape for v in xs], graph.tensors[op.output].shape)
        vals[op.output] = get_family(op.type).forward(xs, dict(op.attrs), ctx)
    return vals, vals[out]


def _reference(v: dict[str, np.ndarray], d: GptDims, score: str, shared: bool) -> np.ndarray:
    """The MoE FFN from its equations: a = LN(x); u = a W_r; s = softmax(u) or sigmoid(u)
    (DeepSeek-V3 eq. 15); the top-k experts by u; g = s over the chosen, divided by their sum,
    times the scale (eqs. 13-14); y = x + sum_i g_i FFN_i(a) + FFN_shared(a) (eq. 12), each
    FFN SwiGLU: (silu(a W1) * a W3) W2. Dropless: no token dropped."""
    x = v["x"]
    mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    a = (x - mu) / np.sqrt(var + 1e-5) * v["l0.ln2.g"] + v["l0.ln2.b"]
    u = a @ v["l0.router.w"]
    s = 1 / (1 + np.exp(-u)) if score == "sigmoid" else \
        np.exp(u) / np.exp(u).sum(-1, keepdims=True)

    def ffn(w1, w3, w2, t):
        h1 = t @ w1
        return (h1 / (1 + np.exp(-h1)) * (t @ w3)) @ w2

    y = np.zeros_like(x)
    for b, t in np.ndindex(x.shape[:2]):
        top = np.argsort(-u[b, t], kind="stable")[:d.top_k]
        gates = d.route_scale * s[b, t, top] / s[b, t, top].sum()
        for gi, e in zip(gates, top):
            y[b, t] += gi * ffn(v["l0.experts.w1"][e], v["l0.experts.w3"][e],
                                v["l0.experts.w2"][e], a[b, t])
    if shared:
        y += ffn(v["l0.shared.w1"], v["l0.shared.w3"], v["l0.shared.w2"], a)
    return x + y


def test_moe_layer_equals_its_numpy_reference_and_fails_its_mutations():
    """Shared experts, sigmoid scores normalised over the top-2 and scaled by 2.5, routed
    experts 5 wide and shared 7 wide beside a dense width of 12, room for every token: the
    graph equals the reference; the reference without the shared experts' output, or with
    softmax scores, does not."""
    vals, out = _run_layer(_DIMS, np.random.default_rng(0))
    assert vals["l0.experts.w1"].shape == (4, 8, 5)
    assert vals["l0.shared.w2"].shape == (7, 8)
    assert np.abs(out - _reference(vals, _DIMS, "sigmoid", True)).max() < 1e-12
    assert np.abs(out - _reference(vals, _DIMS, "sigmoid", False)).max() > 1e-2
    assert np.abs(out - _reference(vals, _DIMS, "softmax", True)).max() > 1e-2
    # and the graph with softmax scores equals the softmax reference
    soft = dataclasses.replace(_DIMS, score="softmax")
    vals, out = _run_layer(soft, np.random.default_rng(0))
    assert np.abs(out - _reference(vals, soft, "softmax", True)).max() < 1e-12


# ---- verify: proved on an expert x tensor parallel mesh, and failed by mutations -------------

_MODERN = {"ffn_hidden_size": 16, "shared_experts": 2, "shared_ffn_hidden_size": 8,
           "score": "sigmoid", "scaling_factor": 2.5}


def test_shared_experts_and_sigmoid_routing_verify_on_an_expert_parallel_mesh():
    s = _parse(_data(**_MODERN))
    case = build_case(s)
    assert case.mesh.axes == (("dp", 1), ("ep", 4), ("tp", 2))
    shapes = {n: t.shape for n, t in case.sharded.tensors.items()}
    assert shapes["l1.experts.w1"] == (8, 32, 16) and shapes["l1.shared.w1"] == (32, 16)
    gate = next(op for op in case.sharded.ops if op.type == "MoeGateWeights")
    assert dict(gate.attrs)["score"] == "sigmoid" and dict(gate.attrs)["scale"] == 2.5
    result = verify_case(case)
    assert result.ok, [c for c in result.checks if not c.ok]
    names = {c.tensor for c in result.checks}
    assert {"l1.sfc2", "l1.sadd", "l1.shared.w1.grad", "l1.experts.w2.grad"} <= names


def _mutant(monkeypatch, case, op_name: str, family: str, forward=None, attrs=None):
    """The case with the sharded run's op `op_name` run by a family `family` (registered for
    this test only) whose forward is `forward` (else its own), attrs updated by `attrs`."""
    op = next(op for op in case.sharded.ops if op.name == op_name)
    base = get_family(op.type)
    monkeypatch.setitem(ops_base._REGISTRY, family.lower(), dataclasses.replace(
        base, name=family, forward=forward or base.forward))
    ops = tuple(dataclasses.replace(o, type=family, attrs={**dict(o.attrs), **(attrs or {})})
                if o.name == op_name else o for o in case.sharded.ops)
    return dataclasses.replace(case, sharded=Graph(case.sharded.tensors, ops))


def test_verify_fails_when_the_shared_experts_output_is_dropped(monkeypatch):
    case = build_case(_parse(_data(**_MODERN)))
    add = get_family("Add")

    def first_only(xs, attrs, ctx):
        return add.forward([xs[0], np.zeros_like(xs[1])], attrs, ctx)

    result = verify_case(_mutant(monkeypatch, case, "l1.sadd", "AddNoShared", first_only))
    assert not result.ok
    assert not next(c for c in result.checks if c.tensor == "l1.sadd").ok
    assert next(c for c in result.checks if c.tensor == "l1.combine").ok  # before the bug


def test_verify_fails_when_sigmoid_and_softmax_are_swapped(monkeypatch):
    case = build_case(_parse(_data(**_MODERN)))
    bad = _mutant(monkeypatch, case, "l1.gate", "MoeGateSwapped", attrs={"score": "softmax"})
    result = verify_case(bad)
    assert not result.ok
    assert not next(c for c in result.checks if c.tensor == "l1.gate").ok
    assert next(c for c in result.checks if c.tensor == "l1.route").ok


def test_first_dense_layers_run_and_verify_as_their_own_group():
    """4 layers, the first dense and 3 MoE (shared experts, sigmoid, own widths), dropless:
    not periodic, so the program has a dense and an MoE group (1 + 3 copies) and verify
    keeps both kinds."""
    data = _data(first_dense=1, every=1, **_MODERN)
    data["model"]["layers"] = 4
    s = _parse(data, ["model.moe.capacity_factor=null"])
    prog = transformer_program(s)
    layers = [(b.name, b.repeat, b.expert_params > 0) for b in prog.blocks
              if b.name.startswith("layer")]
    assert layers == [("layer0", 1, False), ("layer1", 3, True)]
    case = build_case(s)
    kinds = [op.name.split(".")[0] for op in case.sharded.ops if op.type == "MoeRoute"]
    assert kinds and "l0" not in kinds
    result = verify_case(case)
    assert result.ok, [c for c in result.checks if not c.ok]


def test_dropless_verifies_with_room_for_every_token():
    """A dropless router's verification case has a slot per token of the sample (nothing
    dropped, whatever the routing); run's graph sizes each expert for its mean load."""
    s = _parse(_data(), ["model.moe.capacity_factor=null"])
    assert s.model.moe.dropless
    assert gpt_dims(s, False).capacity == 2  # ceil(top_k * seq / experts) = ceil(2 * 8 / 8)
    case = build_case(s)
    route = next(op for op in case.sharded.ops if op.type == "MoeRoute")
    assert dict(route.attrs)["capacity"] == 8  # seq
    assert verify_case(case).ok


# ---- the keys: layer kinds, rules --------------------------------------------------------

def test_first_dense_layers_then_every_kth_layer_holds_experts():
    m = _parse(_data(first_dense=1, every=1)).model
    assert [k.ffn for k in layer_kinds(m)] == ["dense", "moe"]
    data = _data(first_dense=3, every=2)
    data["model"]["layers"] = 7
    assert [k.ffn for k in layer_kinds(_parse(data).model)] == \
        ["dense"] * 3 + ["dense", "moe"] * 2


@pytest.mark.parametrize("override,message", [
    ("model.moe.first_dense=2", "model.moe.first_dense: 2 must be less than model.layers=2 "
                                "(the layers after it hold the experts)"),
    ("model.moe.ffn_hidden_size=15", "parallel.tensor: 2 must divide "
                                     "model.moe.ffn_hidden_size=15 (valid: 1, 3, 5, 15)"),
    ("model.moe.shared_ffn_hidden_size=8", "model.moe.shared_ffn_hidden_size: 8 needs "
                                           "model.moe.shared_experts >= 1 (there are no "
                                           "shared experts to size)"),
    ("model.moe.score=tanh", None),
])
def test_bad_modern_moe_settings_are_refused_by_name(override, message):
    with pytest.raises(InputError) as err:
        _parse(_data(), ["model.moe.every=1", override])
    if message is None:
        assert "model.moe.score" in str(err.value) and "sigmoid" in str(err.value)
    else:
        assert str(err.value).endswith(message)


# ---- ZeRO / distributed optimizer over the expert-data-parallel group ---------------------

def test_distributed_optimizer_shards_dense_weights_over_data_and_experts_over_edp():
    """ZeRO-1 (Megatron-Core's distributed optimizer, one per group): the dense weights'
    states over all `data` ranks, each expert's over the data/expert ranks that hold it, so
    a device keeps 12 bytes (fp32 master, Adam m and v) x (dense + all experts) / data
    whatever the expert degree, also at expert = data, where no rank but the ep ranks
    shares a weight (before, nothing was sharded there). GPT-style layer: q, k, v, o with
    biases and two norms; 8 experts of 2 h f, a router h E; the token and position tables
    and the final norm."""
    h, f, E, L, V, s = 512, 1024, 8, 4, 1024, 256
    dense = L * (4 * h * h + 4 * h + 4 * h + h * E) + V * h + s * h + 2 * h
    experts = L * E * 2 * h * f
    for expert in (1, 2, 4, 8):
        sc = _parse(_moe_data(), [f"parallel.expert={expert}", "parallel.optimizer_shard=1"])
        mem = dict(simulate(sc, load_profile("h100-sxm")).memory.by_category)
        assert mem["optimizer_states"] == pytest.approx(12 * (dense + experts) / 8, rel=1e-12)
    unsharded = _parse(_moe_data(), ["parallel.expert=8"])
    mem = dict(simulate(unsharded, load_profile("h100-sxm")).memory.by_category)
    assert mem["optimizer_states"] == pytest.approx(12 * (dense + experts / 8), rel=1e-12)


# ---- expert tensor parallelism --------------------------------------------------------------

def test_expert_tensor_parallel_1_splits_whole_experts_over_tensor_ranks():
    """parallel.expert_tensor=1 (Megatron-Core --expert-tensor-parallel-size 1) with tensor 2
    and expert 8 on data 4: the ep mesh axis is 8 / 2 = 4 ranks and the tensor-parallel
    ranks split the experts further (dim 0 on ep and on tp: one whole expert per device, as
    many expert parameters as expert 4 with each expert's FFN split in two); verify proves
    it, shared experts and sigmoid scores included."""
    s = _parse(_data(**_MODERN), ["parallel.expert=8", "parallel.expert_tensor=1"])
    case = build_case(s)
    assert case.mesh.axes == (("dp", 1), ("ep", 4), ("tp", 2))
    plan = build_plan(case.sharded, case.mesh)
    w1 = plan.layouts["l1.experts.w1"].placements
    assert w1[1] == Shard(0) and w1[2] == Shard(0)
    assert plan.layouts["l1.shared.w1"].placements[2] == Shard(1)  # as the dense FFN
    result = verify_case(case)
    assert result.ok, [c for c in result.checks if not c.ok]
    whole = sum(b.expert_params for b in transformer_program(s).blocks)
    split = sum(b.expert_params for b in transformer_program(_parse(_data(**_MODERN))).blocks)
    assert whole == split == 8 * (2 * 32 * 16) // 8  # 8 experts of 2 h f (gelu) over 8


@pytest.mark.parametrize("overrides,message", [
    (["parallel.expert_tensor=4", "parallel.tensor=4", "parallel.data=2",
      "parallel.expert=2", "parallel.expert_tensor=2"],
     "parallel.expert_tensor: 2 is not simulated (allowed: 1, whole experts on the "
     "tensor-parallel ranks, or parallel.tensor=4, each expert split as the dense FFN is)"),
    (["parallel.expert_tensor=1", "parallel.expert=3"],
     "parallel.expert: 3 with parallel.expert_tensor=1 must be a multiple of parallel.tensor=2 "
     "(the tensor-parallel ranks are part of the expert-parallel group)"),
    (["parallel.expert_tensor=1", "parallel.expert=16", "model.moe.experts=16"],
     "parallel.expert / parallel.tensor: 8 must divide parallel.data=4 (valid: 1, 2, 4)"),
])
def test_bad_expert_tensor_degrees_are_refused_by_name(overrides, message):
    with pytest.raises(InputError) as err:
        _parse(_data(), overrides)
    assert str(err.value).endswith(message)


def test_expert_gemms_run_as_grouped_gemms_at_their_own_rate():
    """The expert GEMMs of the program are grouped GEMMs; the profile's
    `efficiency.grouped_gemm_fraction` divides their rate and no other kernel's."""
    s = _parse(_moe_data(), ["parallel.expert=4"])
    layer = transformer_program(s).block("layer")
    grouped = {op.name for op in layer.fwd + layer.bwd if getattr(op, "grouped", False)}
    assert grouped == {f"expert_fc{i}{g}" for i in (1, 2) for g in ("", ".dgrad", ".wgrad")}
    others = {op.name for op in layer.fwd + layer.bwd
              if getattr(op, "kind", "") == "gemm" and not op.grouped}
    assert "router" in others and not any(n.startswith("expert_") for n in others)
    hw = load_profile("h100-sxm")
    slow = hw.model_copy(update={"efficiency": hw.efficiency.model_copy(
        update={"grouped_gemm_fraction": 0.5})})
    spec = next(op for op in layer.fwd if getattr(op, "grouped", False))
    dense = dataclasses.replace(spec, grouped=False)
    assert compute_efficiency(spec, slow)[0] == pytest.approx(
        0.5 * compute_efficiency(dense, slow)[0], rel=1e-12)
    assert compute_efficiency(dense, slow) == compute_efficiency(dense, hw)


# ---- group-limited routing ------------------------------------------------------------------

def test_group_limited_routing_follows_deepseek_v3():
    """8 experts in 4 groups, each token's top-2 among its best 2 groups, a group scored by
    the sum of its two best sigmoid scores (transformers' DeepseekV3TopkRouter): expert 0
    has the highest logit but its group (0, 1) scores 3.0 + -5.0 below groups (2, 3) and
    (4, 5), so it is not chosen."""
    logits = np.array([[[3.0, -5.0, 2.0, 1.9, 1.5, 1.4, 0.0, 0.0]]])
    plain = route_tokens(logits, 2, 8)
    assert plain[0, 0, :, 0].tolist() == [0, 2]
    limited = route_tokens(logits, 2, 8, "sigmoid", groups=4, top_groups=2)
    assert limited[0, 0, :, 0].tolist() == [2, 3]
    s = 1 / (1 + np.exp(-logits[0, 0]))
    best = [s[i] + s[i + 1] for i in (0, 2, 4, 6)]
    assert sorted(range(4), key=lambda g: -best[g])[:2] == [1, 2]


def test_group_limited_routing_verifies_and_is_refused_where_it_cannot_hold_top_k():
    s = _parse(_data(groups=4, group_top_k=2, **_MODERN))
    case = build_case(s)
    route = next(op for op in case.sharded.ops if op.type == "MoeRoute")
    assert (dict(route.attrs)["groups"], dict(route.attrs)["top_groups"]) == (4, 2)
    assert verify_case(case).ok
    with pytest.raises(InputError) as err:
        _parse(_data(groups=4, group_top_k=1, top_k=3))
    assert str(err.value).endswith(
        "model.moe.group_top_k: 1 must be at most model.moe.groups=4 and its groups must "
        "hold model.moe.top_k=3 experts (2 each)")


def test_expert_parallel_all_to_all_matches_deepep_inside_a_node_and_across_nodes():
    """DeepEP's published bottleneck bandwidths on H800 (deepseek-ai/DeepEP README, normal
    kernels: EP 8 153 / 158 GB/s over NVLink; EP 16, 32, 64: 43, 58, 51 GB/s over RDMA,
    counted as tokens x distinct nodes reached) within 5%: inside the node the all-to-all
    sends at the NVLink bus rate; across nodes DeepEP's once-a-node forwarding
    (`expert_dispatcher: deepep`, cost.deepep) is NIC-bound at EP 32-64 and NVLink-bound at
    EP 16. The pairwise exchange sends every copy through the NIC: half the rate or less."""
    assert bottleneck_GBps(8) == pytest.approx(155.5, rel=0.05)
    for ep, published in ((16, 43.0), (32, 58.0), (64, 51.0)):
        assert bottleneck_GBps(ep, once_a_node=True) == pytest.approx(published, rel=0.05)
        assert bottleneck_GBps(ep) < 0.6 * published
