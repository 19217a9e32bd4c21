"""`verify` executes activation recompute (issue 10 item 3): the recomputed ops keep nothing
after the forward and run again, block by block, before their backward; the tensors are
those of one device, and full recompute re-runs each layer's forward collectives."""

from __future__ import annotations

import pytest

from simulator.cli._common import load_scenario
from simulator.numeric.verify import verify_scenario
from simulator.schedule.model_program import recomputed_ops


@pytest.fixture(scope="module")
def results():
    return {mode: verify_scenario(load_scenario("tiny-cpu", [f"parallel.recompute={mode}"])
                                  .scenario) for mode in ("none", "selective", "full")}


def test_recompute_computes_what_one_device_does(results):
    assert all(r.ok for r in results.values())
    assert not any("recompute" in n for n in results["none"].notes)


def test_full_recompute_reruns_every_layer_op_and_its_collectives(results):
    # tiny-cpu: 2 layers, tensor 2, 2 micro-batches in verify; a layer's forward has two
    # tensor-parallel all-reduces (after the attention and the FFN projections)
    extra = results["full"].collectives["all_reduce"] - results["none"].collectives[
        "all_reduce"]
    assert extra == 2 * 2 * 2
    # selective recompute re-runs the attention core, which has no collective
    assert results["selective"].collectives == results["none"].collectives


def test_the_counts_of_recomputed_ops_follow_the_selection(results):
    def count(mode: str) -> int:
        note = next(n for n in results[mode].notes if n.startswith("recompute: "))
        return int(note.split()[1])

    full, selective = recomputed_ops("full"), recomputed_ops("selective")
    assert full("l0.fc1") and not full("lnf") and not full("embed")
    assert selective("l1.softmax") and not selective("l1.fc1")
    assert count("full") > count("selective") > 0
