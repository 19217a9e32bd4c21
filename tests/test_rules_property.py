"""Every sharding rule equals full-tensor ground truth: random meshes (1-2 axes), shapes and
signatures; Partial inputs are unequal random summands. And every VJP matches finite
differences on one device, so the ground truth itself is right."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.graph.graph import GraphBuilder
from simulator.graph.ops import KernelCtx
from simulator.numeric.rulecheck import check_signature, random_inputs
from simulator.sharding.mesh import Mesh
from simulator.sharding.rules import signatures


def _case(kind: str, u: int):
    """(op type, input shapes, attrs, input kinds); every dim a multiple of u."""
    cases = {
        "matmul": ("MatMul", [(2 * u, u), (u, 3 * u)], {}),
        "batchmatmul": ("BatchMatMul", [(u, 2 * u, u), (u, u, 2 * u)], {}),
        "einsum_heads": ("Einsum", [(u, 2 * u, u), (u, u, 2 * u)],
                         {"equation": "bsh,hnd->bsnd"}),
        "add_bias": ("Add", [(u, 2 * u, 3 * u), (3 * u,)], {}),
        "sub": ("Sub", [(2 * u, u), (2 * u, u)], {}),
        "mul": ("Mul", [(u, 2 * u), (u, 2 * u)], {}),
        "gelu": ("GeLU", [(2 * u, 3 * u)], {}),
        "relu": ("ReLU", [(2 * u, 3 * u)], {}),
        "relu2": ("SquaredReLU", [(2 * u, 3 * u)], {}),
        "silu": ("SiLU", [(2 * u, u)], {}),
        "dropout": ("Dropout", [(2 * u, 3 * u)], {"p": 0.3, "seed": 7}),
        "scale": ("Scale", [(2 * u, u)], {"factor": 0.5}),
        "causal": ("CausalMask", [(u, 2 * u, 2 * u)], {}),
        "softmax": ("Softmax", [(2 * u, 3 * u)], {"axis": -1}),
        "layernorm": ("LayerNorm", [(u, 2 * u, 3 * u), (3 * u,), (3 * u,)], {}),
        "reducemean": ("ReduceMean", [(2 * u, u, 3 * u)], {"axes": [0, 2]}),
        "reducesum": ("ReduceSum", [(2 * u, 3 * u)], {"axes": [1], "keep_dims": True}),
        "transpose": ("Transpose", [(u, 2 * u, 3 * u)], {"perm": [2, 0, 1]}),
        "reshape": ("Reshape", [(2 * u, u, 3 * u)], {"shape": [2 * u, 3 * u * u]}),
        "gather": ("Gather", [(4 * u, 2 * u), (u, 2 * u)], {}),
        "cross_entropy": ("SoftmaxCrossEntropy", [(2 * u, 3 * u), (2 * u,)], {}),
        "conv2d": ("Conv2D", [(u, 2 * u, 4, 4), (u, 2 * u, 3, 3)], {}),
        # Mamba-2 (graph/ops/ssm.py): batch and groups split, the scan's sequence whole
        "ssd_scan": ("SsdScan", [(u, 3, 2 * u, 2, 2), (u, 3, 2 * u, 2), (2 * u, 2),
                                 (u, 3, 2 * u, 2), (u, 3, 2 * u, 2), (2 * u, 2), (2 * u, 2)],
                     {"chunk": 2}),
        "causal_conv1d": ("CausalConv1d", [(u, 5, 2 * u, 3), (2 * u, 3, 3), (2 * u, 3)], {}),
        "gated_rmsnorm": ("GatedRMSNorm", [(u, 2, 2 * u, 2, 3), (u, 2, 2 * u, 2, 3),
                                           (2 * u, 2, 3)], {}),
        # multi-head latent attention (graph/mla.py) and multi-token prediction (graph/mtp.py)
        "rmsnorm": ("RMSNorm", [(u, 2 * u, 3 * u), (3 * u,)], {}),
        "rotary": ("Rotary", [(u, 2 * u, u, 1, 4)], {"base": 100.0}),
        "concat": ("ConcatLast", [(u, 2 * u, 3), (u, 2 * u, 2)], {}),
        "concat_heads": ("ConcatLast", [(u, 2 * u, u, 1, 3), (u, 2 * u, 2)], {}),
        "attention_narrow_v": ("FusedAttention", [(u, 4, u, 1, 3), (u, 4, u, 3), (u, 4, u, 2)],
                               {}),
        "window_sink_attention": ("FusedAttention", [(u, 4, u, u, 2), (u, 4, u, 2),
                                                     (u, 4, u, 2), (u, u)],
                                  {"window": 2, "p": 0.0}),
    }
    return cases[kind]


KINDS = ["matmul", "batchmatmul", "einsum_heads", "add_bias", "sub", "mul", "gelu", "relu",
         "relu2", "silu", "dropout", "scale", "causal", "softmax", "layernorm", "reducemean",
         "reducesum", "transpose", "reshape", "gather", "cross_entropy", "conv2d",
         "ssd_scan", "causal_conv1d", "gated_rmsnorm", "rmsnorm", "rotary", "concat",
         "concat_heads", "attention_narrow_v",
         "window_sink_attention"]


def _graph(kind: str, u: int):
    type_, shapes, attrs = _case(kind, u)
    g = GraphBuilder()
    names = [g.tensor(f"x{i}", s) for i, s in enumerate(shapes)]
    g.op(type_, names, "y", **attrs)
    return g.build()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(KINDS), sizes=st.lists(st.sampled_from([1, 2, 3]), min_size=1,
                                                    max_size=2),
       data=st.data())
def test_every_signature_matches_ground_truth(kind, sizes, data):
    mesh = Mesh(tuple((f"a{i}", s) for i, s in enumerate(sizes)))
    graph = _graph(kind, int(np.prod(sizes)))
    op = graph.ops[0]
    sigs = signatures(graph.labels(op), mesh, graph.shapes(op))
    sig = data.draw(st.sampled_from(sigs))
    result = check_signature(graph, mesh, sig, seed=data.draw(st.integers(0, 99)))
    assert result.worst < 1e-9, (kind, str(sig), result)


def _numeric_grad(f, x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    g = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        old = x[idx]
        x[idx] = old + eps
        hi = f()
        x[idx] = old - eps
        lo = f()
        x[idx] = old
        g[idx] = (hi - lo) / (2 * eps)
    return g


@pytest.mark.parametrize("kind", KINDS)
def test_vjp_matches_finite_differences(kind):
    graph = _graph(kind, 2)
    op = graph.ops[0]
    fam = op.family
    rng = np.random.default_rng(1)
    xs = random_inputs(graph, rng)
    ctx = KernelCtx.whole(graph.shapes(op), graph.tensors["y"].shape)
    w = rng.standard_normal(graph.tensors["y"].shape)
    base = np.array(fam.forward(xs, op.attrs, ctx), copy=True)  # not a view of xs

    def loss() -> float:
        # Differences from the unperturbed output, so constants (the causal mask's -1e9)
        # cancel exactly instead of swamping the finite difference.
        return float(np.sum((fam.forward(xs, op.attrs, ctx) - base) * w))

    grads = fam.vjp(xs, fam.forward(xs, op.attrs, ctx), w, op.attrs, ctx)
    for i, g in enumerate(grads):
        if g is None:
            continue
        num = _numeric_grad(loss, xs[i])
        np.testing.assert_allclose(g, num, rtol=1e-4, atol=1e-6, err_msg=f"{kind} input {i}")
