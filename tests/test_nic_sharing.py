"""A node's NICs shared by its devices as the profile says (`inter_node.nics_per_node`,
`inter_node.rail_optimized`, under `flow_sharing: fair`; issue 26): the engine shares a NIC
between the transfers of the devices that use it. Closed forms on hand-written plans (two
devices on one NIC each get half; rail-optimised, devices on other rails never slow each
other; a pooled node carries as many transfers as it has NICs), the resources and weights
the lowering gives, and runs where every device transfers at once priced as before, with
`representative` and `full` fidelity equal."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from simulator.config.hardware import load_profile
from simulator.cost.links import nic_sharing
from simulator.engine.core import run
from simulator.engine.tasks import Plan, Task
from simulator.lower.layout import RankMesh
from simulator.lower.nics import nic_fields
from simulator.sharding.mesh import Mesh

T = 1.0  # seconds of a transfer alone on its NIC


def _hw(nics: int, rail: bool, fair: bool = True):
    hw = load_profile("a100-80gb")  # 8 GPUs a node
    inter = hw.inter_node.model_copy(update={
        "nics_per_node": nics, "rail_optimized": rail,
        "flow_sharing": "fair" if fair else "fifo"})
    return hw.model_copy(update={"inter_node": inter})


def _plan(devices: tuple[int, ...], share, priced: float = 1.0,
          weight: int = 1) -> Plan:
    """One transfer of T on the NIC of each of `devices` (local ranks of one node), all at
    once, on the resources `share` gives them."""
    tasks = tuple(Task(i, d, "dp", "grad_bucket", "comm", -1, 0, T * priced, link="nic")
                  for i, d in enumerate(devices))
    used = sorted({share.resource(d) for d in devices})
    return Plan(tasks=tasks, streams=tuple((d, "dp", (i,)) for i, d in enumerate(devices)),
                devices=devices, represents=(1,) * len(devices),
                stage_of=(0,) * len(devices), static_memory=((),) * len(devices),
                total_devices=8, micro_batches=1, link_sharing="fair",
                nic_of=tuple(share.resource(d) for d in devices),
                nic_weight=(weight,) * len(devices), nic_priced=(priced,) * len(devices),
                nic_slots=tuple((r, share.slots) for r in used))


def test_two_devices_on_one_nic_each_get_half():
    share = replace(nic_sharing(_hw(4, rail=True), 8), priced=1.0)
    assert share.resource(0) == share.resource(1) == 0  # 8 GPUs, 4 NICs: two on each
    both = run(_plan((0, 1), share))
    assert both.end == (2 * T, 2 * T)
    alone = run(_plan((0,), share))
    assert alone.end == (T,)


def test_rail_optimised_devices_on_other_rails_do_not_contend():
    share = replace(nic_sharing(_hw(4, rail=True), 8), priced=1.0)
    assert [share.resource(d) for d in range(8)] == [0, 0, 1, 1, 2, 2, 3, 3]
    # one device on each of the four rails: each at the full rate of its own NIC
    assert run(_plan((0, 2, 4, 6), share)).end == (T,) * 4
    # two on rail 0 share it; the one on rail 1 does not notice
    assert run(_plan((0, 1, 2), share)).end == (2 * T, 2 * T, T)


def test_a_pooled_node_carries_as_many_transfers_as_it_has_nics():
    share = replace(nic_sharing(_hw(4, rail=False), 8), priced=1.0)
    assert {share.resource(d) for d in range(8)} == {0} and share.slots == 4
    assert run(_plan((0, 1), share)).end == (T, T)  # two of four NICs' worth
    six = run(_plan((0, 1, 2, 3, 4, 5), share)).end
    assert six == pytest.approx((6 * T / 4,) * 6)


def test_a_transfer_priced_at_the_all_active_share_ends_as_priced_when_all_are_active():
    """The cost model prices a transfer at the node's NICs split over all its devices (8
    GPUs on 4 NICs: half a NIC, twice as long as alone); a representative device standing
    for both devices of its NIC (weight 2) ends at that priced time, one alone at half."""
    share = nic_sharing(_hw(4, rail=True), 8)
    assert share.priced == 2.0
    assert run(_plan((0,), share, priced=2.0, weight=2)).end == (2 * T,)
    assert run(_plan((0,), share, priced=2.0, weight=1)).end == (T,)


def test_same_local_rank_across_nodes_uses_each_node_s_own_rail_nic():
    # 2 nodes of 8, 4 NICs each, a pipeline of 16 stages of one device (full fidelity)
    ranks = RankMesh(Mesh.of(pp=16, dp=1, tp=1), 1, 8, None, False)
    devices = tuple(range(16))
    f = nic_fields(_hw(4, rail=True), ranks, devices, "full")
    # local rank 0 of node 0 and node 1: rail 0 of each node, two different NICs
    assert f["nic_of"][0] != f["nic_of"][8]
    assert f["nic_of"][0] == f["nic_of"][1] and f["nic_of"][2] != f["nic_of"][0]
    assert f["nic_weight"] == (1,) * 16 and set(f["nic_priced"]) == {2.0}
    rep = nic_fields(_hw(4, rail=True), RankMesh(Mesh.of(pp=4, dp=1, tp=4), 1, 8, None,
                                                  False), (0, 4, 8, 12), "representative")
    # a stage of 4 devices, two on each of two NICs: the simulated device stands for 2
    assert rep["nic_weight"] == (2, 2, 2, 2)
    assert nic_fields(_hw(4, rail=True, fair=False), ranks, devices, "full") == {}


def _run(invoke_cli, tmp_path, fidelity: str, *sets: str) -> dict:
    path = tmp_path / "pp.json"
    path.write_text(json.dumps({
        "name": "tp2 pp8 on 2 nodes", "hardware": "a100-80gb",
        "cluster": {"nodes": 2, "devices_per_node": 8},
        "model": {"type": "transformer", "layers": 8, "hidden_size": 1024, "num_heads": 16,
                  "seq_length": 1024, "vocab_size": 32000, "dtype": "bf16"},
        "training": {"global_batch_size": 8, "micro_batch_size": 1, "optimizer": "adam"},
        "parallel": {"tensor": 2, "pipeline": 8}}))
    args = ["run", str(path), "--json", "--fidelity", fidelity,
            "--set", "hardware.inter_node.nics_per_node=2"]
    for item in sets:
        args += ["--set", item]
    result = invoke_cli(*args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_runs_share_nics_alike_at_both_fidelities(invoke_cli, tmp_path):
    """tp 2 x pp 8 on 2 nodes of 8 with 2 NICs: stage 3's two devices alone send across
    nodes, so on a rail NIC (shared with stage 2's, which send inside the node) they get
    half a NIC each, in a pool a NIC each, where the all-active share priced a quarter."""
    fair = "hardware.inter_node.flow_sharing=fair"
    times = {}
    for rail in ("true", "false"):
        sets = (fair, f"hardware.inter_node.rail_optimized={rail}")
        rep = _run(invoke_cli, tmp_path, "representative", *sets)["iteration_time_s"]
        full = _run(invoke_cli, tmp_path, "full", *sets)["iteration_time_s"]
        assert rep == pytest.approx(full, rel=1e-12)
        times[rail] = rep
    fifo = _run(invoke_cli, tmp_path, "representative")["iteration_time_s"]
    assert times["false"] < times["true"] < fifo
