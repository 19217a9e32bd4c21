"""Hybrid state-space layers (Mamba-2, Nemotron-H): the SSD scan equals its recurrence step by
step, a tiny hybrid model verifies against one device under data and tensor (+ sequence)
parallelism and fails when the sharded scan forgets its decay or skips the out-projection's
all-reduce, the pattern maps to layer kinds, the FLOPs follow the chunked SSD algorithm and
Megatron-LM's projections, and every new key is reachable with --set or refused by name."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from simulator.config.scenario import parse_scenario
from simulator.errors import InputError
from simulator.graph.builders import build_gpt
from simulator.graph.decoder import GptDims, LayerKind
from simulator.graph.graph import Graph
from simulator.graph.ops import base as ops_base
from simulator.graph.ops import get_family
from simulator.graph.ops.ssm import ssd_flops, ssd_reference
from simulator.models.layers import layer_kinds
from simulator.models.transformer import gpt_case
from simulator.models.transformer_plan import gpt_dims, planned_transformer
from simulator.numeric.execution import Faults
from simulator.numeric.verify import verify_case
from simulator.sharding.plan import build_plan

_MAMBA = {"state_size": 4, "head_dim": 4, "groups": 2, "conv_kernel": 3, "chunk_size": 4}


def _data(**parallel) -> dict:
    """A 3-layer hybrid ('M*-': Mamba-2, attention, MLP) on 4 devices, data 2 x tensor 2."""
    return {"name": "hybrid", "hardware": "h100-sxm",
            "cluster": {"nodes": 1, "devices_per_node": 4},
            "model": {"type": "transformer", "layers": 3, "hidden_size": 16, "num_heads": 4,
                      "num_kv_heads": 2, "ffn_hidden_size": 32, "seq_length": 8,
                      "vocab_size": 16, "ffn_activation": "swiglu", "dropout": 0.0,
                      "hybrid_pattern": "M*-", "mamba": dict(_MAMBA)},
            "training": {"global_batch_size": 4, "micro_batch_size": 1},
            "parallel": {"data": 2, "tensor": 2, **parallel}}


def _case(**parallel):
    s = parse_scenario(_data(**parallel), "hybrid.yaml", [])
    dims = dataclasses.replace(gpt_dims(s, False), batch=1, kinds=layer_kinds(s.model))
    return gpt_case(s, dims, [])


def _scan_inputs(rng, b=2, s=7, g=2, r=3, p=2, n=4):
    shapes = [(b, s, g, r, p), (b, s, g, r), (g, r), (b, s, g, n), (b, s, g, n), (g, r), (g, r)]
    return [rng.standard_normal(sh) for sh in shapes]


# ---- the operators ----------------------------------------------------------------------


@pytest.mark.parametrize("dims", [(2, 7, 2, 3, 2, 4), (1, 12, 1, 1, 3, 2), (3, 5, 4, 2, 1, 1)])
def test_the_scan_equals_the_recurrence_step_by_step(dims):
    xs = _scan_inputs(np.random.default_rng(3), *dims)
    y = get_family("SsdScan").forward(xs, {}, None)
    np.testing.assert_allclose(y, ssd_reference(xs), rtol=1e-12, atol=1e-12)


def test_the_recurrence_is_not_matched_by_a_scan_without_decay():
    """The ground truth tells a scan whose state never decays from the real one."""
    xs = _scan_inputs(np.random.default_rng(4))
    y = get_family("SsdScan").forward(xs, {}, None)
    xs[2] = np.full_like(xs[2], -50.0)  # A = -exp(-50): no decay
    assert np.abs(y - ssd_reference(xs)).max() > 1e-2


def test_the_causal_convolution_sees_no_later_token():
    rng = np.random.default_rng(5)
    x, w, b = rng.standard_normal((1, 6, 2)), rng.standard_normal((2, 3)), np.zeros(2)
    fam = get_family("CausalConv1d")
    y = fam.forward([x, w, b], {}, None)
    later = x.copy()
    later[:, 4:] += 1.0
    np.testing.assert_array_equal(fam.forward([later, w, b], {}, None)[:, :4], y[:, :4])
    # token 3 of channel 0: its own and the two before it
    assert y[0, 3, 0] == pytest.approx(w[0] @ x[0, 1:4, 0])


def test_ssd_flops_follow_the_chunked_algorithm():
    """Dao & Gu 2024 Sec. 6 with chunk Q: per group s*Q*n (C B^T), per head s*Q*p + 2*s*n*p
    + (s/Q)*n*p multiply-adds; a chunk longer than the sequence is the sequence."""
    b, s, g, h, p, n, q = 2, 1024, 8, 128, 64, 128, 128
    macs = g * s * q * n + h * (s * q * p + 2 * s * n * p + (s // q) * n * p)
    assert ssd_flops(b, s, g, h, p, n, q) == 2 * b * macs
    assert ssd_flops(1, 16, 1, 1, 2, 3, 128) == ssd_flops(1, 16, 1, 1, 2, 3, 16)


# ---- the block, its plan and its proof ----------------------------------------------------


def test_the_pattern_maps_to_layer_kinds():
    s = parse_scenario(_data(), "hybrid.yaml", [])
    assert layer_kinds(s.model) == (LayerKind("mamba", 0, "none"),
                                    LayerKind("attention", 0, "none"),
                                    LayerKind("none", 0, "dense"))
    names = [op.name for op in build_gpt(dataclasses.replace(
        gpt_dims(s, False), kinds=layer_kinds(s.model))).ops]
    assert "l0.scan" in names and "l0.q_mm" not in names and "l0.fc1" not in names
    assert "l1.q_mm" in names and "l1.fc1_mm" not in names
    assert "l2.fc1_mm" in names and "l2.ln1" not in names


def test_a_mamba_layer_has_megatrons_parameters_and_projection_flops():
    """Parameters: in_proj h*(2*d_in + 2*G*N + H), conv (d_in + 2*G*N)*(k + 1), A_log, D,
    dt_bias 3H, the gated norm d_in, out_proj d_in*h, the pre-norm 2h (LayerNorm: weight
    and bias). GEMM FLOPs: Megatron-LM's mamba_layer_flops (megatron/training/training.py)
    in_proj 2*b*s*h*(2*d_in + 2*G*N + H) and out_proj 2*b*s*d_in*h."""
    h, heads, p, g, n, k, b, s = 64, 8, 16, 2, 8, 4, 2, 32
    d = GptDims(layers=1, hidden=h, heads=4, kv_heads=4, ffn=128, seq=s, vocab=32, batch=b,
                kinds=(LayerKind("mamba", 0, "none"),), mamba_heads=heads, mamba_head_dim=p,
                mamba_groups=g, mamba_state=n, mamba_conv=k, mamba_chunk=16)
    graph = build_gpt(d)
    layer = {name: t for name, t in graph.tensors.items()
             if t.kind == "parameter" and name.startswith("l0.")}
    d_in = heads * p
    want = h * (2 * d_in + 2 * g * n + heads) + (d_in + 2 * g * n) * (k + 1) + 3 * heads \
        + d_in + d_in * h + 2 * h
    assert sum(int(np.prod(t.shape)) for t in layer.values()) == want
    gemm = sum(op.family.flops(graph.shapes(op), graph.tensors[op.output].shape, op.attrs)
               for op in graph.ops if op.name.startswith("l0.") and op.type == "Einsum")
    assert gemm == 2 * b * s * h * (2 * d_in + 2 * g * n + heads) + 2 * b * s * d_in * h
    scan = next(op for op in graph.ops if op.name == "l0.scan")
    assert scan.family.flops(graph.shapes(scan), (), scan.attrs) == ssd_flops(
        b, s, g, heads, p, n, 16)


def test_tensor_parallel_splits_the_heads_by_their_groups():
    """On tp=2 each rank holds half of every Mamba weight's groups; the layer's forward
    collectives on tp are the row-parallel out-projection's all-reduce alone."""
    case = _case()
    plan = build_plan(case.sharded, case.mesh, 8)
    for name in ("l0.ssm.wx", "l0.ssm.wb", "l0.ssm.wdt", "l0.ssm.A_log", "l0.conv_x.w",
                 "l0.ssm_norm.w", "l0.ssm.wo"):
        t = case.sharded.tensors[name]
        axis = 1 if name.startswith("l0.ssm.w") and name != "l0.ssm.wo" else 0
        local = plan.layouts[name].local_shape(t.shape, plan.mesh)
        assert local[axis] == t.shape[axis] // 2, name
    steps = [(op, st.kind) for op, st in plan.forward_steps()
             if op.startswith("l0.") and st.is_comm]
    assert steps == [("l0.res1", "all_reduce")]


@pytest.mark.parametrize("parallel", [{}, {"sequence_parallel": True}])
def test_a_tiny_hybrid_verifies_against_one_device(parallel):
    result = verify_case(_case(**parallel))
    assert result.ok, [c for c in result.checks if not c.ok]
    checked = {c.tensor for c in result.checks}
    assert {"l0.scan", "l0.ssm.A_log.grad", "l0.conv_b.w.grad", "l0.ssm.wo.updated",
            "l1.proj", "l2.fc2"} <= checked


def _forgetful_scan(monkeypatch):
    """SsdScan whose state never decays (h_t = h_{t-1} + dt_t x_t B_t^T: a scan with a
    wrong state), registered for this test only."""
    base = get_family("SsdScan")

    def forward(xs, attrs, ctx):
        return base.forward([xs[0], xs[1], np.full_like(xs[2], -60.0), *xs[3:]], attrs, ctx)

    monkeypatch.setitem(ops_base._REGISTRY, "ssdscanforgetful",
                        dataclasses.replace(base, name="SsdScanForgetful", forward=forward))


def test_verify_fails_when_the_scan_keeps_a_wrong_state(monkeypatch):
    case = _case()
    _forgetful_scan(monkeypatch)
    ops = tuple(dataclasses.replace(op, type="SsdScanForgetful") if op.type == "SsdScan"
                else op for op in case.sharded.ops)
    result = verify_case(dataclasses.replace(case, sharded=Graph(case.sharded.tensors, ops)))
    assert not result.ok
    by = {c.tensor: c.ok for c in result.checks}
    assert by["l0.conv_x_act"] and not by["l0.scan"]


def test_verify_fails_without_the_out_projections_all_reduce():
    case = _case()
    plan = build_plan(case.sharded, case.mesh, 8)
    comms = [(op, st) for op, st in plan.forward_steps() if st.is_comm]
    first = next(i for i, (op, _) in enumerate(comms) if op == "l0.res1")
    result = verify_case(case, faults=Faults(drop_comm=first))
    assert not next(c for c in result.checks if c.tensor == "l0.res1").ok


def test_the_planned_graph_keeps_the_mamba_ops_on_a_tp_mesh():
    s = parse_scenario(_data(), "hybrid.yaml", [])
    dims = dataclasses.replace(gpt_dims(s, False), kinds=layer_kinds(s.model))
    graph, mesh = planned_transformer(dims, 2, 2, False)
    scan = next(op for op in graph.ops if op.name == "l0.scan")
    assert dict(scan.strategy.axes) == {"dp": "b", "tp": "g"}
    assert mesh.names == ("dp", "tp")


# ---- the scenario keys ------------------------------------------------------------------

_SETS = {
    "model.mamba.state_size=8": ("mamba_state", 8),
    "model.mamba.head_dim=2": ("mamba_head_dim", 2),
    "model.mamba.num_heads=4": ("mamba_heads", 4),
    "model.mamba.groups=4": ("mamba_groups", 4),
    "model.mamba.conv_kernel=2": ("mamba_conv", 2),
    "model.mamba.chunk_size=2": ("mamba_chunk", 2),
    "model.mamba.expand=1": ("mamba_heads", 4),
}


@pytest.mark.parametrize("item", sorted(_SETS))
def test_set_reaches_every_mamba_key(item):
    s = parse_scenario(_data(), "hybrid.yaml", [item])
    field, value = _SETS[item]
    assert s.model.graph_dims()[field] == value


def test_set_reaches_the_pattern():
    s = parse_scenario(_data(), "hybrid.yaml", ["model.hybrid_pattern=MM-"])
    assert [k.mixer for k in layer_kinds(s.model)] == ["mamba", "mamba", "none"]


@pytest.mark.parametrize("item, key, words", [
    ("model.hybrid_pattern=M*E", "model.hybrid_pattern", "'E', a mixture-of-experts layer"),
    ("model.hybrid_pattern=M*", "model.hybrid_pattern", "has 2 characters, one per layer"),
    ("model.mamba.groups=3", "model.mamba.groups", "must divide the 8 SSM heads"),
    ("model.mamba.head_dim=5", "model.mamba.head_dim", "must divide expand x hidden_size"),
    ("model.mamba.expand=3", "model.mamba.expand", "give one of them"),
    ("model.mamba.groups=1", "parallel.tensor", "as Megatron-Core's MambaMixer does"),
    ("model.hybrid_pattern=**-", "model.mamba", "has no 'M' (Mamba-2) layer"),
    ("model.mamba.conv_kernel=0", "model.mamba.conv_kernel", "expected a value from 1"),
    ("model.moe={experts: 4, top_k: 2}", "model.moe", "not simulated"),
])
def test_bad_values_are_refused_with_key_and_reason(item, key, words):
    sets = [item, "model.mamba.num_heads=8"] if "expand" in item else [item]
    with pytest.raises(InputError) as err:
        parse_scenario(_data(), "hybrid.yaml", sets)
    assert f"{key}: " in str(err.value) and words in str(err.value)


def test_context_and_nd_tensor_parallel_are_refused_on_mamba_layers():
    with pytest.raises(InputError, match="parallel.context: 2 is not simulated on Mamba-2 "
                                         "layers: context parallel here is ring attention"):
        parse_scenario(_data(), "hybrid.yaml", ["parallel.context=2", "parallel.tensor=1"])
    with pytest.raises(InputError, match="parallel.tensor_nd: 2-D / 3-D tensor parallel"):
        parse_scenario(_data(), "hybrid.yaml", ["parallel.tensor_nd=[2, 1]"])


# ---- Nemotron-H from its Hugging Face config ---------------------------------------------


def test_nemotron_h_47b_counts_its_published_parameters_within_half_a_percent():
    """nvidia/Nemotron-H-47B-Base-8K: "This model has 47B model parameters" (model card);
    the count of transformers' NemotronH layers (scenarios/models/SOURCES.md)."""
    from simulator.config.scenario.hf import load_hf

    count = load_hf("nemotron-h-47b").param_count()
    assert count == 46_791_554_816
    assert abs(count - 47e9) / 47e9 < 0.005


def test_nemotron_h_from_hf_is_the_hybrid_it_describes():
    s = parse_scenario({**_data(), "model": {"from_hf": "nemotron-h-56b", "seq_length": 64}},
                       "hybrid.yaml", ["parallel.tensor=8", "parallel.data=1",
                                       "cluster.devices_per_node=8"])
    m = s.model
    kinds = layer_kinds(m)
    assert len(kinds) == 118 and sum(k.mixer == "mamba" for k in kinds) == 54
    assert sum(k.mixer == "attention" for k in kinds) == 10
    assert sum(k.ffn == "dense" for k in kinds) == 54
    assert m.graph_dims() == {"mamba_heads": 256, "mamba_head_dim": 64, "mamba_groups": 8,
                              "mamba_state": 256, "mamba_conv": 4, "mamba_chunk": 128}


def test_a_nemotron_h_config_with_experts_is_refused_by_name(tmp_path):
    import json

    from simulator.config.resources import bundled_dir
    from simulator.config.scenario.hf import load_hf

    cfg = json.loads((bundled_dir("scenarios") / "models" / "nemotron-h-56b.json").read_text())
    cfg["hybrid_override_pattern"] = "ME" * 59
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(InputError, match="E \\(mixture of experts\\) is not simulated"):
        load_hf(str(path))


def test_the_ssd_count_and_megatrons_scan_term_differ_by_under_one_percent_of_a_layer():
    """Nemotron-H-8B's Mamba layer at 8192 tokens: Megatron-LM's mamba_layer_flops counts
    the scan as 7*s*d_in*N; the chunked SSD count differs by under 1% of the layer."""
    h, heads, p, g, n, s = 4096, 128, 64, 8, 128, 8192
    d_in = heads * p
    gemms = 2 * s * h * (2 * d_in + 2 * g * n + heads) + 2 * s * d_in * h
    ours, megatron = ssd_flops(1, s, g, heads, p, n, 128), 7 * s * d_in * n
    assert abs(ours - megatron) < 0.01 * (gemms + megatron)


def _megatron_hybrid_fwd(b, s, h, layers, heads, groups_kv, kv_channels, ffn, vocab,
                         state, head_dim, groups, mamba_heads, causal_half=True, scan=None):
    """Megatron-LM's hybrid_flops forward term (megatron/training/training.py,
    num_floating_point_operations: attn_layer_flops, mlp_layer_flops, mamba_layer_flops and
    the logits), before its x3 for the backward."""
    attn, mlp, mamba = (layers.count(c) for c in "*-M")
    p = kv_channels * heads / h
    core = s / 2 if causal_half else s
    attn_f = 4 * b * s * h * p * (h + h * groups_kv / heads + core)
    mlp_f = 4 * (ffn / h) * b * s * h ** 2
    d_in = mamba_heads * head_dim
    scan_f = 7 * b * s * d_in * state if scan is None else scan
    mamba_f = (2 * b * s * h * (2 * d_in + 2 * groups * state + mamba_heads) + scan_f
               + 2 * b * s * d_in * h)
    return attn * attn_f + mlp * mlp_f + mamba * mamba_f + 2 * b * s * h * vocab


def test_nemotron_h_8b_flops_per_token_follow_megatrons_hybrid_formula():
    """The graph's matrix FLOPs (GEMMs, fused attention, the scan) of Nemotron-H-8B at 8192
    tokens equal Megatron-LM's hybrid_flops with its two stated simplifications replaced by
    what the simulator counts (the attention core in full, as Megatron-LM's transformer
    formula and this simulator's MFU count it, not halved; the scan by the chunked SSD
    count), and are within 2% of the formula as published."""
    pattern = "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-"
    kinds = tuple({"M": LayerKind("mamba", 0, "none"), "*": LayerKind("attention", 0, "none"),
                   "-": LayerKind("none", 0, "dense")}[c] for c in pattern)
    s = 8192
    d = GptDims(layers=52, hidden=4096, heads=32, kv_heads=8, ffn=21504, seq=s,
                vocab=131072, batch=1, flash=True, bias=False, dropout=0.0, kinds=kinds,
                mamba_heads=128, mamba_head_dim=64, mamba_groups=8, mamba_state=128,
                mamba_conv=4, mamba_chunk=128)
    graph = build_gpt(d)
    ours = sum(op.family.flops(graph.shapes(op), graph.tensors[op.output].shape, op.attrs)
               for op in graph.ops if op.family.kind in ("gemm", "attention"))
    args = (1, s, 4096, pattern, 32, 8, 128, 21504, 131072, 128, 64, 8, 128)
    exact = _megatron_hybrid_fwd(*args, causal_half=False,
                                 scan=ssd_flops(1, s, 8, 128, 64, 128, 128))
    assert ours == pytest.approx(exact, rel=1e-12)
    published = _megatron_hybrid_fwd(*args)
    assert abs(ours - published) / published < 0.02
    # per token, forward and backward: about 6 x 8.1e9 parameters' worth plus attention
    assert 3 * ours / s == pytest.approx(6 * 8.1e9, rel=0.1)


# ---- the bundled scenarios ----------------------------------------------------------------


def _bundled(name: str):
    import yaml

    from simulator.config.resources import resolve_yaml

    path = resolve_yaml(name, "scenarios")
    return parse_scenario(yaml.safe_load(path.read_text()), str(path), [])


def test_the_bundled_tiny_hybrid_verifies_its_mamba_layers():
    from simulator.simulation.verify import verify_scenario

    result = verify_scenario(_bundled("hybrid-tiny-verify"))
    assert result.ok, [c for c in result.checks if not c.ok]
    checked = {c.tensor for c in result.checks}
    assert {"l0.scan", "l3.scan", "l1.proj", "l2.fc2", "l3.ssm.A_log.grad"} <= checked


def test_nemotron_h_56b_on_32_h100_fits_and_verifies_on_its_pipeline():
    """Tensor 8, pipeline 2, data 2: verify shrinks it to one Mamba, MLP, attention and
    Mamba layer (two on each stage's own 16 devices) and proves it; run fits 80 GB and
    counts its 56.3B parameters' FLOPs (6 per parameter per token, plus attention)."""
    from simulator.config.hardware import load_profile
    from simulator.simulation.simulate import simulate
    from simulator.simulation.verify import verify_scenario

    s = _bundled("nemotron-h-56b-32-h100")
    result = verify_scenario(s)
    assert result.ok, [c for c in result.checks if not c.ok]
    assert {"l0.scan", "l3.scan"} <= {c.tensor for c in result.checks}
    assert any("pipeline=2" in n for n in result.notes)
    run = simulate(s, load_profile(s.hardware))
    assert run.memory.peak_bytes <= run.capacity_bytes
    tokens = 768 * 8192
    assert run.model_flops / tokens == pytest.approx(6 * 56.32e9, rel=0.05)


def test_a_vision_transformer_refuses_a_hybrid_pattern():
    s = _bundled("vit-base-16-8-a100")
    with pytest.raises(InputError, match="model.hybrid_pattern: hybrid layers are simulated "
                                         "in a GPT-style decoder"):
        parse_scenario(s.model_dump(mode="json", exclude_none=True) | {"name": "v"},
                       "v.yaml", ["model.hybrid_pattern=M-M-M-M-M-M-"])
