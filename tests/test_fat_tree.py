"""The scale-out fat tree as engine resources (issue 26): `inter_node.fat_tree` (or
`nodes_per_leaf` + `oversubscription`, one tier) under `flow_sharing: fair` makes each
switch's uplinks a link the transfers climbing through it share (`cost.fabric`,
`lower.fabric`, `engine.core`). Closed forms: two flows on one uplink each get half; a 2:1
leaf with every node sending out gets exactly half its line rate; flows inside a leaf are
not slowed; a second tier's oversubscription multiplies; and dropping the uplinks from the
plan (a mutation) breaks the first three."""

from __future__ import annotations

import dataclasses
import json

import pytest

from simulator.config.hardware import load_profile
from simulator.config.hardware.schema import FabricTier
from simulator.cost.collectives import collective_time_s
from simulator.cost.fabric import fabric
from simulator.cost.links import fabric_share
from simulator.cost.specs import GroupSpec
from simulator.engine.core import run
from simulator.engine.tasks import Plan, Task
from simulator.engine.trace import Trace
from simulator.lower.fabric import routes_for
from simulator.lower.layout import RankMesh
from simulator.lower.nics import nic_fields
from simulator.report.critical import pace
from simulator.sharding.mesh import Mesh

NBYTES = 1 << 28


def _tier(**kw) -> FabricTier:
    return FabricTier(**kw)


def _fair(tree: tuple, **inter):
    hw = load_profile("a100-80gb")
    update = {"flow_sharing": "fair", "fat_tree": tree, **inter}
    return hw.model_copy(update={"inter_node": hw.inter_node.model_copy(update=update)})


def _dp_plan(hw, nodes: int, members: tuple[int, ...], group_nodes: int | None = None
             ) -> tuple[Plan, float]:
    """One device a node on `nodes` nodes, full fidelity; each device of `members` runs one
    all-reduce over its data-parallel group (`group_nodes` consecutive nodes, default all),
    all at once. Returns the plan and the all-reduce's time on a non-blocking fabric."""
    per = group_nodes or nodes
    ranks = RankMesh(Mesh.of(pp=1, dp=nodes // per, ep=per, tp=1), 1, 1, "ep")
    group = ranks.groups()["ep"]
    routes = routes_for(hw, ranks, "full")
    assert routes is not None
    seconds = collective_time_s("all_reduce", NBYTES, group, hw)
    tasks = tuple(Task(i, d, "dp", "grad_bucket", "comm", -1, 0, seconds, link="nic",
                       route=routes.collective(d, "ep", "all_reduce", NBYTES, group))
                  for i, d in enumerate(members))
    devices = tuple(members)
    plan = Plan(tasks=tasks, streams=tuple((d, "dp", (i,)) for i, d in enumerate(devices)),
                devices=devices, represents=(1,) * len(devices), stage_of=(0,) * len(devices),
                static_memory=((),) * len(devices), total_devices=nodes, micro_batches=1,
                link_sharing="fair", **nic_fields(hw, ranks, devices, "full"),
                **routes.fields())
    flat = _fair(None)
    return plan, collective_time_s("all_reduce", NBYTES, group, flat)


def _uplinks_dropped(plan: Plan) -> Plan:
    """The mutation: the same plan with every route's uplinks taken out."""
    return dataclasses.replace(plan, routes=tuple((f, ()) for f, _ in plan.routes))


def test_two_flows_on_one_uplink_each_get_half():
    """Two devices on their own NICs whose transfers (1 s alone) climb through one uplink
    that carries one of them at full rate: both end at 2 s, the second charged to the
    leaf; without the uplink (the mutation) both end at 1 s."""
    tasks = tuple(Task(i, i, "dp", "grad_bucket", "comm", -1, 0, 1.0, link="nic", route=0)
                  for i in range(2))
    plan = Plan(tasks=tasks, streams=((0, "dp", (0,)), (1, "dp", (1,))), devices=(0, 1),
                represents=(1, 1), stage_of=(0, 0), static_memory=((), ()),
                total_devices=2, micro_batches=1, link_sharing="fair",
                nic_of=(0, 1), nic_weight=(1, 1), nic_priced=(1.0, 1.0),
                nic_slots=((0, 1.0), (1, 1.0)), routes=((1.0, ((0, 1),)),),
                uplinks=((1.0, "leaf"),))
    trace = run(plan)
    assert trace.end == (2.0, 2.0)
    assert trace.stalls == ((0, (("leaf", 1.0),)), (1, (("leaf", 1.0),)))
    assert run(_uplinks_dropped(plan)).end == (1.0, 1.0)


def test_a_2_to_1_leaf_with_every_node_sending_out_gets_half_its_line_rate():
    """8 nodes, leaves of 4 at 2:1, one all-reduce over all 8 from every node: each leaf's
    uplinks carry 4 x 1/2 of what its nodes send, so every transfer runs at exactly half
    its rate on a non-blocking fabric (the engine stretches the whole transfer, its step
    latencies too, where the cost model's `fabric_share` halves its bandwidth alone)."""
    hw = _fair((_tier(nodes=4, oversubscription=2.0),))
    assert fabric(hw, 1).capacity == (2.0,)  # 4 nodes x 1 NIC / 2
    plan, alone = _dp_plan(hw, 8, tuple(range(8)))
    trace = run(plan)
    assert trace.end == pytest.approx((2 * alone,) * 8, rel=1e-12)
    # the time lost against a non-blocking fabric, charged to the leaves' uplinks
    assert [kinds[0][0] for _, kinds in trace.stalls] == ["leaf"] * 8
    assert [kinds[0][1] for _, kinds in trace.stalls] == pytest.approx([alone] * 8)
    assert run(_uplinks_dropped(plan)).end == pytest.approx((alone,) * 8, rel=1e-12)


def test_fewer_senders_than_the_uplinks_carry_run_at_full_rate():
    """Two of a leaf's four nodes sending out through 2:1 uplinks (capacity 2): no
    contention, each at its rate on a non-blocking fabric (faster than the all-active
    price)."""
    plan, alone = _dp_plan(_fair((_tier(nodes=4, oversubscription=2.0),)), 8, (0, 1))
    assert run(plan).end == pytest.approx((alone, alone), rel=1e-12)


def test_flows_inside_a_leaf_are_not_slowed():
    """Groups of 4 nodes inside leaves of 4 at 4:1: no route, every transfer at its own
    time, equal to the non-blocking fabric's."""
    hw = _fair((_tier(nodes=4, oversubscription=4.0),))
    plan, alone = _dp_plan(hw, 8, tuple(range(8)), group_nodes=4)
    assert all(t.route == -1 for t in plan.tasks)
    assert run(plan).end == pytest.approx((alone,) * 8, rel=1e-12)


def test_a_second_tier_multiplies_and_is_named():
    """Leaves of 2 nodes at 1:1 under pods of 4 nodes at 2:1, 8 nodes: a group over all 8
    crosses both tiers and runs at 1/2, held back by the spine tier's uplinks; a group
    inside one pod crosses only the leaves and runs at full rate."""
    hw = _fair((_tier(nodes=2), _tier(nodes=4, oversubscription=2.0)))
    plan, alone = _dp_plan(hw, 8, tuple(range(8)))
    trace = run(plan)
    assert trace.end == pytest.approx((2 * alone,) * 8, rel=1e-12)
    assert {k for _, kinds in trace.stalls for k, _s in kinds} == {"spine"}
    pod, alone4 = _dp_plan(hw, 8, tuple(range(8)), group_nodes=4)
    assert run(pod).end == pytest.approx((alone4,) * 8, rel=1e-12)
    assert fabric_share(GroupSpec(8, 1, 1), hw) == 0.5
    assert fabric_share(GroupSpec(4, 1, 1), hw) == 1.0
    three = _fair((_tier(nodes=2, oversubscription=2.0), _tier(nodes=4, oversubscription=3.0)))
    assert fabric_share(GroupSpec(8, 1, 1), three) == 1 / 6
    assert fabric_share(GroupSpec(4, 1, 1), three) == 0.5


def test_a_pipeline_send_holds_its_receivers_downlink():
    """Sends from two leaves into a third at 1:1 (leaves of 1 node): the receiving leaf's
    downlink carries one at a time, so both take twice as long; into two leaves, not."""
    hw = _fair((_tier(nodes=1),))
    ranks = RankMesh(Mesh.of(pp=3, dp=1, tp=1), 1, 1, None)
    routes = routes_for(hw, ranks, "full")
    assert routes is not None
    r0, r1, back = routes.send(0, 2), routes.send(1, 2), routes.send(1, 0)
    tasks = (Task(0, 0, "pp_fwd", "send_fwd", "comm", 0, 0, 1.0, link="nic", route=r0),
             Task(1, 1, "pp_fwd", "send_fwd", "comm", 0, 1, 1.0, link="nic", route=r1))
    plan = Plan(tasks=tasks, streams=((0, "pp_fwd", (0,)), (1, "pp_fwd", (1,))),
                devices=(0, 1), represents=(1, 1), stage_of=(0, 1),
                static_memory=((), ()), total_devices=3, micro_batches=1,
                link_sharing="fair", **nic_fields(hw, ranks, (0, 1), "full"),
                **routes.fields())
    assert run(plan).end == (2.0, 2.0)
    apart = dataclasses.replace(plan, tasks=(tasks[0], tasks[1]._replace(route=back)))
    assert run(apart).end == (1.0, 1.0)


def test_the_critical_path_names_the_tier_that_cost_time():
    tasks = (Task(0, 0, "pp_fwd", "send_fwd", "comm", 0, 0, 1.0, link="nic", route=0),
             Task(1, 1, "dp", "grad_bucket", "comm", -1, 0, 1.0, link="nic", route=0),
             Task(2, 2, "compute", "F", "fwd", 0, 1, 1.0, deps=(0,)))
    plan = Plan(tasks=tasks, streams=tuple((t.device, t.stream, (t.tid,)) for t in tasks),
                devices=(0, 1, 2), represents=(1, 1, 1), stage_of=(0, 0, 1),
                static_memory=((), (), ()), total_devices=3, micro_batches=1,
                link_sharing="fair", routes=((1.0, ((0, 1),)),), uplinks=((1.0, "spine"),))
    p = pace(plan, run(plan))
    assert p.length_s == 3.0 and p.contention_s == 1.0
    assert p.contention_by_link == (("spine", 1.0),)
    assert isinstance(run(plan), Trace)


def test_the_old_keys_are_a_one_tier_tree(invoke_cli):
    def go(*sets: str) -> dict:
        args = ["run", "llama2-70b-64-h100", "--json", "--set",
                "hardware.inter_node.flow_sharing=fair"]
        for s in sets:
            args += ["--set", s]
        res = invoke_cli(*args)
        assert res.exit_code == 0, res.output
        return json.loads(res.stdout)

    old = go("hardware.inter_node.nodes_per_leaf=1", "hardware.inter_node.oversubscription=7.0")
    new = go("hardware.inter_node.fat_tree=[{nodes: 1, oversubscription: 7.0}]")
    base = go()
    for key in ("iteration_time_s", "breakdown_s", "critical_path", "communication"):
        assert old[key] == new[key]
    assert old["iteration_time_s"] > base["iteration_time_s"]
    assert set(old["critical_path"]["contention_on_path_by_link_s"]) <= {"leaf", "nic"}
    assert "leaf" in old["critical_path"]["contention_on_path_by_link_s"]


@pytest.mark.parametrize("value, message", [
    ("[{nodes: 32}, {nodes: 48}]",
     "inter_node.fat_tree: found a list; Value error, fat_tree[1] joins 48 nodes, "
     "fat_tree[0] 32: each tier must join a whole multiple (> 1) of the nodes of the tier "
     "below it"),
    ("[{nodes: 32, oversubscription: 0.5}]",
     "inter_node.fat_tree[0].oversubscription: found 0.5; expected a value from 1 to 64"),
    ("[{nodes: 32, ratio: 2}]",
     "inter_node.fat_tree[0].ratio: unknown key; allowed: name, nodes, oversubscription"),
])
def test_a_bad_tree_is_refused_by_its_key_path(invoke_cli, value, message):
    res = invoke_cli("run", "tiny-cpu", "--set", "hardware=a100-80gb", "--set",
                     f"hardware.inter_node.fat_tree={value}")
    assert res.exit_code == 2
    assert message in res.stderr
    assert "Traceback" not in res.stderr


def test_the_old_keys_set_the_leaf_tier_of_a_stated_tree(invoke_cli):
    """h100-sxm states leaves of 32 nodes at 1:1 (DGX SuperPOD H100 RA): a what-if on the
    old keys changes that tier, and the tiers above must still nest."""
    hw = load_profile("h100-sxm", ["inter_node.nodes_per_leaf=4",
                                   "inter_node.oversubscription=2.0"])
    assert hw.inter_node.tiers == (FabricTier(nodes=4, oversubscription=2.0),)
    assert load_profile("h100-sxm", ["inter_node.oversubscription=3.0"]).inter_node.tiers \
        == (FabricTier(nodes=32, oversubscription=3.0),)
    res = invoke_cli("run", "tiny-cpu", "--set", "hardware=a100-80gb", "--set",
                     "hardware.inter_node.fat_tree=[{nodes: 4}, {nodes: 16}]", "--set",
                     "hardware.inter_node.nodes_per_leaf=3")
    assert res.exit_code == 2
    assert ("inter_node: found a mapping; Value error, nodes_per_leaf 3 must divide "
            "fat_tree[1]'s 16 nodes (and be fewer)") in res.stderr


def _small(invoke_cli, tmp_path, fidelity: str, *sets: str) -> dict:
    path = tmp_path / "dp.json"
    path.write_text(json.dumps({
        "name": "tp8 dp2 pp2 on 4 nodes", "hardware": "a100-80gb",
        "cluster": {"nodes": 4, "devices_per_node": 8},
        "model": {"type": "transformer", "layers": 4, "hidden_size": 1024, "num_heads": 16,
                  "seq_length": 1024, "vocab_size": 32000, "dtype": "bf16"},
        "training": {"global_batch_size": 8, "micro_batch_size": 1, "optimizer": "adam"},
        "parallel": {"tensor": 8, "data": 2, "pipeline": 2}}))
    args = ["run", str(path), "--json", "--fidelity", fidelity,
            "--set", "hardware.inter_node.flow_sharing=fair"]
    for item in sets:
        args += ["--set", item]
    result = invoke_cli(*args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_both_fidelities_share_the_uplinks_alike(invoke_cli, tmp_path):
    """tp 8 x dp 2 x pp 2 on 4 nodes, leaves of one node at 2:1: every data-parallel
    reduction and every pipeline send leaves its leaf. A simulated device standing for its
    stage's 16 devices (representative) gives the times of all 32 simulated (full), and
    the uplinks cost time, charged to the leaves."""
    tree = "hardware.inter_node.fat_tree=[{nodes: 1, oversubscription: 2.0}]"
    rep = _small(invoke_cli, tmp_path, "representative", tree)
    full = _small(invoke_cli, tmp_path, "full", tree)
    flat = _small(invoke_cli, tmp_path, "representative")
    assert rep["iteration_time_s"] == pytest.approx(full["iteration_time_s"], rel=1e-9)
    assert rep["iteration_time_s"] > flat["iteration_time_s"]
    assert "leaf" in rep["critical_path"]["contention_on_path_by_link_s"]
