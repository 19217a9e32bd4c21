"""Sharding propagation refuses, before searching, a mesh whose layout count it cannot search
in seconds (`budget.estimate_propagation`): one axis more multiplies the (rank + 2)^k layouts
of every tensor."""

from __future__ import annotations

from simulator.budget import DEFAULT_MAX_LAYOUT_PAIRS, estimate_propagation
from simulator.cli._common import load_scenario


def test_the_estimate_is_the_squared_layout_count_summed_over_shapes():
    s = load_scenario("seed-c-propagate", []).scenario
    # a rank-4 and a rank-2 shape on 2 x 1 x 2: k = 2 axes of more than one device
    est = estimate_propagation(s, {(8, 4, 6, 6), (8, 10)}, (2, 1, 2))
    assert est.count == (6 ** 2) ** 2 + (4 ** 2) ** 2
    assert est.key == "cluster.nodes"


def test_seed_c_on_32_devices_is_refused_naming_cluster_nodes(invoke_cli):
    result = invoke_cli("explain", "seed-c-resnet-boundary", "--set", "cluster.nodes=4",
                        "--set", "parallel.mode=auto")
    assert result.exit_code == 2
    # 4 shapes of rank 4, 7 of rank 2 and 1 of rank 1 on five axes of 2 devices
    count = 4 * (6 ** 5) ** 2 + 7 * (4 ** 5) ** 2 + (3 ** 5) ** 2
    line = result.output.strip().splitlines()[-1]
    assert line.startswith("error: scenarios/seed-c-resnet-boundary.yaml: cluster.nodes: "
                           f"parallel.mode=auto: about {count:,} layout pairs")
    assert ("layout pairs for sharding propagation to search (the mesh 2*2*2*2*2 of the 32 "
            "devices, one axis per prime factor: 5 axes of more than one device; ") in line
    assert line.endswith(f"above the limit of {DEFAULT_MAX_LAYOUT_PAIRS:,}; give model.mesh "
                         "with fewer, larger axes (each of more than one device multiplies "
                         "the count), use fewer devices, or write the strategies "
                         "(parallel.mode=semi_auto)")


def test_the_16_device_case_of_issue_13_is_under_the_limit():
    from simulator.sharding.model_graph import written_graph

    s = load_scenario("seed-c-resnet-boundary", [
        "cluster.nodes=2", "parallel.mode=auto", "parallel.micro_batches=2",
        "parallel.dataset_strategy=[[4,1,1,1],[4]]"]).scenario
    graph, mesh = written_graph(s)
    shapes = {graph.tensors[n].shape for op in graph.ops for n in op.inputs}
    assert estimate_propagation(s, shapes, mesh.shape).count <= DEFAULT_MAX_LAYOUT_PAIRS
