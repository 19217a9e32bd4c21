"""`einsum.contract`: a two-operand einsum lowered to one (batched) np.matmul equals
np.einsum on random shapes, for every form it lowers (batch, m, n and k labels in any order
and number, operands transposed, broadcast or strided) and for the forms it leaves to
einsum (a batched dot product, a repeated label, a label summed in one operand alone)."""

import zlib

import numpy as np
import pytest

from simulator.graph.ops.einsum import _gemm_plan, contract
from simulator.graph.ops.elementwise import _gelu_vjp

# the model's equations (graph.builders), their VJP specs (`out, other -> input`) and the
# stacked kernels' forms with a rank label n (numeric.stacked, numeric.stacked_offsets)
MODEL = ["bsh,hf->bsf", "bsf,fh->bsh", "bsh,vh->bsv", "bsgrd,btgd->bgrst",
         "bgrst,btgd->bsgrd", "bsgrd,grdh->bsh", "bsh,he->bse", "bech,ehf->becf",
         "becf,efh->bech", "MK,KN->MN", "ABMK,ABKN->ABMN", "AKM,NK->AMN"]


def _vjp_specs(eq: str) -> list[str]:
    (a, b), out = eq.split("->")[0].split(","), eq.split("->")[1]
    return [f"{out},{b}->{a}", f"{out},{a}->{b}"]


def _stacked(eq: str) -> list[str]:
    """The rank label on both operands, or on one (the other shared)."""
    (a, b), out = eq.split("->")[0].split(","), eq.split("->")[1]
    return [f"n{a},n{b}->n{out}", f"n{a},{b}->n{out}", f"{a},n{b}->n{out}"]


FORMS = sorted({s for eq in MODEL for f in [eq, *_stacked(eq)] for s in [f, *_vjp_specs(f)]})


def _operands(spec: str, rng: np.random.Generator, dtype=np.float64):
    labels = sorted(set(spec) - set(",->"))
    size = dict(zip(labels, rng.integers(1, 6, len(labels)).tolist()))
    a, b = spec.split("->")[0].split(",")
    return [rng.standard_normal([size[x] for x in s]).astype(dtype) for s in (a, b)]


def _close(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype
    scale = max(1.0, float(np.abs(want).max(initial=0.0)))
    np.testing.assert_allclose(got, want, rtol=0, atol=64 * np.finfo(want.dtype).eps * scale)


@pytest.mark.parametrize("spec", FORMS)
def test_model_forms_lower_to_matmul_and_equal_einsum(spec):
    assert _gemm_plan(spec) is not None, spec
    rng = np.random.default_rng(zlib.crc32(spec.encode()))
    for _ in range(3):
        a, b = _operands(spec, rng)
        _close(contract(spec, a, b), np.einsum(spec, a, b))


def _random_spec(rng: np.random.Generator) -> str:
    """Random numbers of batch, m, n and k labels, each operand and the output in a random
    order."""
    pool = iter("abcdefghijklmnopqrstuvwxyz")
    kinds = {k: [next(pool) for _ in range(int(rng.integers(0, 3)))] for k in "bmnk"}
    if not kinds["m"] and not kinds["n"]:
        kinds["m"] = [next(pool)]
    a = kinds["b"] + kinds["m"] + kinds["k"]
    b = kinds["b"] + kinds["k"] + kinds["n"]
    out = kinds["b"] + kinds["m"] + kinds["n"]
    shuffle = lambda s: "".join(rng.permutation(s)) if s else ""  # noqa: E731
    return f"{shuffle(a)},{shuffle(b)}->{shuffle(out)}"


def test_random_forms_equal_einsum_float32_and_float64():
    rng = np.random.default_rng(13)
    for _ in range(150):
        spec = _random_spec(rng)
        assert _gemm_plan(spec) is not None, spec
        dtype = [np.float32, np.float64][int(rng.integers(0, 2))]
        a, b = _operands(spec, rng, dtype)
        _close(contract(spec, a, b), np.einsum(spec, a, b))


def test_strided_broadcast_and_mixed_dtype_operands():
    rng = np.random.default_rng(1)
    w = rng.standard_normal((6, 5))
    x = rng.standard_normal((3, 4, 6)).astype(np.float32)
    shared = np.broadcast_to(w, (3, 6, 5))  # a replicated weight, stride 0 on n
    _close(contract("nsh,nhf->nsf", x, shared), np.einsum("nsh,nhf->nsf", x, shared))
    t = rng.standard_normal((5, 4, 3)).transpose(2, 1, 0)[:, ::2]  # strided view
    u = rng.standard_normal((3, 6, 5)).transpose(0, 2, 1)  # transposed matrices
    _close(contract("nsh,nhf->nsf", t, u), np.einsum("nsh,nhf->nsf", t, u))
    col = np.broadcast_to(rng.standard_normal((1, 5)), (6, 5))  # stride 0 within the matrix
    _close(contract("mk,kn->mn", col, w.T), np.einsum("mk,kn->mn", col, w.T))


@pytest.mark.parametrize("spec,shapes", [
    ("bsgrd,bsgrd->bgrs", [(2, 3, 2, 2, 4)] * 2),  # a batched dot product
    ("ii,i->i", [(3, 3), (3,)]),  # a diagonal
    ("ij,jk->i", [(2, 3), (3, 4)]),  # k summed in one operand alone
    ("...ij,jk->...ik", [(2, 2, 3), (3, 4)]),  # an ellipsis
    ("ij,jk", [(2, 3), (3, 4)])])  # an implicit output
def test_forms_left_to_einsum_still_equal_it(spec, shapes):
    assert _gemm_plan(spec) is None
    rng = np.random.default_rng(2)
    a, b = (rng.standard_normal(s) for s in shapes)
    _close(contract(spec, a, b), np.einsum(spec, a, b))


def test_size_one_broadcast_label_goes_to_einsum():
    a, b = np.ones((2, 3)), np.ones((1, 4))  # label j: 3 against 1 (einsum broadcasts it)
    _close(contract("ij,jk->ik", a, b), np.einsum("ij,jk->ik", a, b))


def test_gelu_vjp_in_place_equals_the_closed_form():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 7)) * 3
    dy = rng.standard_normal((4, 7))
    c = np.sqrt(2 / np.pi)
    t = np.tanh(c * (x + 0.044715 * x**3))
    want = dy * (0.5 * (1 + t) + 0.5 * x * (1 - t**2) * c * (1 + 3 * 0.044715 * x**2))
    x.flags.writeable = False
    _close(_gelu_vjp([x], None, dy, {}, None)[0], want)
    got32 = _gelu_vjp([x.astype(np.float32)], None, dy.astype(np.float32), {}, None)[0]
    assert got32.dtype == np.float32


def test_both_operand_orders_are_exercised():
    """A weight gradient (out = batch, n, m) is computed as B^T A^T, so that it comes out
    contiguous; a forward product as A B."""
    plans = [_gemm_plan(f) for f in FORMS]
    assert any(p.swap for p in plans) and any(not p.swap for p in plans)
    x, dy = np.ones((3, 2, 5, 4)), np.ones((3, 2, 5, 6))
    assert contract("nbsh,nbsf->nfh", x, dy).flags.c_contiguous
