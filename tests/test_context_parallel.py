"""Context parallelism (parallel.context): ring attention equals one device's attention
forward and backward, the whole model verifies on a (dp, cp, tp) mesh and fails when a key/
value exchange step is dropped, the ring's bytes follow the closed form, and the knob moves
memory and traffic the way the technique says or is refused by name."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml
from model_kinds import refusal

from simulator.config.resources import resolve_yaml
from simulator.config.scenario import parse_scenario
from simulator.errors import InputError
from simulator.graph.ops import KernelCtx, get_family, ring_attention
from simulator.models.cases import build_case
from simulator.numeric.verify import verify_case
from simulator.program.model_program import transformer_program
from simulator.sharding.plan import build_plan
from simulator.simulation.verify import verify_scenario


def _bundled(name: str, overrides=()):
    path = resolve_yaml(name, "scenarios")
    return parse_scenario(yaml.safe_load(path.read_text()), str(path), list(overrides))


def _ring_case(n: int, dropout: float):
    """q, k, v of a causal attention (2 groups of 2 query heads), split into n blocks."""
    rng = np.random.default_rng(n)
    b, s, g, r, d = 2, 4 * n, 2, 2, 4
    q = rng.standard_normal((b, s, g, r, d))
    k, v = rng.standard_normal((2, b, s, g, d))
    c = s // n
    blocks = [[x[:, i * c:(i + 1) * c] for x in (q, k, v)] for i in range(n)]
    ctxs = [KernelCtx((q.shape, k.shape, v.shape), q.shape,
                      ((0, i * c, 0, 0, 0), (0, i * c, 0, 0), (0, i * c, 0, 0)),
                      (0, i * c, 0, 0, 0), blocks[0][0].shape) for i in range(n)]
    attrs = {"p": dropout, "seed": 11, "ring": n}
    return (q, k, v), blocks, ctxs, attrs


@pytest.mark.parametrize("n,dropout", [(2, 0.0), (4, 0.1), (3, 0.2)])
def test_ring_attention_equals_one_device(n, dropout):
    """Online softmax over every rank's key/value blocks (Liu et al. 2023, Alg. 1) gives
    FlashAttention's output, with the same dropout mask; dQ, dK, dV too."""
    (q, k, v), blocks, ctxs, attrs = _ring_case(n, dropout)
    fused, ring = get_family("FusedAttention"), get_family("RingAttention")
    whole = KernelCtx.whole([q.shape, k.shape, v.shape], q.shape)
    y = fused.forward([q, k, v], attrs, whole)
    dy = np.random.default_rng(1).standard_normal(y.shape)
    grads = fused.vjp([q, k, v], y, dy, attrs, whole)
    assert ring.group is not None
    out = ring.group.forward(blocks, attrs, ctxs, [list(range(n))])
    np.testing.assert_allclose(np.concatenate(out, axis=1), y, atol=1e-12)
    c = q.shape[1] // n
    dys = [dy[:, i * c:(i + 1) * c] for i in range(n)]
    per_rank = ring.group.vjp(blocks, out, dys, attrs, ctxs, [list(range(n))])
    for t in range(3):
        np.testing.assert_allclose(np.concatenate([g[t] for g in per_rank], axis=1),
                                   grads[t], atol=1e-12)


def test_a_dropped_ring_step_changes_the_output(monkeypatch):
    (q, k, v), blocks, ctxs, attrs = _ring_case(4, 0.0)
    ring = get_family("RingAttention")
    assert ring.group is not None
    good = ring.group.forward(blocks, attrs, ctxs, [[0, 1, 2, 3]])
    monkeypatch.setattr(ring_attention, "ring_steps", lambda n: range(n - 1))
    bad = ring.group.forward(blocks, attrs, ctxs, [[0, 1, 2, 3]])
    np.testing.assert_allclose(bad[0], good[0])  # rank 0 needs no earlier block (causal)
    assert not np.allclose(bad[3], good[3])


# ---- verify -------------------------------------------------------------------------------

def test_model_verifies_on_a_context_parallel_mesh():
    """data 2 x context 2 x tensor 2 with sequence parallel: every activation, gradient and
    update equals one device's; the ring's all-gathers (forward and backward) and dK/dV
    reduce-scatters are in the executed collectives."""
    s = _bundled("cp-tiny-verify")
    case = build_case(s)
    assert case.mesh.axes == (("dp", 2), ("cp", 2), ("tp", 2))
    assert {op.type for op in case.sharded.ops} >= {"RingAttention"}
    result = verify_scenario(s)
    assert result.ok, [c for c in result.checks if not c.ok]
    names = {c.tensor for c in result.checks}
    assert {"l0.attn", "l1.wk.grad", "wte.updated"} <= names


def test_verify_fails_without_the_last_key_value_exchange_step(monkeypatch):
    """The mutation: each rank folds in all but the last block the ring brings it."""
    case = build_case(_bundled("cp-tiny-verify"))
    # (a group of one, the single-device reference, keeps its own block)
    monkeypatch.setattr(ring_attention, "ring_steps", lambda n: range(max(n - 1, 1)))
    result = verify_case(case)
    assert not result.ok
    assert not next(c for c in result.checks if c.tensor == "l0.attn").ok
    assert next(c for c in result.checks if c.tensor == "l0.v_mm").ok  # before the attention


def test_weight_gradients_are_partial_over_cp_as_over_dp():
    case = build_case(_bundled("cp-tiny-verify"))
    plan = build_plan(case.sharded, case.mesh)
    cp, dp = case.mesh.axis_index("cp"), case.mesh.axis_index("dp")
    grad = plan.grad_layout("l0.wq").placements
    assert type(grad[cp]).__name__ == "Partial" and type(grad[dp]).__name__ == "Partial"


# ---- run: closed form ---------------------------------------------------------------------

def _kv_block_bytes(s, e: int) -> float:
    """One rank's K (or V) block: micro_batch * seq/cp * kv_heads/tp * head_dim * e bytes."""
    m, p = s.model, s.parallel
    return (s.training.micro_batch_size * m.seq_length / p.context * m.kv_heads / p.tensor
            * m.hidden_size / m.num_heads * e)


@pytest.mark.parametrize("context", [2, 4, 8])
def test_ring_traffic_per_device_per_layer_follows_the_closed_form(context):
    """Forward: K and V passed cp-1 steps around the ring, 2 (cp-1) blocks sent, listed as
    two all-gathers of cp blocks (nccl-tests buffer, (n-1)/n of it sent); backward the KV
    ring again and dK, dV back to their owners: two all-gathers and two reduce-scatters."""
    s = _bundled("cp-llama3-8b-128k-16-h100",
                 [f"parallel.context={context}", f"parallel.data={8 // context}"])
    prog = transformer_program(s)
    block = _kv_block_bytes(s, 2)
    layer = prog.block("layer")
    ring = [(c.collective, c.phase, c.bytes) for c in layer.fwd + layer.bwd
            if getattr(c, "axis", None) == "cp"]
    assert ring == [("all_gather", "fwd", context * block)] * 2 + \
        [("all_gather", "bwd", context * block)] * 2 + \
        [("reduce_scatter", "bwd", context * block)] * 2
    sent = sum(b * (context - 1) / context for _, _, b in ring)
    assert sent == pytest.approx(6 * (context - 1) * block)
    local = (1, s.model.seq_length // context, 4, 4, 128)  # b, s/cp, g/tp, r, d
    assert ring_attention.ring_kv_bytes(local, context, 2, "fwd") == \
        pytest.approx(2 * (context - 1) * block)


def test_context_moves_activation_memory_down_and_kv_traffic_up(invoke_cli):
    """Same 16 devices, data * context = 8: more context ranks hold fewer tokens each
    (activations down) and pass more key/value blocks (the cp all-gathers grow)."""
    seen = {}
    for context in (2, 4, 8):
        result = invoke_cli("run", "cp-llama3-8b-128k-16-h100", "--json", "--set",
                            f"parallel.context={context}", "--set",
                            f"parallel.data={8 // context}")
        assert result.exit_code in (0, 1), result.output  # 1: does not fit in memory
        out = json.loads(result.stdout)
        seen[context] = (out["memory"]["by_category_bytes"]["activations"],
                         out["communication"]["by_collective"]["all_gather"])
    assert seen[2][0] > seen[4][0] > seen[8][0]
    assert seen[2][1] < seen[4][1] < seen[8][1]


# ---- refusals -----------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["mlp", "resnet", "graph"])
def test_parallel_context_is_refused_by_name_off_transformers(kind, invoke_cli):
    message = refusal(invoke_cli, kind, "parallel.context=2")
    assert "parallel.context: 2 needs a transformer" in message and "(allowed: 1)" in message


@pytest.mark.parametrize("overrides,message", [
    (["model.attention=standard"], "model.attention: standard cannot run with "
     "parallel.context=2: ring attention is a fused kernel (allowed: flash, auto)"),
    (["model.seq_length=18"], "parallel.context: 2: 2*context = 4 must divide "
     "model.seq_length=18 (two chunks per rank for causal load balancing)"),
    (["parallel.data=4"], "parallel: data*tensor*pipeline*context = 4*2*1*2 = 16 must "
     "equal cluster.nodes*cluster.devices_per_node = 1*8 = 8"),
])
def test_bad_context_settings_are_refused_by_name(overrides, message):
    with pytest.raises(InputError) as err:
        _bundled("cp-tiny-verify", overrides)
    assert str(err.value).endswith(message)


def test_plan_searches_the_context_degree(invoke_cli):
    from simulator.planner.generic import generic_splits

    sc = _bundled("cp-tiny-verify", [])
    contexts = {dict(c.to_dict())["parallel.context"] for c in generic_splits(sc, 8)}
    assert contexts == {"1", "2", "4", "8"}
    result = invoke_cli("plan", "cp-tiny-verify", "--top", "1")
    assert result.exit_code == 0, result.output
