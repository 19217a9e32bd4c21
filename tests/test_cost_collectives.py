"""Collectives: closed forms (ring, NVLS, NVLS-tree), published nccl-tests figures, NCCL's
choice as the minimum of the one pricing function, NIC sharing, and the relations any
alpha-beta model obeys."""

from __future__ import annotations

import pytest

from simulator.config.hardware import load_profile
from simulator.config.resources import list_bundled
from simulator.cost.collectives import (
    busbw_factor,
    candidate_algorithms,
    collective_choice,
    collective_cost,
    collective_time_s,
    comm_benchmark,
    intra_bus_bandwidth,
    link_kind,
    send_recv_time_s,
)
from simulator.cost.specs import COLLECTIVES, GroupSpec
from simulator.errors import InputError

GiB = 1 << 30


@pytest.fixture(scope="module")
def a100():
    return load_profile("a100-80gb")


@pytest.fixture(scope="module")
def a100_nccl(a100):
    """a100-80gb without its measured NVLink curve: NCCL's tuning model alone."""
    intra = a100.intra_node.model_copy(update={"allreduce_busbw_GBps": None})
    return a100.model_copy(update={"intra_node": intra})


@pytest.fixture(scope="module")
def a100_alpha_beta(a100_nccl):
    """...and without its NCCL block: the profile's own step latencies (alpha-beta)."""
    return a100_nccl.model_copy(update={"nccl": None})


@pytest.mark.parametrize("n", [2, 4, 8])
def test_ring_all_reduce_in_one_node_is_the_closed_form(a100_alpha_beta, n):
    """2(n-1)/n * S/B + 2(n-1) * alpha, B = 300 GB/s x intra_node_bus_fraction."""
    hw, size = a100_alpha_beta, 256e6
    bw = 300e9 * hw.efficiency.intra_node_bus_fraction
    alpha = hw.intra_node.latency_us * 1e-6
    expected = 2 * (n - 1) / n * size / bw + 2 * (n - 1) * alpha
    group = GroupSpec(size=n, stride=1, devices_per_node=8)
    assert collective_time_s("all_reduce", size, group, hw, "ring") == pytest.approx(
        expected, rel=1e-12)
    assert intra_bus_bandwidth(hw) == bw


@pytest.mark.parametrize("n", [2, 4, 8])
def test_ring_all_reduce_under_nccl_is_its_tuning_model(a100_nccl, n):
    """NCCL's ring Simple (tuning.cc v2.30.7): baseLatency 8.4 us + 2(n-1) NVLink steps of
    3.4 us, plus 2(n-1)/n * S/B."""
    hw, size = a100_nccl, 256e6
    bw = 300e9 * hw.efficiency.intra_node_bus_fraction
    expected = 2 * (n - 1) / n * size / bw + 8.4e-6 + 2 * (n - 1) * 3.4e-6
    group = GroupSpec(size=n, stride=1, devices_per_node=8)
    assert collective_time_s("all_reduce", size, group, hw, "ring", "simple") == pytest.approx(
        expected, rel=1e-12)


def test_ll_protocol_latency_at_small_sizes_is_the_tuning_formula():
    """Ring LL on 8 H100 (tuning.cc v2.30.7): baseLatencies[Ring][LL] 6.6 us + 14 steps of
    hwLatencies[NVLINK][Ring][LL] 0.6 us; bandwidth half the bus bandwidth, at most
    llMaxBws[Hopper][1 node] 141 GB/s."""
    hw = load_profile("h100-sxm")
    group, size = GroupSpec(8, 1, 8), 1024
    bw = min(0.5 * 450e9 * 0.816, 141e9)
    expected = 6.6e-6 + 14 * 0.6e-6 + 7 / 4 * size / bw
    assert collective_time_s("all_reduce", size, group, hw, "ring", "ll") == pytest.approx(
        expected, rel=1e-12)
    # LL128: 14 us + 14 x 1.9 us, 0.92 of the bus bandwidth
    ll128 = 14e-6 + 14 * 1.9e-6 + 7 / 4 * size / (0.92 * 450e9 * 0.816)
    assert collective_time_s("all_reduce", size, group, hw, "ring", "ll128") == pytest.approx(
        ll128, rel=1e-12)
    assert collective_choice("all_reduce", size, group, hw).protocol == "ll"


def test_ll_ceiling_is_the_measured_ll_bandwidth():
    """4 H100, 256 MiB, NCCL_PROTO=LL: busbw 146.9 GB/s measured (waynehacking8/nccl-
    collectives-bench results/proto_sweep.txt); NCCL's llMaxBw for Hopper in a node: 141."""
    res = collective_choice("all_reduce", 2**28, GroupSpec(4, 1, 8), load_profile("h100-sxm"),
                            "ring", "ll")
    assert busbw_factor("all_reduce", 4) * 2**28 / res.time_s / 1e9 == pytest.approx(
        146.9, rel=0.05)


def test_nccl_picks_ll_then_ll128_then_simple_as_the_size_grows():
    """The protocol of least latency + bytes / bandwidth: LL for small buffers, LL128 in the
    middle, Simple for large ones (ring on 4 H100, the algorithm NCCL runs there)."""
    hw, group = load_profile("h100-sxm"), GroupSpec(4, 1, 8)
    picked = [collective_choice("all_reduce", s, group, hw, "ring").protocol
              for s in (2**16, 2**23, 2**28)]
    assert picked == ["ll", "ll128", "simple"]


def test_ring_all_gather_closed_form(a100_alpha_beta):
    hw = a100_alpha_beta
    group = GroupSpec(size=4, stride=2, devices_per_node=8)
    expected = 3 / 4 * 1e9 / intra_bus_bandwidth(hw) + 3 * hw.intra_link_latency_s
    assert collective_time_s("all_gather", 1e9, group, hw, "ring") == pytest.approx(expected)


def test_measured_curve_prices_every_algorithm_inside_a_node(a100):
    """The A100 curve is what NCCL achieves whatever it picks: ring asked or auto, same time."""
    group = GroupSpec(size=8, stride=1, devices_per_node=8)
    auto = collective_time_s("all_reduce", 64 * 2**20, group, a100)
    assert auto == pytest.approx(684.6e-6, rel=0.01)
    for algorithm in ("ring", "tree", "hierarchical"):
        assert collective_time_s("all_reduce", 64 * 2**20, group, a100, algorithm) == auto


@pytest.mark.parametrize("collective", COLLECTIVES)
@pytest.mark.parametrize("size,stride", [(8, 1), (64, 1), (16, 8)])
def test_time_grows_monotonically_with_bytes(a100, collective, size, stride):
    group = GroupSpec(size=size, stride=stride, devices_per_node=8)
    times = [collective_time_s(collective, float(b), group, a100)
             for b in (2**p for p in range(10, 36, 2))]
    # Non-decreasing: inside an A100 node the time comes from nccl-tests, which is flat
    # (latency-bound) from 1 to 4 MiB; over the whole range it grows.
    assert all(later >= earlier for earlier, later in zip(times, times[1:]))
    assert times[-1] > 100 * times[0]


@pytest.mark.parametrize("collective", COLLECTIVES)
def test_one_device_or_no_bytes_cost_nothing(a100, collective):
    assert collective_time_s(collective, 1e9, GroupSpec(1, 1, 8), a100) == 0.0
    assert collective_time_s(collective, 0, GroupSpec(8, 1, 8), a100) == 0.0


def test_crossing_nodes_is_slower_than_staying_in_one(a100):
    inside = GroupSpec(size=8, stride=1, devices_per_node=8)
    across = GroupSpec(size=8, stride=8, devices_per_node=8)   # one member per node
    two_nodes = GroupSpec(size=16, stride=1, devices_per_node=8)
    assert link_kind(inside) == "intra" and link_kind(across) == "inter"
    for algorithm in ("hierarchical", "auto"):
        t_in = collective_time_s("all_reduce", GiB, inside, a100, algorithm)
        assert collective_time_s("all_reduce", GiB, across, a100, algorithm) > t_in
        assert collective_time_s("all_reduce", GiB, two_nodes, a100, algorithm) > t_in


def test_hierarchical_phases_add_up(a100_alpha_beta):
    """RS in the node (8) + ring AR of S/8 over 2 nodes on a NIC share + AG in the node."""
    a100 = a100_alpha_beta
    group = GroupSpec(size=16, stride=1, devices_per_node=8)
    b_in, a_in = intra_bus_bandwidth(a100), a100.intra_link_latency_s
    b_out = 25e9 * a100.efficiency.inter_node_bus_fraction
    a_out = a100.inter_link_latency_s
    size = 1e9
    expected = (2 * 7 / 8 * size / b_in + 2 * 7 * a_in) + (2 * 1 / 2 * size / 8 / b_out
                                                           + 2 * a_out)
    assert collective_time_s("all_reduce", size, group, a100, "hierarchical") == pytest.approx(
        expected)


def test_auto_picks_tree_for_large_scale_small_messages(a100):
    group = GroupSpec(size=1024, stride=1, devices_per_node=8)
    algorithm, t = collective_cost("all_reduce", 1e6, group, a100)
    assert algorithm == "tree"
    assert t <= collective_time_s("all_reduce", 1e6, group, a100, "ring")


def test_send_recv(a100):
    expected = 1e8 / intra_bus_bandwidth(a100) + a100.intra_link_latency_s
    assert send_recv_time_s(1e8, True, a100) == pytest.approx(expected)
    assert send_recv_time_s(1e8, False, a100) > send_recv_time_s(1e8, True, a100)


def test_comm_benchmark_keys_and_busbw(a100):
    res = comm_benchmark("all_reduce", GiB, 8, 8, a100)
    assert list(res) == ["collective", "devices", "devices_per_node", "bytes", "algorithm",
                         "time_s", "algbw_GBps", "busbw_GBps"]
    group = GroupSpec(size=8, stride=1, devices_per_node=8)
    assert res["time_s"] == collective_time_s("all_reduce", GiB, group, a100)
    assert res["algbw_GBps"] == pytest.approx(GiB / res["time_s"] / 1e9)
    assert res["busbw_GBps"] == pytest.approx(res["algbw_GBps"] * 14 / 8)
    assert busbw_factor("all_gather", 8) == 7 / 8 and busbw_factor("broadcast", 8) == 1


def test_bad_names_are_input_errors(a100):
    group = GroupSpec(8, 1, 8)
    with pytest.raises(InputError) as err:
        collective_time_s("allreduce", 1.0, group, a100)
    assert "(did you mean 'all_reduce'?)" in str(err.value)
    with pytest.raises(InputError) as err:
        collective_time_s("all_reduce", 1.0, group, a100, "rign")
    assert str(err.value) == ("algorithm: unknown algorithm 'rign' (did you mean 'ring'?); "
                              "allowed: auto, ring, tree, hierarchical, nvls, nvls_tree, pat")


def test_hccs_mesh_bandwidth_grows_with_group_size():
    """Ascend 910B full mesh: a group of m NPUs uses m-1 of 7 links. Measured all_reduce busbw
    (gameofdimension/limulidae README: algbw 18, 30, 72 GB/s on 2, 4, 8 NPUs) -> 18, 45, 126."""
    hw = load_profile("ascend-910b")
    busbw = {n: comm_benchmark("all_reduce", 2**30, n, 8, hw)["busbw_GBps"] for n in (2, 4, 8)}
    assert busbw[8] == pytest.approx(126, rel=0.05)
    assert busbw[4] == pytest.approx(45, rel=0.25)
    assert busbw[2] == pytest.approx(18, rel=0.1)


def test_nccl_busbw_plateau_of_a100_node(a100):
    """nccl-tests on 8x A100: busbw 234.89 GB/s at 16 GiB (validation/nccl_allreduce_a100.csv)."""
    res = comm_benchmark("all_reduce", 16 * GiB, 8, 8, a100)
    assert res["busbw_GBps"] == pytest.approx(234.89, rel=0.01)
    small = comm_benchmark("all_reduce", 32768, 8, 8, a100)
    assert small["time_s"] == pytest.approx(43.83e-6, rel=0.02)


# ---- one pricing function whatever the caller asks ------------------------------------------

_GROUPS = [GroupSpec(2, 1, 8), GroupSpec(8, 1, 8), GroupSpec(4, 2, 8), GroupSpec(16, 1, 8),
           GroupSpec(48, 2, 8), GroupSpec(64, 8, 8), GroupSpec(512, 1, 8), GroupSpec(144, 1, 72)]
_SIZES = [4e3, 1.5e6, 64e6, 4e9]


@pytest.mark.parametrize("name", list_bundled("hardware_profiles"))
@pytest.mark.parametrize("collective", COLLECTIVES)
def test_auto_is_the_fastest_algorithm_priced_as_if_asked_for(name, collective):
    """time(auto) == min over applicable algorithms of time(algorithm), and auto choosing X
    costs exactly what asking for X costs (also per protocol)."""
    hw = load_profile(name)
    for group in _GROUPS:
        for size in _SIZES:
            choice = collective_choice(collective, size, group, hw)
            names = candidate_algorithms(collective, group, hw)
            explicit = {a: collective_time_s(collective, size, group, hw, a) for a in names}
            assert choice.time_s == min(explicit.values())
            assert choice.time_s == explicit[choice.algorithm]
            if choice.protocol != "measured":
                assert choice.time_s == collective_time_s(
                    collective, size, group, hw, choice.algorithm, choice.protocol)


@pytest.mark.parametrize("size", [2**16, 2**22, 2**28, 2**31])
def test_all_gather_time_never_falls_back_as_the_group_grows(size):
    """Constant buffer, more H100s (issue 9: 512 devices once picked an algorithm slower
    than the ring): the chosen time grows with the group, never above the ring's."""
    hw = load_profile("h100-sxm")
    sizes = (8, 16, 32, 64, 128, 256, 512, 1024)
    times = [collective_time_s("all_gather", size, GroupSpec(n, 1, 8), hw) for n in sizes]
    assert all(later >= earlier for earlier, later in zip(times, times[1:]))
    for n, t in zip(sizes, times):
        assert t <= collective_time_s("all_gather", size, GroupSpec(n, 1, 8), hw, "ring")


def test_ring_latency_counts_network_hops_only_where_the_ring_leaves_a_node():
    """NCCL's ring latency: (steps - net_steps) NVLink hops + net_steps network hops
    (tuning.cc); 16 ranks on 2 nodes, all_gather: 15 steps, 1 of them across the network."""
    hw = load_profile("h100-sxm")
    group = GroupSpec(16, 1, 8)
    bw = min(450e9 * 0.816, 8 * 50e9 * 0.91)
    # Simple: base 8.4 us, NVLink hop max(3.4, 3 x 1 us post overhead), network hop 14 us
    expected = 15 / 16 * 1e6 / bw + 8.4e-6 + 14 * 3.4e-6 + 14e-6
    assert collective_time_s("all_gather", 1e6, group, hw, "ring", "simple") == pytest.approx(
        expected, rel=1e-12)
    # LL128: 0.92 of the bandwidth, base 14 us, NVLink hop 1.9 us, network hop 4 us
    ll128 = 15 / 16 * 1e6 / (bw * 0.92) + 14e-6 + 14 * 1.9e-6 + 4e-6
    assert collective_time_s("all_gather", 1e6, group, hw, "ring", "ll128") == pytest.approx(
        ll128, rel=1e-12)
    # all_reduce with Simple across nodes: NCCL's ring "plateau" multiplies the latency by 1.4
    ar = 2 * 15 / 16 * 1e6 / bw + 1.4 * (8.4e-6 + 28 * 3.4e-6 + 2 * 14e-6)
    assert collective_time_s("all_reduce", 1e6, group, hw, "ring", "simple") == pytest.approx(
        ar, rel=1e-12)


# ---- NVLink SHARP ------------------------------------------------------------------------------

def test_nvls_all_reduce_is_the_closed_form():
    """Each GPU sends S and receives S/n, stores S/n and receives S: (1 + 1/n) S per
    direction at nvls.efficiency of the ring's bus bandwidth, plus one NVLS latency; the
    3-stage pipeline (scatter, reduce+multicast, gather) fills with 2 loops of 16 channels x
    8 heads x a 128 KiB chunk (enqueue.cc keeps 128 KiB from 1 GiB up)."""
    hw = load_profile("h200-sxm")
    n, size = 8, 2**30
    bw = 450e9 * hw.efficiency.intra_node_bus_fraction * 0.85
    expected = (1 + 1 / n) * (size + 2 * 16 * 8 * 2**17) / bw + 25e-6
    group = GroupSpec(n, 1, 8)
    assert collective_time_s("all_reduce", size, group, hw, "nvls") == pytest.approx(expected)
    assert collective_cost("all_reduce", size, group, hw) == ("nvls", pytest.approx(expected))


@pytest.mark.parametrize("size", ["1G", "4G", "16G"])
def test_h200_all_reduce_reaches_the_nccl_tests_nvls_figure(size):
    """8 x H200 all_reduce_perf peaks at busbw 475 GB/s (nvidia/nccl-tests issue #272, NCCL
    2.20.3, -b 64k -e 4G); 8 x H100 ~480 GB/s (issue #212, NCCL maintainer). Within 10%."""
    from simulator.cli.comm import parse_bytes

    res = comm_benchmark("all_reduce", parse_bytes(size), 8, 8, load_profile("h200-sxm"))
    assert res["algorithm"] == "nvls"
    assert res["busbw_GBps"] == pytest.approx(475, rel=0.10)


def test_nvls_bus_bandwidth_grows_with_the_gpu_count_as_measured():
    """NVIDIA/nccl issue #1455, 8 x H100 SXM, NCCL_ALGO=NVLS, 2-4 GiB: busbw 370, 420, 440,
    460, 480 GB/s on 4..8 GPUs; algbw 258, 265, 270, 273 on 5..8. The (1 + 1/n) traffic
    explains the rise; ring stays at ~367 and wins below 4 GPUs."""
    hw = load_profile("h100-sxm")
    measured = {4: 370, 5: 420, 6: 440, 7: 460, 8: 480}
    for n, busbw in measured.items():
        res = comm_benchmark("all_reduce", 4 * GiB, n, 8, hw)
        assert res["busbw_GBps"] == pytest.approx(busbw, rel=0.05)
    assert comm_benchmark("all_reduce", 4 * GiB, 2, 8, hw)["algorithm"] == "ring"


def test_nvls_tree_pipelines_the_node_and_the_network():
    """2 nodes of 8: NVLS in the node and one exchange of S/8 per NIC run at once; the
    slower of the two sets the time (NCCL NVLS_TREE: min(intraBw, 2 x interBw))."""
    hw = load_profile("h100-sxm")
    group, size = GroupSpec(16, 1, 8), 2**33
    piped = size + 3 * 16 * 8 * 2**17  # 4 stages, loops of 16 channels x 8 heads x 128 KiB
    t_in = 9 / 8 * piped / (450e9 * 0.816 * 0.85)
    t_net = piped / (8 * 50e9 * 0.91)
    expected = max(t_in, t_net) + 25e-6 + 2 * 20.9e-6  # NET NVLSTree hop (tuning.cc)
    assert collective_time_s("all_reduce", size, group, hw, "nvls_tree") == pytest.approx(
        expected)


def test_nvls_requests_that_cannot_run_are_input_errors(a100):
    with pytest.raises(InputError) as err:
        collective_time_s("all_reduce", 1e9, GroupSpec(8, 1, 8), a100, "nvls")
    assert str(err.value) == ("algorithm: hardware 'a100-80gb' has no NVLink SHARP "
                              "(intra_node.nvls)")
    with pytest.raises(InputError) as err:
        collective_time_s("all_reduce", 1e9, GroupSpec(16, 1, 8), load_profile("h100-sxm"),
                          "nvls")
    assert str(err.value) == "algorithm: nvls runs inside one node; use nvls_tree across nodes"
    with pytest.raises(InputError) as err:
        collective_time_s("all_reduce", 1e9, GroupSpec(8, 1, 8), a100, protocol="ll256")
    assert str(err.value).startswith("protocol: unknown protocol 'll256'")


# ---- NIC sharing -------------------------------------------------------------------------------

def test_devices_sharing_a_nic_split_it_only_when_both_use_it():
    """cpu-x86: one NIC for the 2 devices of a node. A group with one member per node gets
    half the NIC while the other device's group runs too (the default), all of it alone."""
    hw = load_profile("cpu-x86")
    group, size = GroupSpec(4, 2, 2), 1e9  # one member on each of 4 nodes
    nic = 200e9 / 8 * hw.efficiency.inter_node_bus_fraction
    shared = collective_time_s("all_reduce", size, group, hw, "ring", "simple")
    alone = collective_time_s("all_reduce", size, group, hw, "ring", "simple",
                              active_per_node=1)
    latency = 6 * hw.inter_link_latency_s
    assert shared == pytest.approx(1.5 * size / (nic / 2) + latency)
    assert alone == pytest.approx(1.5 * size / nic + latency)
    # one NIC per device (h100-sxm): nobody to share with, the count changes nothing
    h100 = load_profile("h100-sxm")
    assert collective_time_s("all_reduce", size, GroupSpec(4, 8, 8), h100, active_per_node=1) \
        == collective_time_s("all_reduce", size, GroupSpec(4, 8, 8), h100)


def test_pat_all_gather_is_nccl_tuning_model():
    """PAT, one GPU on each of 64 nodes: 0.75 of the NIC bandwidth, base 8 us, log2(64)
    network hops at 1/3.5 of a step, 2.8/14 of a step per rank (NVIDIA/nccl
    src/graph/tuning.cc)."""
    hw = load_profile("h100-sxm")
    group, size = GroupSpec(64, 8, 8), 4 * 2**20
    bw = 50e9 * 0.91 * 0.75
    alpha = hw.inter_link_latency_s
    expected = 63 / 64 * size / bw + 8e-6 + 6 * alpha / 3.5 + 64 * alpha * 0.2
    assert collective_time_s("all_gather", size, group, hw, "pat") == pytest.approx(expected)
    with pytest.raises(InputError) as err:
        collective_time_s("all_gather", size, GroupSpec(64, 1, 8), hw, "pat")
    assert "one member per node" in str(err.value)


def test_a_protocol_the_algorithm_lacks_is_an_input_error():
    """NVLS runs the Simple protocol only (NCCL); auto with LL leaves NVLS out."""
    hw, group = load_profile("h100-sxm"), GroupSpec(8, 1, 8)
    with pytest.raises(InputError) as err:
        collective_time_s("all_reduce", 1e9, group, hw, "nvls", "ll")
    assert str(err.value) == "protocol: nvls does not run all_reduce with protocol 'll'"
    assert collective_choice("all_reduce", 1e9, group, hw, protocol="ll").algorithm != "nvls"


def test_every_cited_nccl_tests_file_loads_and_names_its_source():
    """benchmarks/data/*.csv: a '# source' header and rows the benchmark can price; the
    single-node NVLS predictions stay within 10% of what was measured."""
    from benchmarks.comm_accuracy import DATA, compare

    files = sorted(DATA.glob("*.csv"))
    assert len(files) >= 5
    for csv in files:
        assert "# source" in csv.read_text().split("\nprofile,")[0]
        table = compare(csv)
        assert len(table) and table["model_busbw"].gt(0).all()
    hopper = compare(DATA / "nccl_allreduce_hopper_1node.csv")
    assert hopper["error_pct"].abs().max() < 10


def test_comm_accuracy_meets_issue_24_from_1_mib_up():
    """Every predicted point from 1 MiB up on the InfiniBand / NVLink files: median <= 10%,
    worst <= 20% (the GCP TCPXO file is a different network and is reported apart)."""
    import pandas as pd

    from benchmarks.comm_accuracy import DATA, TCPXO, compare

    table = pd.concat([compare(csv) for csv in sorted(DATA.glob("*.csv"))
                       if csv.name != TCPXO], ignore_index=True)
    errors = table[(table["bytes"] >= 2**20) & ~table["calibration"]]["error_pct"].abs()
    assert len(errors) >= 40
    assert errors.median() <= 10
    assert errors.max() <= 20


def test_tree_pipeline_fill_is_its_chunks():
    """Tree all_reduce, 16 ranks on 2 nodes, LL128, 1 MiB: 2 * (7 + 1) hops, one chunk per
    channel in flight. The LL128 step is 576000 bytes (120 elements x 640 threads x 8 steps x
    8 B / 8 steps, 15 of each 16 words data); enqueue.cc halves it while a channel holds fewer
    than 22.4 chunks (down to 144000 > 128 KiB: 72000), then fewer than 5.6 (72000 > 32 KiB:
    36000 -> 18000), so 15 waves of 24 channels x 18000 bytes fill the pipeline."""
    hw = load_profile("h100-sxm")
    group, size = GroupSpec(16, 1, 8), 2**20
    bw = min(450e9 * 0.816, 8 * 50e9 * 0.91) * 0.92 * 120 / 128
    fill = 15 * min(size, 24 * 18000)
    expected = (2 * size + fill) / bw + 14e-6 + 2 * (7 * 1.25e-6 + 8.5e-6)
    assert collective_time_s("all_reduce", size, group, hw, "tree", "ll128") == pytest.approx(
        expected, rel=1e-12)
