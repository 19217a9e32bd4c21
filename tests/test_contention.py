"""Network contention (issue 26 item 3): transfers that share a link share its bandwidth
(the engine's fair sharing, closed forms in tests/test_engine.py), and a scale-out fabric
with an oversubscribed tier above its leaves (`inter_node.nodes_per_leaf`,
`inter_node.oversubscription`) gives a group that spans leaves 1 / ratio of its network
bandwidth (`cost.links.fabric_share`)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from simulator.config.hardware import load_profile
from simulator.cost.collectives import collective_time_s
from simulator.cost.links import fabric_share
from simulator.cost.specs import GroupSpec
from simulator.engine.core import run
from simulator.engine.tasks import Plan, Task
from simulator.report.critical import pace


def _hw(**inter):
    hw = load_profile("a100-80gb")
    return hw.model_copy(update={"inter_node": hw.inter_node.model_copy(update=inter)})


@pytest.mark.parametrize("size, stride, leaf, share", [
    (8, 8, 8, 1.0),     # nodes 0..7, one member each: one leaf of 8
    (9, 8, 8, 0.5),     # the ninth node is in the next leaf
    (8, 16, 8, 0.5),    # every other node: nodes 0..14 span two leaves
    (8, 1, 1, 1.0),     # inside one node
    (4, 64, 32, 1.0),   # nodes 0, 8, 16, 24: a span of 25 nodes in a leaf of 32
])
def test_a_group_crossing_its_leaf_keeps_one_over_the_ratio(size, stride, leaf, share):
    group = GroupSpec(size, stride, 8)
    assert fabric_share(group, _hw(nodes_per_leaf=leaf, oversubscription=2.0)) == share
    assert fabric_share(group, _hw(nodes_per_leaf=leaf)) == 1.0  # non-blocking
    assert fabric_share(group, _hw(oversubscription=2.0)) == 1.0  # no leaves given


@pytest.mark.parametrize("kind", ["all_reduce", "all_gather", "reduce_scatter"])
def test_an_oversubscribed_fabric_is_a_slower_nic_for_groups_that_cross_it(kind):
    """A data-parallel group of one member per node on 16 nodes, leaves of 4 nodes at 2:1:
    priced as on NICs of half the bandwidth; inside one leaf (4 nodes) as before."""
    base = _hw()
    crossing, inside = GroupSpec(16, 8, 8), GroupSpec(4, 8, 8)
    over = _hw(nodes_per_leaf=4, oversubscription=2.0)
    half = _hw(nic_bandwidth_Gbps=base.inter_node.nic_bandwidth_Gbps / 2)
    nbytes = 1 << 30
    assert collective_time_s(kind, nbytes, crossing, over) == pytest.approx(
        collective_time_s(kind, nbytes, crossing, half), rel=1e-12)
    assert collective_time_s(kind, nbytes, inside, over) == \
        collective_time_s(kind, nbytes, inside, base)
    assert collective_time_s(kind, nbytes, crossing, over) > \
        collective_time_s(kind, nbytes, crossing, base)


def _run(invoke_cli, name: str, *sets: str) -> dict:
    args = ["run", name, "--json"]
    for item in sets:
        args += ["--set", item]
    result = invoke_cli(*args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_oversubscription_slows_the_data_parallel_reduction_that_crosses_leaves(invoke_cli):
    """llama2-70b on 8 nodes (its data-parallel groups span them): leaves of one node at
    7:1 (the Llama 3 clusters' ratio above a pod) cost time; leaves of 8 nodes cost none."""
    name = "llama2-70b-64-h100"
    base = _run(invoke_cli, name)
    wide = _run(invoke_cli, name, "hardware.inter_node.nodes_per_leaf=8",
                "hardware.inter_node.oversubscription=7.0")
    narrow = _run(invoke_cli, name, "hardware.inter_node.nodes_per_leaf=1",
                  "hardware.inter_node.oversubscription=7.0")
    assert wide["iteration_time_s"] == base["iteration_time_s"]
    assert narrow["iteration_time_s"] > base["iteration_time_s"]
    assert narrow["communication"] == base["communication"]  # the same bytes, slower


def test_the_critical_path_says_what_sharing_a_link_cost():
    """A 1 s send and a 1 s gradient bucket share one NIC (fair: both end at 2 s), and the
    next stage's kernel waits for the send: 1 s of the path is the send's share lost to the
    bucket. Under fifo the send runs first, alone: nothing is reported."""
    tasks = [
        Task(0, 0, "pp_fwd", "send_fwd", "comm", 0, 0, 1.0, link="nic"),
        Task(1, 0, "dp", "grad_bucket", "comm", -1, 0, 1.0, link="nic"),
        Task(2, 1, "compute", "F", "fwd", 0, 1, 1.0, deps=(0,)),
    ]
    streams = {}
    for t in tasks:
        streams.setdefault((t.device, t.stream), []).append(t.tid)
    plan = Plan(tasks=tuple(tasks), streams=tuple((d, n, tuple(ts)) for (d, n), ts in
                                                  streams.items()),
                devices=(0, 1), represents=(1, 1), stage_of=(0, 1),
                static_memory=((), ()), total_devices=2, micro_batches=1,
                link_sharing="fair")
    fair = pace(plan, run(plan))
    assert fair.length_s == 3.0 and fair.contention_s == 1.0
    fifo_plan = dataclasses.replace(plan, link_sharing="fifo")
    assert pace(fifo_plan, run(fifo_plan)).contention_s == 0.0


def test_fair_sharing_moves_no_byte(invoke_cli):
    fair = _run(invoke_cli, "llama2-70b-64-h100", "hardware.inter_node.flow_sharing=fair")
    fifo = _run(invoke_cli, "llama2-70b-64-h100")
    assert "contention_on_path_s" not in fifo["critical_path"]
    assert fair["communication"] == fifo["communication"]
