"""The `vit` model family (issue 21 step 3): a vision transformer (Dosovitskiy et al. 2021)
that rides on the transformer's plans and program. Its token ops equal one device on every
split; the bundled ViT-B/16 scenario has ViT-B/16's 86M parameters and its patch embedding
the FLOPs of Eq. 1's projection; `run`, `verify` (which fails under a mutation), `plan` and
`sweep` accept it; and its own rules refuse what is not simulated."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import yaml

from simulator.config.hardware import load_profile
from simulator.config.resources import resolve_yaml
from simulator.config.scenario import parse_scenario
from simulator.errors import InputError
from simulator.graph.graph import Graph, GraphBuilder
from simulator.graph.ops import KernelCtx, get_family
from simulator.models.params import transformer_params
from simulator.models.registry import FAMILIES, family
from simulator.numeric.execution import Faults
from simulator.numeric.rulecheck import check_signature
from simulator.program.model_program import transformer_program
from simulator.sharding.mesh import Mesh
from simulator.sharding.rules import signatures
from simulator.simulation.simulate import simulate
from simulator.simulation.verify import verify_scenario

NAME = "vit-base-16-8-a100"
VIT_B16_PARAMS = 86_567_656  # timm vit_base_patch16_224 (the paper's Table 1: 86M)


def _vit(overrides=()):
    path = resolve_yaml(NAME, "scenarios")
    return parse_scenario(yaml.safe_load(path.read_text()), str(path), list(overrides))


def _small(overrides=()):
    """A ViT small enough to verify at its own size: 8x8 images of 4x4 patches."""
    return _vit(["model.layers=2", "model.hidden_size=16", "model.num_heads=4",
                 "model.ffn_hidden_size=32", "model.image_size=8", "model.patch_size=4",
                 "model.num_classes=8", "training.micro_batch_size=2",
                 "training.global_batch_size=32", *overrides])


# --- the token ops ----------------------------------------------------------------------

def _single(op: str, shapes: dict[str, tuple[tuple[int, ...], str]], **attrs) -> Graph:
    g = GraphBuilder()
    g.op(op, [g.tensor(n, list(s), k) for n, (s, k) in shapes.items()], "y", **attrs)
    return g.build()


OPS = [
    ("PatchEmbed", {"x": ((4, 2, 8, 4), "input"), "w": ((6, 2, 2, 2), "parameter")}, {}),
    ("ClassToken", {"x": ((4, 3, 6), "input"), "t": ((6,), "parameter")}, {}),
    ("SelectToken", {"x": ((4, 3, 6), "input")}, {"index": 0}),
    ("SelectToken", {"x": ((4, 3, 6), "input")}, {"index": 2}),
]


@pytest.mark.parametrize(("op", "shapes", "attrs"), OPS)
def test_token_ops_equal_one_device_on_every_split(op, shapes, attrs):
    """Every valid signature on a (2, 2) mesh: forward and every input's gradient."""
    graph = _single(op, shapes, **attrs)
    mesh = Mesh.of(a=2, b=2)
    sigs = signatures(graph.labels(graph.ops[0]), mesh, graph.shapes(graph.ops[0]))
    assert len(sigs) > 1
    for sig in sigs:
        check = check_signature(graph, mesh, sig)
        assert check.worst < 1e-12, (sig, check)


def test_patch_embedding_is_the_strided_convolution():
    """PatchEmbed = a p x p convolution of stride p, each output position one token, in
    row-major order (timm's conv, flatten(2), transpose(1, 2)); its VJP is the adjoint."""
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((2, 3, 6, 4)), rng.standard_normal((5, 3, 2, 2))
    fam = get_family("PatchEmbed")
    ctx = KernelCtx.whole([x.shape, w.shape], (2, 6, 5))
    y = fam.forward([x, w], {}, ctx)
    want = np.zeros((2, 5, 3, 2))
    for i in range(3):
        for j in range(2):
            patch = x[:, :, 2 * i:2 * i + 2, 2 * j:2 * j + 2]
            want[:, :, i, j] = np.einsum("bcpq,ocpq->bo", patch, w)
    assert np.allclose(y, want.reshape(2, 5, 6).transpose(0, 2, 1))
    dy = rng.standard_normal(y.shape)
    dx, dw = fam.vjp([x, w], y, dy, {}, ctx)
    assert np.sum(dy * y) == pytest.approx(np.sum(dx * x))  # linear in x: <dy, Ax> = <A'dy, x>
    assert np.sum(dy * y) == pytest.approx(np.sum(dw * w))
    assert fam.flops([x.shape, w.shape], y.shape, {}) == 2 * 2 * 6 * 5 * (3 * 2 * 2)


def test_bidirectional_fused_attention_is_the_unmasked_softmax():
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal(s) for s in ((2, 5, 2, 1, 4), (2, 5, 2, 4), (2, 5, 2, 4)))
    fam = get_family("FusedAttention")
    ctx = KernelCtx.whole([q.shape, k.shape, v.shape], q.shape)
    y = fam.forward([q, k, v], {"causal": False, "p": 0.0}, ctx)
    z = np.einsum("bsgrd,btgd->bgrst", q, k) / 2.0
    p = np.exp(z - z.max(-1, keepdims=True))
    want = np.einsum("bgrst,btgd->bsgrd", p / p.sum(-1, keepdims=True), v)
    assert np.allclose(y, want)
    assert not np.allclose(fam.forward([q, k, v], {"p": 0.0}, ctx), want)  # causal by default
    fwd_causal = fam.cost([q.shape, k.shape, v.shape], q.shape, {}, 2.0, "fwd")
    fwd_full = fam.cost([q.shape, k.shape, v.shape], q.shape, {"causal": False}, 2.0, "fwd")
    assert (fwd_causal[2], fwd_full[2]) == (0.5, 1.0)  # no blocks skipped without the mask


# --- the family and the bundled scenario -------------------------------------------------

def test_vit_is_a_layered_family_with_its_own_graph():
    s = _vit()
    assert family(s.model) is FAMILIES["vit"] and FAMILIES["vit"].layered
    graph = family(s.model).unplanned(s, 2)
    names = [op.name for op in graph.ops]
    assert names[:4] == ["embed_patch", "embed_patch_bias", "embed_cls", "embed_pos"]
    assert names[-5:] == ["lnf", "head_cls", "head", "ce", "loss"]
    assert not any(n.endswith(".mask") for n in names)  # bidirectional: no causal mask
    assert graph.tensors["pixels"].shape == (2, 3, 224, 224)
    assert graph.tensors["labels"].shape == (2,)  # one label per image
    assert s.model.seq_length == 197 and s.model.vocab_size == 1000  # derived


def test_parameter_count_is_vit_b16s():
    """ViT-B/16: 86M (Table 1); timm's 86,567,656 less the head's bias (1000), which this
    head has none of: within 1%."""
    s = _vit()
    counts = transformer_params(s.model)
    assert abs(counts.total - VIT_B16_PARAMS) / VIT_B16_PARAMS < 0.01
    assert counts.total == VIT_B16_PARAMS - 1000
    # the head's classifier is its own (not tied to the embedding): held once, counted
    assert counts.output == 0 and counts.head == 2 * 768 + 1000 * 768
    assert counts.embedding == 768 * 3 * 16 * 16 + 768 + 768 + 197 * 768


def test_patch_embedding_flops_follow_the_closed_form():
    """Eq. 1's projection of N = (224/16)^2 patches of P^2 C = 768 pixels to D = 768 per
    image: 2 N D P^2 C FLOPs per image forward, b = 64 images a device, in the program
    `run` times."""
    s = _vit()
    prog = transformer_program(s)
    b, n, d, p2c = 64, (224 // 16) ** 2, 768, 16 * 16 * 3
    patch = [op for op in prog.block("embed").fwd
             if getattr(op, "name", "") == "patch_embed"]
    assert len(patch) == 1
    assert patch[0].flops == 2 * b * n * d * p2c  # its bias add is the GEMM's epilogue
    assert 2 * n * d * p2c == pytest.approx(231.2e6, rel=1e-3)


def test_run_simulates_the_bundled_scenario(invoke_cli):
    res = invoke_cli("run", NAME, "--json")
    assert res.exit_code == 0, res.stderr
    out = json.loads(res.stdout)
    assert 0.2 < out["mfu"] < 0.7
    assert out["memory"]["fits"] is True
    # the parameters and their gradients, bf16 on every data-parallel device
    assert out["memory"]["by_category_bytes"]["parameters"] == 2 * (VIT_B16_PARAMS - 1000)
    s = _vit()
    direct = simulate(s, load_profile(s.hardware))
    assert direct.iteration_time_s == pytest.approx(out["iteration_time_s"])


@pytest.mark.parametrize("overrides", [
    [],                                                        # data parallel 8
    ["parallel.data=4", "parallel.tensor=2"],                  # tensor parallel
    ["parallel.data=2", "parallel.tensor=4", "model.attention=flash"],
    ["parallel.data=4", "parallel.pipeline=2"],                # pipeline stages
])
def test_verify_passes_on_the_shrunk_vit(overrides):
    result = verify_scenario(_vit(overrides))
    assert result.ok, [c for c in result.checks if not c.ok]
    assert any("image=4 patch=2" in n for n in result.notes)
    assert {"loss", "w_patch.grad", "cls.grad", "w_head.grad"} <= \
        {c.tensor for c in result.checks}


def test_verify_at_its_own_size_with_sequence_parallel():
    """8x8 images of 4x4 patches verify unshrunk; under sequence parallel the shrunk image
    keeps tokens the tensor-parallel ranks split evenly (3x3 patches and the class token
    over 2 ranks)."""
    result = verify_scenario(_small(["parallel.data=4", "parallel.tensor=2"]))
    assert result.ok and not any("shrunk" in n for n in result.notes)
    # sequence parallel needs the tokens split evenly: the shrunk image has 3x3 patches
    sp = verify_scenario(_vit(["parallel.data=4", "parallel.tensor=2",
                               "parallel.sequence_parallel=true", "model.image_size=48"]))
    assert sp.ok and any("image=6 patch=2" in n for n in sp.notes)


@pytest.mark.parametrize("faults", [Faults(drop_comm=0), Faults(wrong_slice=True),
                                    Faults(skip_grad_reduction=True)])
def test_verify_fails_under_a_mutation(faults):
    result = verify_scenario(_vit(["parallel.data=4", "parallel.tensor=2"]), faults)
    assert not result.ok


def test_plan_returns_a_plan(invoke_cli):
    res = invoke_cli("plan", NAME, "--json", "--top", "3")
    assert res.exit_code == 0, res.stderr
    best = json.loads(res.stdout)["best"]["config"]
    assert best["data"] * best["tensor"] * best["pipeline"] == 8


def test_sweep_over_tensor_parallel(invoke_cli, tmp_path):
    res = invoke_cli("sweep", NAME, "--grid", "parallel.tensor=1,2,4", "--out", str(tmp_path))
    assert res.exit_code == 0, res.stderr
    assert "3 configurations: 3 fit, 0 do not fit, 0 failed" in res.stdout


@pytest.mark.parametrize(("overrides", "key"), [
    (["model.patch_size=15"], "model.patch_size"),
    (["model.seq_length=100"], "model.seq_length"),
    (["model.vocab_size=10"], "model.vocab_size"),
    (["parallel.data=2", "parallel.tensor=4", "model.num_classes=1002"], "model.num_classes"),
    (["parallel.data=4", "parallel.context=2"], "parallel.context"),
    (["parallel.data=2", "parallel.tensor=4", "parallel.tensor_nd=[2,2]"],
     "parallel.tensor_nd"),
    (["model.moe={experts: 4}"], "model.moe"),
])
def test_what_a_vit_cannot_be_is_refused(overrides, key):
    with pytest.raises(InputError) as err:
        _vit(overrides)
    assert key in str(err.value)


def test_tokens_and_classes_are_derived_not_required():
    s = _vit()
    assert math.isqrt(s.model.seq_length - 1) == 224 // 16
