"""The h800-sxm profile (DeepSeek-V3's H800: an H100 with 400 GB/s NVLink) and the NVL72
racks (gb200-nvl72, gb300-nvl72) as one NVLink domain of 72 GPUs, each GPU with its own NIC
to the scale-out network."""

from __future__ import annotations

import pytest

from simulator.api.tools import comm
from simulator.config.hardware import load_profile
from simulator.cost.collectives import comm_benchmark
from simulator.cost.links import intra_bus_bandwidth, nic_share_bandwidth

GIB = 1 << 30
H100, H800 = load_profile("h100-sxm"), load_profile("h800-sxm")


def test_h800_is_an_h100_with_400_gbps_nvlink():
    """Zhao et al. 2025 (arXiv 2505.09343): NVLink "reduced from 900 GB/s to 400 GB/s", the
    rest of the GH100 unchanged; DeepSeek-V3 report Sec. 3.2.2: NVLink reaches 160 GB/s."""
    assert H800.intra_node.bandwidth_GBps == 200
    assert intra_bus_bandwidth(H800) == pytest.approx(160e9)
    for dtype in ("bf16", "fp8"):
        assert H800.peak_flops_per_s(dtype) == H100.peak_flops_per_s(dtype)
    # 8 x 400 Gb/s IB, "IB (50 GB/s)"; the DGX SuperPOD's leaves of 32 nodes are not
    # DeepSeek's Multi-Plane Fat-Tree, which the h800 profile states no tree for
    assert H800.inter_node == H100.inter_node.model_copy(update={"fat_tree": None})
    assert not H800.has_dtype("fp4")


def test_h800_nvlink_collectives_are_slower_by_the_bandwidth_ratio():
    """A 1 GiB ring all_gather in one node is bandwidth-bound: its time scales with the
    effective NVLink bandwidth, 0.816 x 450 on H100 against 160 GB/s on H800."""
    t = {hw.name: comm_benchmark("all_gather", GIB, 8, 8, hw, "ring")["time_s"]
         for hw in (H100, H800)}
    assert t["h800-sxm"] / t["h100-sxm"] == pytest.approx(0.816 * 450 / 160, rel=0.02)


@pytest.mark.parametrize("rack", ["gb200-nvl72", "gb300-nvl72"])
def test_a_rack_is_one_nvlink_domain_of_72(rack: str):
    hw = load_profile(rack)
    assert hw.devices_per_node_default == 72
    assert hw.inter_node.nics_per_node == 72  # one NIC per GPU




@pytest.mark.parametrize("rack", ["gb200-nvl72", "gb300-nvl72"])
def test_all_reduce_over_one_rack_is_on_nvlink_over_two_racks_on_the_network(rack: str):
    """72 GPUs of one NVL72 rack reduce over NVLink alone (the NIC's speed does not
    matter); 144 over two racks cross the network. With 72 NICs a rack's exit (72 x 400 Gb/s)
    is faster than a GPU's NVLink, so the NICs are slowed 16x to make the network bind."""
    hw = load_profile(rack)
    slow = hw.model_copy(update={"inter_node": hw.inter_node.model_copy(
        update={"nic_bandwidth_Gbps": hw.inter_node.nic_bandwidth_Gbps / 16})})
    one = [comm_benchmark("all_reduce", GIB, 72, 72, h)["time_s"] for h in (hw, slow)]
    two = [comm_benchmark("all_reduce", GIB, 144, 72, h)["time_s"] for h in (hw, slow)]
    assert one[0] == one[1]
    assert two[1] > two[0] * 1.2
    assert comm("all_reduce", GIB, 72, rack)["algorithm"] == "nvls"  # NVLink SHARP
    assert comm("all_reduce", GIB, 72, rack)["devices_per_node"] == 72  # the rack by default


def test_a_gpu_never_owns_more_nics_than_the_rack_gives_it():
    """A scenario node smaller than the rack (a 4-GPU tray as `devices_per_node: 4`) must not
    share the rack's 72 NICs among its 4 GPUs: each keeps its own one."""
    hw = load_profile("gb200-nvl72")
    one_nic = hw.nic_bandwidth_bytes_per_s
    assert nic_share_bandwidth(hw, 72) == one_nic
    assert nic_share_bandwidth(hw, 4) == one_nic
    # and an 8-GPU node with 8 NICs is unchanged: one each, or half one when 16 share them
    assert nic_share_bandwidth(H100, 8) == H100.nic_bandwidth_bytes_per_s
    assert nic_share_bandwidth(H100, 16) == H100.nic_bandwidth_bytes_per_s / 2


def test_gb200_capacity_is_what_nvidia_smi_reports_and_the_405b_run_that_ran_fits():
    """A GB200 of an NVL72 tray reports 189471 MiB (NVIDIA/k8s-test-infra qx-gb200.xml, an
    `nvidia-smi -q -x` capture), as the H100 profile takes its 81559 MiB; Megatron-Bridge's
    25.11 Llama-3.1-405B run on 256 GB200 (TP 4 / PP 16 / VP 4, no recompute: the recipe sets
    none and Megatron-Core refuses activation offload with PP > 1) ran, so it fits; with bf16
    copies of its FP8 weights (`training.fp8_params` false, which the recipe does not do) it
    fits in nvidia-smi's capacity and would not in the rack's marketing 13.4 TB / 72 = 186 GB."""
    from simulator import load_scenario, simulate
    from simulator.report import summary

    gb200 = load_profile("gb200-nvl72")
    assert gb200.memory_GB * 1e9 == pytest.approx(189471 * 2**20, rel=1e-5)
    assert H100.memory_GB * 1e9 == pytest.approx(81559 * 2**20, rel=1e-5)
    case = "scenarios/validation/bridge2511-gb200-llama31-405b-256g.yaml"
    ran = simulate(load_scenario(case))
    assert ran.scenario.parallel.recompute == "none" and summary(ran)["memory"]["fits"]
    bf16_weights = ["training.fp8_params=false"]
    assert summary(simulate(load_scenario(case, bf16_weights)))["memory"]["fits"]
    at_186 = simulate(load_scenario(case, [*bf16_weights, "hardware.memory_GB=186"]))
    assert not summary(at_186)["memory"]["fits"]
