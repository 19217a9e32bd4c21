"""verify's faster paths compute what the plain ones do (issue 13): the whole-batch
reference in a forked child gives the same report as in-process; freeing what the backward
does not read (numeric.kept, numeric.execution.release) changes no gradient bit; a value
wrongly freed spreads NaN and fails the check rather than passing; the child's errors and
death reach the parent."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest

from simulator.api import load_scenario
from simulator.models.cases import build_case
from simulator.numeric import kept
from simulator.numeric.dist import distribute
from simulator.numeric.execute import run_microbatch
from simulator.numeric.execution import Execution, Faults
from simulator.numeric.reference import Beside
from simulator.numeric.verify import _data, _params
from simulator.sharding.plan import build_plan
from simulator.simulation.verify import verify_scenario


def _sc(name: str, *sets: str):
    return load_scenario(name, list(sets)).scenario


@pytest.mark.parametrize("name,sets,faults", [
    ("verify-tiny-dp8", (), None),
    ("verify-tiny-dp2-tp4-sp", ("parallel.optimizer_shard=1",), None),
    ("verify-tiny-dp8", (), Faults(skip_grad_reduction=True)),  # a broken plan
    ("verify-tiny-tp8", (), Faults(drop_comm=0)),
])
def test_forked_reference_gives_the_in_process_report(name, sets, faults):
    forked = verify_scenario(_sc(name, *sets), faults, fork=True)
    alone = verify_scenario(_sc(name, *sets), faults, fork=False)
    assert forked.to_dict() == alone.to_dict()
    assert forked.ok == (faults is None)


@pytest.mark.parametrize("name", ["verify-tiny-dp8", "verify-tiny-dp2-tp4-sp",
                                  "seed-c-resnet-boundary"])
def test_freeing_early_changes_no_gradient_bit(name):
    """One micro-batch with every value kept and with values freed as soon as nothing
    reads them: the same gradient blocks, bit for bit."""
    case = build_case(_sc(name))
    plan = build_plan(case.sharded, case.mesh)
    rng = np.random.default_rng(3)
    params0 = _params(case.sharded, rng, np.float64)
    batch = _data(case.sharded, rng, np.float64)
    out = []
    for free in (False, True):
        params = {n: distribute(v, plan.layouts[n], plan.mesh) for n, v in params0.items()}
        out.append(run_microbatch(Execution(plan, free=free), params, batch, 1.0))
    kept_all, freed = out
    assert kept_all.keys() == freed.keys() and kept_all
    for n in kept_all:
        for a, b in zip(kept_all[n].blocks, freed[n].blocks):
            assert np.array_equal(a, b), n


def test_freeing_frees_the_shape_only_values():
    """The tiny transformer's forward drops the values only their shapes are read of (an
    addition's operands, a mask's or a scale's input, a softmax's input), not those a
    backward reads (an einsum's operands, a GeLU's input, a softmax's output)."""
    case = build_case(_sc("verify-tiny-dp8"))
    plan = build_plan(case.sharded, case.mesh)
    dead = {name for names in kept.dead_after(plan) for name in names}
    assert {"l0.q_mm", "l0.scores", "l0.scale", "l0.mask", "l0.fc1_mm", "l0.fc2"} <= dead
    assert not dead & {"l0.q", "l0.k", "l0.v", "l0.softmax", "l0.fc1", "l0.act",
                       "l0.attn_drop", "l0.ln1", "head"}


def test_a_value_freed_wrongly_fails_verify(monkeypatch):
    """Had the table said a GeLU's backward reads only its input's shape, the backward
    would read NaN and verify would fail (it does not pass by accident)."""
    monkeypatch.setitem(kept._SHAPE_ONLY, "GeLU", frozenset({0}))
    kept.dead_after.cache_clear()
    try:
        result = verify_scenario(_sc("verify-tiny-dp8"), fork=False)
    finally:
        kept.dead_after.cache_clear()
    assert not result.ok
    bad = [c for c in result.checks if not c.ok]
    assert bad and all(c.tensor.endswith((".grad", ".updated")) for c in bad)


def test_an_error_in_the_child_is_raised_in_the_parent():
    def fail():
        raise ValueError("reference broke")

    with Beside(fail, fork=True) as beside, pytest.raises(ValueError, match="reference broke"):
        beside.result()


def test_a_child_that_dies_is_replaced_by_the_computation_here():
    parent = os.getpid()

    def work():
        if os.getpid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)
        return 42

    with Beside(work, fork=True) as beside:
        assert beside.result() == 42


def test_leaving_the_block_ends_a_running_child():
    r, w = os.pipe()

    def wait_forever():
        os.read(r, 1)  # never written
        return None

    with Beside(wait_forever, fork=True) as beside:
        pid = beside._pid
        assert pid is not None
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # already reaped
    os.close(r)
    os.close(w)
