"""Dense transformer fidelity (issue 22 item 1): head size, untied LM head, rotary / learned /
no positions, RMSNorm, q/k/v biases, q/k head norms, sliding-window and sink attention.
Each new operator equals a numpy reference written independently here (and the reference
catches a mutated mask or rotation); the whole model verifies on tiny meshes with every key
on, and fails when a window mask or a rotation reads local instead of global positions; the
parameter counts, FLOPs and ring traffic follow their closed forms; what cannot be
expressed is refused by key."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import yaml

from simulator.config.resources import resolve_yaml
from simulator.config.scenario import parse_scenario
from simulator.errors import InputError
from simulator.graph.builders import build_gpt
from simulator.graph.decoder import GptDims
from simulator.graph.ops import KernelCtx, attention, get_family, ring_attention, rotary
from simulator.models.params import transformer_params
from simulator.program.model_program import transformer_program
from simulator.simulation.verify import verify_scenario

DENSE = ["model.ffn_activation=swiglu", "model.qkv_bias=true", "model.qk_norm=true",
         "model.head_dim=6", "model.sliding_window=3", "model.attention_sinks=true",
         "model.attention=flash", "model.rope_theta=500000.0"]


def _bundled(name: str, overrides=()):
    path = resolve_yaml(name, "scenarios")
    return parse_scenario(yaml.safe_load(path.read_text()), str(path), list(overrides))


# ---- operators against independent references ---------------------------------------------

def _attention_reference(q, k, v, window, sinks):
    """Loop over queries: softmax over the keys in (s - window, s] and a sink column."""
    b, s, g, r, d = q.shape
    out = np.zeros_like(q)
    for bi, si, gi, ri in np.ndindex(b, s, g, r):
        keys = [t for t in range(s) if t <= si and (not window or si - t < window)]
        z = np.array([q[bi, si, gi, ri] @ k[bi, t, gi] / math.sqrt(d) for t in keys])
        e = np.exp(z - z.max())
        den = e.sum() + (np.exp(sinks[gi, ri] - z.max()) if sinks is not None else 0.0)
        out[bi, si, gi, ri] = sum(w * v[bi, t, gi] for w, t in zip(e / den, keys))
    return out


def _attention_inputs(seed=0):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((2, 7, 2, 2, 4))
    k, v = rng.standard_normal((2, 2, 7, 2, 4))
    return q, k, v, rng.standard_normal((2, 2))


@pytest.mark.parametrize(("window", "sink"), [(0, False), (3, False), (3, True), (1, True)])
def test_window_and_sink_attention_equal_the_loop_reference(window, sink):
    q, k, v, sinks = _attention_inputs()
    fam = get_family("FusedAttention")
    xs = [q, k, v] + ([sinks] if sink else [])
    ctx = KernelCtx.whole([x.shape for x in xs], q.shape)
    got = fam.forward(xs, {"window": window, "p": 0.0}, ctx)
    want = _attention_reference(q, k, v, window, sinks if sink else None)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_the_reference_catches_a_window_off_by_one(monkeypatch):
    """The mutation: the window mask lets in one key too many."""
    q, k, v, sinks = _attention_inputs()
    real = attention.masked
    monkeypatch.setattr(attention, "masked", lambda rows, cols, attrs: real(
        rows, cols, {**attrs, "window": int(attrs.get("window", 0)) + 1}))
    ctx = KernelCtx.whole([q.shape, k.shape, v.shape], q.shape)
    got = get_family("FusedAttention").forward([q, k, v], {"window": 3, "p": 0.0}, ctx)
    assert not np.allclose(got, _attention_reference(q, k, v, 3, None))


def _rope_reference(x, offset, base):
    """RoFormer Eq. 34 in complex form: (x_i + j x_{i+d/2}) e^{j pos theta_i}."""
    d = x.shape[-1]
    theta = base ** (-np.arange(0, d, 2) / d)
    pos = np.arange(offset, offset + x.shape[1]).reshape((1, -1) + (1,) * (x.ndim - 3) + (1,))
    z = (x[..., : d // 2] + 1j * x[..., d // 2:]) * np.exp(1j * pos * theta)
    return np.concatenate([z.real, z.imag], axis=-1)


def test_rotary_equals_the_complex_rotation_at_global_positions():
    x = np.random.default_rng(3).standard_normal((2, 5, 3, 2, 8))
    ctx = KernelCtx(((2, 9, 3, 2, 8),), (2, 9, 3, 2, 8), ((0, 4, 0, 0, 0),), (0, 4, 0, 0, 0),
                    x.shape)
    got = get_family("Rotary").forward([x], {"base": 500000.0}, ctx)
    np.testing.assert_allclose(got, _rope_reference(x, 4, 500000.0), atol=1e-12)
    # a rotation: its VJP is the inverse rotation, lengths are kept
    back = get_family("Rotary").vjp([x], got, got, {"base": 500000.0}, ctx)[0]
    np.testing.assert_allclose(back, x, atol=1e-12)


def test_rmsnorm_equals_its_definition():
    rng = np.random.default_rng(4)
    x, g = rng.standard_normal((3, 4, 8)), rng.standard_normal(8)
    ctx = KernelCtx.whole([x.shape, g.shape], x.shape)
    got = get_family("RMSNorm").forward([x, g], {"eps": 1e-6}, ctx)
    np.testing.assert_allclose(got, x / np.sqrt((x ** 2).mean(-1, keepdims=True) + 1e-6) * g)


# ---- the whole model verifies, and fails under mutations ----------------------------------

@pytest.mark.parametrize("base", ["verify-tiny-dp2-tp4-sp", "verify-tiny-tp8"])
def test_every_dense_key_verifies(base):
    result = verify_scenario(_bundled(base, DENSE))
    assert result.ok, [c for c in result.checks if not c.ok]
    names = {c.tensor for c in result.checks}
    assert {"l0.sinks.grad", "l0.q_head_norm.g.grad", "l0.q.bias.grad", "w_head.grad"} <= names


def test_windowed_ring_attention_verifies_and_a_local_window_mask_fails(monkeypatch):
    """Context parallel 2, window 3 over 16 tokens: the ring's blocks mask by global
    positions. The mutation: each block masked as if its keys started where its queries
    do (local positions), so the off-diagonal blocks let in far keys."""
    s = _bundled("cp-tiny-verify", ["model.sliding_window=3", "model.qk_norm=true"])
    assert verify_scenario(s).ok
    real = ring_attention.masked
    monkeypatch.setattr(ring_attention, "masked", lambda rows, cols, attrs: real(
        rows - rows.min(), cols - cols.min(), attrs))
    assert not verify_scenario(s).ok


def test_rotary_at_local_positions_fails_under_context_parallel(monkeypatch):
    s = _bundled("cp-tiny-verify")
    real = rotary.rotate
    monkeypatch.setattr(rotary, "rotate", lambda x, first, base, inverse=False: real(
        x, 0, base, inverse))
    assert not verify_scenario(s).ok


def test_a_pattern_of_windows_verifies_and_runs_one_block_per_kind():
    """Gemma-3's 5 local : 1 global, here 1 : 1 (global_every 2) on 2 layers: each layer
    its own window; the program has a block per kind; a wrong window on one kind fails."""
    s = _bundled("verify-tiny-dp2-tp4-sp", ["model.ffn_activation=swiglu",
                                            "model.attention=flash",
                                            "model.sliding_window=3", "model.global_every=2"])
    result = verify_scenario(s)
    assert result.ok, [c for c in result.checks if not c.ok]
    prog = transformer_program(s)
    windows = {op.name.split(".")[0]: op.attrs.get("window", 0)
               for op in build_gpt(__import__("simulator.models.transformer_plan",
                                              fromlist=["gpt_dims"]).gpt_dims(s, True)).ops
               if op.type == "FusedAttention"}
    assert windows == {"l0": 3, "l1": 0}
    assert len([b for b in prog.blocks if b.name.startswith("layer")]) == 2


# ---- closed forms: parameters, FLOPs, ring traffic -----------------------------------------

def _llama3_8b(extra=()):
    return _bundled("cp-llama3-8b-128k-16-h100", list(extra)).model


def test_llama3_8b_has_8_03b_parameters():
    """Llama 3 8B (Meta, model card: 8.03B): 32 layers of h=4096, GQA 8 of 32 heads, SwiGLU
    14336, vocab 128256, untied head, RMSNorm, no position table:
    2Vh + L(2h^2 + 2h*kv + 3hf + 2h) + h."""
    m = _llama3_8b()
    h, f, v, layers, kv = 4096, 14336, 128256, 32, 1024
    want = 2 * v * h + layers * (2 * h * h + 2 * h * kv + 3 * h * f + 2 * h) + h
    assert transformer_params(m).total == want
    assert want == pytest.approx(8.03e9, rel=5e-3)
    tied = transformer_params(m.model_copy(update={"tie_embeddings": True})).total
    assert want - tied == v * h


def test_head_dim_sets_the_query_key_value_widths():
    """Qwen3-style: 8 heads of 128 on hidden 512 (heads x head_dim != hidden)."""
    m = _llama3_8b(["model.layers=2", "model.hidden_size=512", "model.num_heads=8",
                    "model.num_kv_heads=2", "model.head_dim=128", "model.qk_norm=true",
                    "model.ffn_hidden_size=1024", "model.vocab_size=1024"])
    h, q, kv = 512, 8 * 128, 2 * 128
    layer = 2 * h * q + 2 * h * kv + 3 * h * 1024 + 2 * h + 2 * 128
    assert transformer_params(m).layer == layer


def test_positions_and_norm_follow_the_keys():
    m = _llama3_8b(["model.position=learned", "model.norm=layernorm", "model.qkv_bias=true"])
    h, kv = 4096, 1024
    base = transformer_params(_llama3_8b())
    got = transformer_params(m)
    assert got.embedding - base.embedding == m.seq_length * h  # the learned table
    assert got.layer - base.layer == 2 * h + (h + 2 * kv)  # two norm shifts, q/k/v biases


def _flash_flops(window):
    d = GptDims(layers=1, hidden=64, heads=4, kv_heads=4, ffn=128, seq=64, vocab=64,
                batch=1, flash=True, window=window, dropout=0.0, position="rope")
    g = build_gpt(d)
    op = next(o for o in g.ops if o.type == "FusedAttention")
    return op.family.flops(g.shapes(op), g.tensors[op.output].shape, op.attrs)


def test_windowed_attention_flops_follow_the_window():
    """4 b heads s min(W, s) d: the window's square in place of the sequence's."""
    assert _flash_flops(0) == 4 * 64 * 64 * 16 * 4
    assert _flash_flops(16) == 4 * 64 * 16 * 16 * 4
    assert attention.executed(64, {"window": 16}) == pytest.approx(1 - 15 / 128)
    assert attention.executed(64, {}) == 0.5


@pytest.mark.parametrize(("window", "steps"), [(0, 7), (1, 0), (8192, 1), (16384, 1),
                                               (16385, 1), (16386, 2), (40000, 3)])
def test_a_windowed_ring_passes_only_the_blocks_in_the_window(window, steps):
    """128K tokens over 8 ranks: blocks of 16384; a window reaching m blocks passes m - 1."""
    s = _bundled("cp-llama3-8b-128k-16-h100",
                 [f"model.sliding_window={window}"] if window else [])
    prog = transformer_program(s)
    layer = prog.block("layer")
    ring = [c for c in layer.fwd if getattr(c, "axis", None) == "cp"]
    assert len(ring) == (2 if steps else 0)
    if steps:
        block = 1 * 16384 * 8 // 2 * 128 * 2  # b * s/cp * kv_heads/tp * d * bytes
        assert ring[0].bytes == pytest.approx((steps + 1) * block)
    assert ring_attention.ring_kv_bytes((1, 16384, 4, 4, 128), 8, 2, "fwd", window) == \
        pytest.approx(2 * steps * 16384 * 4 * 128 * 2)


def test_the_untied_head_adds_its_matrix_gradient_and_optimizer_share(invoke_cli):
    import json
    res = [json.loads(invoke_cli("run", "llama2-7b-8-ascend910b", "--json", "--set",
                                 f"model.tie_embeddings={t}").stdout) for t in ("true", "false")]
    tied, untied = (r["memory"]["by_category_bytes"] for r in res)
    assert untied["parameters"] > tied["parameters"]
    assert untied["optimizer_states"] > tied["optimizer_states"]


# ---- refusals ---------------------------------------------------------------------------

@pytest.mark.parametrize(("sets", "key", "words"), [
    (["model.global_every=2"], "model.global_every", "needs model.sliding_window"),
    (["model.sliding_window=4", "model.attention=standard"], "model.attention",
     "no window"),
    (["model.attention_sinks=true", "parallel.context=2", "parallel.data=4"],
     "model.attention_sinks", "context parallel"),
    (["model.head_dim=7"], "model.head_dim", "must be even"),
    (["model.position=alibi"], "model.position", "rope"),
])
def test_what_cannot_be_expressed_is_refused_by_key(sets, key, words):
    with pytest.raises(InputError) as err:
        _bundled("verify-tiny-dp8", ["model.ffn_activation=swiglu", *sets])
    assert key in str(err.value) and words in str(err.value)


def test_dense_dims_reach_the_graph():
    s = _bundled("verify-tiny-dp8", ["model.ffn_activation=swiglu"])
    from simulator.models.transformer_plan import gpt_dims
    d = gpt_dims(s, True)
    assert (d.tied, d.position, d.rms) == (False, "rope", True)
    g = build_gpt(dataclasses.replace(d, layers=1))
    assert "wpe" not in g.tensors and "w_head" in g.tensors
    assert {o.type for o in g.ops} >= {"Rotary", "RMSNorm"}


# ---- --set reaches every key ----------------------------------------------------------------

SETS = {"head_dim": ("8", 8), "tie_embeddings": ("false", False), "position": ("none", "none"),
        "rope_theta": ("500000.0", 500000.0), "norm": ("layernorm", "layernorm"),
        "qkv_bias": ("true", True), "qk_norm": ("true", True),
        "sliding_window": ("4", 4), "global_every": ("0", 0),
        "attention_sinks": ("true", True)}


def test_set_reaches_every_dense_key():
    from simulator.config.scenario.schema_models import TransformerModel

    assert set(SETS) <= set(TransformerModel.model_fields)
    for key, (text, value) in SETS.items():
        m = _bundled("verify-tiny-dp8", ["model.ffn_activation=swiglu", "model.attention=flash",
                                         f"model.{key}={text}"]).model
        assert getattr(m, key) == value, key


@pytest.mark.parametrize(("text", "words"), [
    ("model.position=alibi", "model.position"), ("model.norm=batchnorm", "model.norm"),
    ("model.head_dim=0", "model.head_dim"), ("model.sliding_window=-1", "model.sliding_window"),
    ("model.rope_theta=0", "model.rope_theta")])
def test_a_value_the_format_cannot_express_is_refused_with_its_key(text, words):
    with pytest.raises(InputError) as err:
        _bundled("verify-tiny-dp8", [text])
    assert words in str(err.value)
