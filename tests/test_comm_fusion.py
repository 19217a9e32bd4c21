"""`parallel.comm_fusion` with index lists and per collective kind (issue 10 item 10;
MindSpore `comm_fusion={"allreduce": {...}, "allgather": ..., "reducescatter": ...}` and
`all_reduce_fusion_config`): the buckets each rule makes, in the lowered plan."""

from __future__ import annotations

import pytest

from simulator.api import load_hardware, load_scenario
from simulator.errors import InputError
from simulator.lower.buckets import grad_bucket_runs
from simulator.simulation.simulate import simulate

BASE = ["model.layers=4", "parallel.tensor=1", "parallel.data=4"]


def _tasks(sets: list[str], name: str) -> list:
    loaded = load_scenario("tiny-cpu", BASE + sets)
    result = simulate(loaded.scenario, load_hardware(loaded))
    dev = result.plan.devices[0]
    return [t for t in result.plan.tasks if t.device == dev and t.name == name]


def test_index_groups_pieces_by_the_listed_layers():
    # backward pieces: head, l3, l2, l1, l0, embedding; groups start at positions 2 and 4
    runs = grad_bucket_runs((1, 10, 10, 10, 10, 5), 2.0, "index", 25.0, 1, (2, 4))
    assert runs == ((1, 22.0, 1), (3, 40.0, 1), (5, 30.0, 1))


def test_an_index_list_makes_one_bucket_per_group():
    one_per_layer = _tasks(["parallel.comm_fusion.mode=index"], "grad_bucket")
    halves = _tasks(["parallel.comm_fusion={mode: index, index: [2]}"], "grad_bucket")
    # one per backward piece (head, four layers, embedding); two groups: the head joins
    # layers 3 and 2, the embedding layers 1 and 0
    assert len(one_per_layer) == 6 and len(halves) == 2
    assert sum(t.comm[0][1] for t in halves) == pytest.approx(
        sum(t.comm[0][1] for t in one_per_layer))


def test_each_kind_takes_its_own_rule():
    plain = ["parallel.optimizer_shard=1", "parallel.overlap.param_gather=false"]
    rs = _tasks(plain + ["parallel.comm_fusion={reduce_scatter: {mode: index}}"],
                "grad_bucket")
    fine = _tasks(plain + ["parallel.comm_fusion={reduce_scatter: {mode: index}, "
                           "all_gather: {mode: size, bucket_mb: 0.01}}"], "param_gather")
    same = _tasks(plain + ["parallel.comm_fusion={reduce_scatter: {mode: index}}"],
                  "param_gather")
    assert len(rs) == 6 and all(t.comm[0][0] == "reduce_scatter" for t in rs)
    # the updated parameters come back in 10 KB all-gathers rather than the reduce-scatter's
    # six buckets: the same bytes (fp32: as many as were reduced), more latencies
    assert [t.comm for t in fine] == [t.comm for t in same]
    assert fine[0].comm[0][1] == pytest.approx(sum(t.comm[0][1] for t in rs))
    assert fine[0].duration_s > same[0].duration_s


@pytest.mark.parametrize("sets,key,message", [
    (["parallel.comm_fusion.index=[2]"], "parallel.comm_fusion.index",
     "needs parallel.comm_fusion.mode: index (found size)"),
    (["parallel.comm_fusion={mode: index, index: [3, 2]}"], "parallel.comm_fusion.index",
     "[3, 2]: layer numbers that start a fusion group must increase and stay below "
     "model.layers=4"),
    (["parallel.comm_fusion={all_gather: {mode: size}}"], "parallel.comm_fusion.all_gather",
     "fuses no collective with parallel.optimizer_shard 0 (the gradients are all-reduced; "
     "remove the entry)"),
])
def test_fusion_rules_name_the_key(sets, key, message):
    with pytest.raises(InputError) as err:
        load_scenario("tiny-cpu", BASE + sets)
    assert err.value.key == key and message in err.value.message
