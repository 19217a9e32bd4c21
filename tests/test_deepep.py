"""DeepEP's expert all-to-all (`parallel.expert_dispatcher: deepep`, simulator/cost/deepep.py,
simulator/program/deepep.py): once-a-node sends in closed form, node-limited routing, FP8
dispatch bytes, and the refusal by name."""

from __future__ import annotations

from math import comb

import pytest

from simulator.api import load_hardware, load_scenario
from simulator.config.framework.load import framework_for
from simulator.config.hardware import load_profile
from simulator.cost.collectives import collective_time_s
from simulator.cost.deepep import remote_nodes, remote_share
from simulator.cost.links import group_network_bandwidth, intra_bus_bandwidth
from simulator.cost.specs import CommSpec, GroupSpec
from simulator.errors import InputError
from simulator.program.deepep import FP8_DISPATCH_FACTOR
from simulator.simulation.simulate import run_program
from tests.test_recompute_modules import DS


def test_remote_nodes_closed_forms():
    # unlimited: 8 of 256 experts over 2 nodes; the other node is used unless all 8 are ours
    assert remote_nodes(256, 8, 2) == pytest.approx(1 - comb(128, 8) / comb(256, 8))
    # DeepSeek-V3: 8 nodes, at most 4 (one group a node): 7 x 4/8 x P(a chosen node used)
    p_used = 1 - comb(96, 8) / comb(128, 8)
    assert remote_nodes(256, 8, 8, 8, 4) == pytest.approx(7 * 0.5 * p_used)
    assert remote_share(256, 8, 8, 8, 4) == pytest.approx(7 * 0.5 * p_used / 8)
    # node-limited routing sends fewer copies across nodes than unlimited, and far fewer
    # than a pairwise exchange's (n - m) / n = 7/8 of the buffer
    assert remote_share(256, 8, 8, 8, 4) < remote_share(256, 8, 8) < 7 / 8
    assert remote_nodes(256, 8, 1) == 0.0


def test_once_a_node_all_to_all_time():
    """max(share x S / NIC share, (m-1)/m x S / NVLink) + (nodes - 1) x alpha_net: the
    network carries a token once a node, NVLink forwards every copy not already on its GPU."""
    hw = load_profile("h800-sxm")
    s = 4096 * 8 * 7168.0
    share = remote_share(256, 8, 8, 8, 4)
    group = GroupSpec(64, 1, 8, share)
    nic = group_network_bandwidth(group, hw) / 8
    want = max(share * s / nic, 7 / 8 * s / intra_bus_bandwidth(hw, 8)) \
        + 7 * hw.inter_link_latency_s
    assert collective_time_s("all_to_all", s, group, hw) == pytest.approx(want, rel=1e-12)
    # mutation: without the share it is the pairwise exchange, slower across 8 nodes
    assert collective_time_s("all_to_all", s, GroupSpec(64, 1, 8), hw) > 1.5 * want


EP = DS | {"cluster": {"nodes": 2, "devices_per_node": 8},
           "training": {"global_batch_size": 16, "micro_batch_size": 1},
           "parallel": {"data": 16, "expert": 8}}


def _a2a(*sets: str) -> dict[str, float]:
    loaded = load_scenario(EP, list(sets))
    sc, hw = loaded.scenario, load_hardware(loaded)
    layer = run_program(sc, hw, framework_for(sc, hw)).program.block("layer1")
    return {f"{op.phase}:{op.name}": op.bytes for op in layer.fwd + layer.bwd
            if isinstance(op, CommSpec) and op.collective == "all_to_all"}


def test_fp8_dispatch_halves_the_dispatches_only():
    """Under an FP8 recipe DeepEP dispatches FP8 with a scale a 128 channels (forward
    dispatch, backward dispatch of the combine's gradient); the combines stay BF16."""
    plain, deepep = _a2a(), _a2a("parallel.expert_dispatcher=deepep")
    assert plain.keys() == deepep.keys() and len(plain) == 4
    for name, nbytes in plain.items():
        into_experts = name.endswith((".efc1.all_to_all", ".efc2.all_to_all"))
        assert deepep[name] == nbytes * (FP8_DISPATCH_FACTOR if into_experts else 1.0)
    # a bf16 model keeps every all-to-all in BF16
    assert _a2a("model.dtype=bf16", "parallel.expert_dispatcher=deepep") == \
        _a2a("model.dtype=bf16")


def test_deepep_needs_expert_parallel_ranks():
    with pytest.raises(InputError) as err:
        load_scenario(DS, ["parallel.expert_dispatcher=deepep"])
    assert err.value.key == "parallel.expert_dispatcher"
    assert err.value.message == (
        "deepep moves the tokens of a mixture of experts between expert-parallel ranks; it "
        "needs model.moe and parallel.expert above 1 (found expert 1; allowed here: alltoall)")
