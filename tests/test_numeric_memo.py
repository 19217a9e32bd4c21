"""What verify draws or computes once and reuses is what it would have recomputed: the
dropout row table (numeric.mask_rows) gives every rank's block the mask the family kernel
draws for it (any order of micro-batches, consecutive or scattered rows); the stacked
kernels that keep a forward intermediate (numeric.stacked_saved) give bitwise the
gradients of a recomputation; the kept heap (numeric.heap) restores numpy's setting; the
blocked comparison finds what a whole-array one does."""

import numpy as np
import pytest

from simulator.graph.ops import KernelCtx
from simulator.graph.ops.elementwise import dropout_mask
from simulator.numeric.heap import _hugepage_setter, kept_heap
from simulator.numeric.mask_rows import clear_row_masks, row_mask
from simulator.numeric.stacked import StackCtx, stacked_kernel
from simulator.numeric.stacked_saved import clear_saved
from simulator.numeric.verify import Check, _compare

SHAPE = (8, 3, 5)  # a micro-batch of 8 rows


def _family_mask(attrs, starts, offset, local):
    ctx = KernelCtx((SHAPE,), SHAPE, (tuple(starts),), tuple(starts), local, offset)
    return dropout_mask(attrs, ctx, local)


@pytest.mark.parametrize("rows", [[0, 2, 4, 6], [6, 0, 4, 2]])
def test_row_table_gives_each_rank_the_family_mask(rows):
    """Four ranks of 2 rows each, micro-batch 1 (offset 8) drawn before micro-batch 0 and
    the whole batch of 16 after: every block equals the family's mask of that rank."""
    attrs, local = {"p": 0.3, "seed": 11}, (2, 3, 5)
    starts = np.array([[r, 0, 0] for r in rows])
    clear_row_masks()
    try:
        for offset in (8, 0):
            got = row_mask(11, 0.3, SHAPE, starts, offset, local)
            assert got is not None and got.shape == (4,) + local
            for i, r in enumerate(rows):
                want = _family_mask(attrs, (r, 0, 0), offset, local)
                assert np.array_equal(got[i], want)
        whole = row_mask(11, 0.3, (16, 3, 5), np.zeros((1, 3), dtype=int), 0, (16, 3, 5))
        assert whole is not None
        ctx = KernelCtx(((16, 3, 5),), (16, 3, 5), ((0, 0, 0),), (0, 0, 0), (16, 3, 5), 0)
        assert np.array_equal(whole[0], dropout_mask(attrs, ctx, (16, 3, 5)))
    finally:
        clear_row_masks()


def test_row_table_leaves_split_rows_to_the_hash():
    """A block that splits a trailing dim is not whole rows: None (drawn as before)."""
    starts = np.array([[0, 0, 0], [0, 0, 2]])
    assert row_mask(1, 0.1, SHAPE, starts, 0, (8, 3, 2)) is None
    assert row_mask(1, float("nan"), SHAPE, starts[:1], 0, SHAPE) is None


def _ctx(x):
    n = len(x)
    shape = x.shape[1:]
    return StackCtx((shape, (shape[-1],), (shape[-1],)), shape,
                    tuple(np.zeros((n, len(s)), dtype=np.int64)
                          for s in (shape, (shape[-1],), (shape[-1],))),
                    np.zeros((n, len(shape)), dtype=np.int64), shape)


@pytest.mark.parametrize("family", ["GeLU", "LayerNorm"])
def test_kept_forward_gives_the_recomputed_gradient_bitwise(family):
    """The backward on the very array the forward saw (a hit) equals the backward on an
    equal copy (a miss, recomputed as the family does), bit for bit."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 6, 8))
    ins = [x] if family == "GeLU" else [x, rng.standard_normal((4, 8)),
                                        rng.standard_normal((4, 8))]
    dy = rng.standard_normal(x.shape)
    kernel = stacked_kernel(family)
    assert kernel is not None
    clear_saved()
    y = kernel.forward(ins, {}, _ctx(x))
    hit = kernel.vjp(ins, y, dy, {}, _ctx(x))
    miss = kernel.vjp([x.copy()] + ins[1:], y, dy, {}, _ctx(x))
    assert len(hit) == len(miss)
    for a, b in zip(hit, miss):
        assert a is not None and b is not None and np.array_equal(a, b)


def test_kept_heap_restores_numpy_hugepage_setting():
    setter = _hugepage_setter()
    if setter is None:
        pytest.skip("this numpy has no hugepage switch")
    before = setter(True)
    try:
        with kept_heap():
            assert setter(False) is False  # off inside the block
        assert setter(True) is True  # restored after it
    finally:
        setter(before)


def test_blocked_compare_finds_the_worst_element_and_a_nan():
    """verify._compare reads the arrays a block at a time: the one wrong element in the
    third block is found exactly, scaled by the largest reference magnitude (3), and a
    NaN in the last block fails the check."""
    want = np.linspace(-3.0, 2.0, 7 * 28087).reshape(7, -1)
    got = want.copy()
    got.flat[2 * 65536 + 5] += 0.25
    check = _compare("t", got, want, 1e-5)
    assert check.max_abs_error == pytest.approx(0.25, rel=1e-12)
    assert check.max_rel_error == pytest.approx(0.25 / 3.0, rel=1e-12) and not check.ok
    assert _compare("t", want.copy(), want, 1e-5) == Check("t", 0.0, 0.0, True)
    got.flat[-1] = np.nan
    nan = _compare("t", got, want, 1e-5)
    assert np.isnan(nan.max_abs_error) and not nan.ok
