"""The sharding algebra: placements, signature counts, the redistribution planner, and the
collectives that the transformer plans produce."""

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.graph.builders import build_gpt
from simulator.graph.decoder import GptDims
from simulator.graph.graph import GraphBuilder
from simulator.models.transformer_plan import apply_transformer_plan
from simulator.numeric.dist import apply_step, assemble, distribute
from simulator.sharding.layout import Layout, LayoutError
from simulator.sharding.mesh import Mesh
from simulator.sharding.placement import B, P, Shard, dual, parse_placement
from simulator.sharding.plan import build_plan
from simulator.sharding.redist_steps import step_kind
from simulator.sharding.redistribute import plan_redistribution
from simulator.sharding.rules import signatures, signatures_1d


@pytest.fixture
def matmul_view():
    g = GraphBuilder()
    g.op("MatMul", [g.tensor("a", [8, 4]), g.tensor("b", [4, 6])], "c")
    graph = g.build()
    return graph.labels(graph.ops[0])


def test_placements_print_and_parse():
    assert [str(p) for p in (Shard(1), B, P)] == ["S(1)", "B", "P"]
    assert parse_placement("S(2)") == Shard(2)
    assert parse_placement("R") == B
    assert [dual(p) for p in (Shard(0), B, P)] == [Shard(0), P, B]
    with pytest.raises(ValueError, match=r"'X' is not a placement \(allowed: S\(<dim>\), B, P\)"):
        parse_placement("X")


def test_matmul_signature_counts(matmul_view):
    """OneFlow's table: S(m), S(n), S(k)->P, B, and Partial in either input: 6 on one axis,
    4 without Partial inputs (DTensor's count); N-D is the product."""
    assert len(signatures_1d(matmul_view)) == 6
    assert len(signatures_1d(matmul_view, partial_inputs=False)) == 4
    assert len(signatures(matmul_view, Mesh.of(x=2))) == 6
    assert len(signatures(matmul_view, Mesh.of(x=2, y=2))) == 36
    assert len(signatures(matmul_view, Mesh.of(x=2, y=2), partial_inputs=False)) == 16
    assert {str(s) for s in signatures_1d(matmul_view)} == {
        "(B, B) -> B", "(S(0), B) -> S(0)", "(S(1), S(0)) -> P",
        "(B, S(1)) -> S(1)", "(P, B) -> P", "(B, P) -> P"}


def test_signatures_filtered_by_divisibility(matmul_view):
    # k = 4 does not split 3 ways: the contraction-split signature disappears.
    sigs = signatures(matmul_view, Mesh.of(x=3), [(9, 4), (4, 6)])
    assert "(S(1), S(0)) -> P" not in {str(s) for s in sigs}
    assert len(sigs) == 5


@pytest.mark.parametrize("src,dst,kind", [
    (P, B, "all_reduce"), (P, Shard(0), "reduce_scatter"), (Shard(0), B, "all_gather"),
    (Shard(0), Shard(1), "all_to_all"), (B, Shard(1), "slice"), (B, P, "to_partial"),
    (Shard(1), Shard(1), None)])
def test_step_kinds(src, dst, kind):
    assert step_kind(src, dst) == kind


def test_step_bytes_follow_nccl_tests():
    mesh = Mesh.of(x=4)
    shape = (8, 16)  # 128 float32 = 512 B whole
    (ar,) = plan_redistribution(Layout((P,)), Layout((B,)), shape, mesh, 4)
    (ag,) = plan_redistribution(Layout((Shard(0),)), Layout((B,)), shape, mesh, 4)
    (rs,) = plan_redistribution(Layout((P,)), Layout((Shard(0),)), shape, mesh, 4)
    (sl,) = plan_redistribution(Layout((B,)), Layout((Shard(1),)), shape, mesh, 4)
    assert (ar.bytes, ag.bytes, rs.bytes, sl.bytes) == (512, 512, 512, 0)


def test_layout_errors_name_the_split():
    """Even splits are the default requirement (graph plans); `uneven=True` accepts
    torch.chunk shards (the redistribution planner, the numeric backend)."""
    with pytest.raises(LayoutError, match=r"dim 0 of size 6 does not split 4 ways"):
        Layout((Shard(0),)).check((6, 2), Mesh.of(x=4))
    Layout((Shard(0),)).check((6, 2), Mesh.of(x=4), uneven=True)
    with pytest.raises(LayoutError, match=r"\(S\(2\)\) splits dim 2 of a 2-D tensor"):
        Layout((Shard(2),)).check((6, 2), Mesh.of(x=4), uneven=True)


_PLACEMENTS = st.sampled_from([B, P, Shard(0), Shard(1)])


@settings(max_examples=60, deadline=None)
@given(src=st.tuples(_PLACEMENTS, _PLACEMENTS), dst=st.tuples(_PLACEMENTS, _PLACEMENTS),
       sizes=st.tuples(st.sampled_from([2, 3]), st.sampled_from([2, 3])),
       seed=st.integers(0, 1000))
def test_redistribution_preserves_the_value(src, dst, sizes, seed):
    """Any layout to any other on a 2-D mesh, nested splits included: the planned steps,
    executed as data movement between devices, keep the logical tensor intact."""
    mesh = Mesh.of(a=sizes[0], b=sizes[1])
    shape = (sizes[0] * sizes[1] * 2, sizes[0] * sizes[1])
    rng = np.random.default_rng(seed)
    full = rng.standard_normal(shape)
    t = distribute(full, Layout(src), mesh, rng)
    for step in plan_redistribution(Layout(src), Layout(dst), shape, mesh):
        t = apply_step(t, step, mesh)
    assert t.layout == Layout(dst)
    np.testing.assert_allclose(assemble(t, mesh), full, atol=1e-12)


def _layer_comms(sequence_parallel: bool) -> Counter:
    d = GptDims(layers=2, hidden=32, heads=8, kv_heads=8, ffn=64, seq=8, vocab=64, batch=4)
    graph = apply_transformer_plan(build_gpt(d), sequence_parallel)
    plan = build_plan(graph, Mesh.of(dp=2, tp=4))
    return Counter((op.split(".")[0], s.kind, s.axis, s.bytes)
                   for op, s in plan.forward_steps() if s.is_comm)


def test_megatron_tensor_parallel_collectives_come_from_the_algebra():
    """Per layer forward: two all-reduces of the [b/dp, s, h] activation on tp (Megatron's
    g operators), nothing on dp."""
    sbh = 2 * 8 * 32 * 8  # local batch 2, seq 8, hidden 32, float64
    comms = _layer_comms(False)
    for layer in ("l0", "l1"):
        assert comms[(layer, "all_reduce", 1, sbh)] == 2
        assert sum(n for k, n in comms.items() if k[0] == layer) == 2


def test_sequence_parallel_replaces_all_reduce_with_gather_and_scatter():
    """Korthikanti et al. 2022: per layer two all-gathers (before the QKV and FC1 GEMMs,
    shared by q, k and v) and two reduce-scatters, each of the whole [b/dp, s, h]."""
    sbh = 2 * 8 * 32 * 8
    comms = _layer_comms(True)
    for layer in ("l0", "l1"):
        assert comms[(layer, "all_gather", 1, sbh)] == 2
        assert comms[(layer, "reduce_scatter", 1, sbh)] == 2
        assert sum(n for k, n in comms.items() if k[0] == layer) == 4


def test_partial_results_flow_into_the_next_matmul():
    """Y = U.V.W with V's contraction split: letting the Partial U.V flow into the second
    MatMul (linear in it) defers the one all-reduce to the narrower Y [8, 6]; reducing U.V
    before the second MatMul (GShard's partition-and-reduce) all-reduces the wider [8, 16]."""
    from simulator.sharding.plan import Strategy

    def reductions(second: str) -> list[tuple[str, float]]:
        g = GraphBuilder()
        uv = g.op("MatMul", [g.tensor("U", [8, 12]), g.tensor("V", [12, 16], "parameter")],
                  "UV", strategy=Strategy(axes={"x": "K"}))
        y = g.op("MatMul", [uv, g.tensor("W", [16, 6], "parameter")], "Y",
                 strategy=Strategy(axes={"x": second}))
        g.op("ReLU", [y], "out", strategy=Strategy(axes={"x": "B"}))
        plan = build_plan(g.build(), Mesh.of(x=2))
        return [(op, s.bytes) for op, s in plan.forward_steps() if s.kind == "all_reduce"]

    assert reductions("P0") == [("out", 8 * 6 * 8)]
    assert reductions("B") == [("Y", 8 * 16 * 8)]


def test_mindspore_strategy_maps_onto_the_mesh():
    from simulator.sharding.notation import from_mindspore
    g = GraphBuilder()
    g.op("MatMul", [g.tensor("x", [8, 16]), g.tensor("w", [16, 32])], "y")
    graph = g.build()
    sig, taken = from_mindspore(graph.labels(graph.ops[0]), Mesh.of(m0=2, m1=2, m2=2),
                                [[2, 1], [1, 4]])
    assert str(sig) == "(S(0), B) -> S(0) x (B, S(1)) -> S(1) x (B, S(1)) -> S(1)"
    assert taken == {"M": [0], "N": [1, 2]}
