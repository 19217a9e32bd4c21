"""Multi-copy parallel (`parallel.overlap.copies`): the copies' interleaving is an event
simulation (hand-computed schedules pinned here), it hides tensor-parallel collectives under
the other copy's kernels in `run`, and `verify` executes the micro-batch as its slices (an
operator graph's too: its batch cut by `models.multicopy.sliced_model`)."""

from __future__ import annotations

import json

import pytest
from model_kinds import refused_flat

from simulator.cost.specs import CommSpec, ComputeSpec, GroupSpec
from simulator.lower.costs import CostModel, price_ops
from simulator.lower.multicopy import multi_copy

GROUPS = {"tp": GroupSpec(2, 1, 8)}
OPS = (ComputeSpec("a", "gemm", 0.0, 0.0, "bf16"), CommSpec("x", "all_reduce", 1000.0, "tp"),
       ComputeSpec("b", "gemm", 0.0, 0.0, "bf16"))


def _costs(comm_s_per_byte: float) -> CostModel:
    """Each kernel 1 s whole; a collective linear in its bytes, no latency."""
    return CostModel(compute_s=lambda spec: 1.0,
                     collective_s=lambda coll, nbytes, group: nbytes * comm_s_per_byte,
                     send_recv_s=lambda nbytes, intra: 0.0)


@pytest.mark.parametrize("comm_s,exposed", [
    # two copies of a, x, b with a = b = 0.5 s per slice:
    # x = 0.3: a0 [0, .5], a1 [.5, 1], x0 [.5, .8], x1 [1, 1.3], b0 [1, 1.5], b1 [1.5, 2]
    (0.6, 0.0),
    # x = 1.5: a0 [0, .5], a1 [.5, 1], x0 [.5, 2], x1 [2, 3.5], b0 [2, 2.5], b1 [3.5, 4]
    (3.0, 2.0),
])
def test_two_copies_follow_the_hand_schedule(comm_s, exposed):
    priced = multi_copy(OPS, _costs(comm_s / 1000.0), GROUPS, 2)
    assert priced.compute_s == pytest.approx(2.0)
    assert priced.comm_s == pytest.approx(exposed)
    assert priced.comm == (("all_reduce", 1000.0),)


def test_one_copy_is_the_serial_sequence():
    costs = _costs(0.6 / 1000.0)
    serial = price_ops(OPS, costs, GROUPS)
    one = multi_copy(OPS, costs, GROUPS, 1)
    assert (one.compute_s, one.comm_s) == pytest.approx((serial.compute_s, serial.comm_s))


def _run(invoke_cli, *sets: str) -> dict:
    args = ["run", "tiny-cpu", "--json", "--set", "parallel.tensor=4", "--set",
            "parallel.data=1"]
    for item in sets:
        args += ["--set", item]
    result = invoke_cli(*args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_copies_hide_tensor_parallel_collectives_in_run(invoke_cli):
    one, two = _run(invoke_cli), _run(invoke_cli, "parallel.overlap.copies=2")
    assert two["breakdown_s"]["comm_exposed"] < one["breakdown_s"]["comm_exposed"]
    assert two["iteration_time_s"] < one["iteration_time_s"]
    assert two["communication"] == one["communication"]  # the same bytes, sliced


def test_verify_runs_the_micro_batch_as_its_copies(invoke_cli):
    result = invoke_cli("verify", "tiny-cpu", "--json", "--set", "parallel.overlap.copies=2")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["ok"]
    assert "multi-copy: each micro-batch ran as 2 slices of 1, one after another, gradients " \
           "summed" in out["notes"]


def test_copies_must_divide_the_micro_batch(invoke_cli):
    result = invoke_cli("run", "tiny-cpu", "--set", "parallel.overlap.copies=4")
    text = refused_flat(result)
    assert ("parallel.overlap.copies: 4 must divide training.micro_batch_size=2 (the copies "
            "are slices of the micro-batch; valid: 1, 2)") in text


def test_verify_runs_an_operator_graph_slice_by_slice(invoke_cli):
    result = invoke_cli("verify", "hetero-embedding-cpu-8-a100", "--json", "--set",
                        "parallel.overlap.copies=2")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["ok"]
    assert "multi-copy: each micro-batch ran as 2 slices of 1/2 of the batch, one after " \
           "another, gradients summed" in out["notes"]


def test_a_graph_slice_keeps_its_batch_in_front():
    from simulator.api.core import load_scenario
    from simulator.models.multicopy import sliced_model
    m = load_scenario("hetero-embedding-cpu-8-a100").scenario.model
    cut = sliced_model(m, 4)
    assert [t.shape for t in cut.tensors] == [[16, 8], [16], [200000, 16], [128, 256],
                                               [256, 2]]
    assert cut.ops[1].attrs["shape"] == [16, 128]


@pytest.mark.parametrize("name, copies, message", [
    ("hetero-embedding-cpu-8-a100", 3,
     "parallel.overlap.copies=3: model.tensors[0].shape: batch 64 is not divisible by "
     "parallel.overlap.copies=3 (the copies are slices of the batch; valid copies: 1, 2, 4, "
     "8, 16, 32, 64)"),
])
def test_graph_copies_that_do_not_slice_are_refused(invoke_cli, name, copies, message):
    result = invoke_cli("verify", name, "--set", f"parallel.overlap.copies={copies}")
    text = refused_flat(result)
    assert message in text, text
