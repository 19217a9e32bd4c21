"""Sharding propagation refuses, before working, a mesh it cannot search in seconds: one
mesh axis more multiplies the signatures it enumerates (`limits.estimate_signatures`) and the
(rank + 2)^k layouts each redistribution search may visit (`limits.estimate_propagation`)."""

from __future__ import annotations

from simulator.api import load_scenario
from simulator.limits import (
    DEFAULT_MAX_LAYOUT_PAIRS,
    DEFAULT_MAX_SIGNATURES,
    estimate_propagation,
    estimate_signatures,
)
from simulator.models.model_graph import _mesh_key

REMEDY = ("give model.mesh with fewer, larger axes (each of more than one device multiplies "
          "the count), use fewer devices, or write the strategies (parallel.mode=semi_auto)")
def _head(nodes: int) -> str:
    """The refusal names the --set that drives the count."""
    return (f"error: scenarios/seed-c-resnet-boundary.yaml with --set cluster.nodes={nodes}: "
            "cluster.nodes: parallel.mode=auto: about ")


def test_the_estimates_are_their_closed_forms():
    s = load_scenario("seed-c-propagate", []).scenario
    # 3 sources of a rank-4 shape, 2 of a rank-2 one, on 2 x 1 x 2: k = 2 axes of >1 device
    key = _mesh_key(s, (2, 1, 2))
    est = estimate_propagation(key, {(8, 4, 6, 6): 3, (8, 10): 2}, (2, 1, 2))
    assert (est.count, est.key) == (3 * 6 ** 2 + 2 * 4 ** 2, "cluster.nodes")
    assert estimate_signatures(key, [8, 5], (2, 1, 2)).count == 8 ** 3 + 5 ** 3


def _last_line(invoke_cli, nodes: int) -> str:
    result = invoke_cli("explain", "seed-c-resnet-boundary", "--set", f"cluster.nodes={nodes}",
                        "--set", "parallel.mode=auto")
    assert result.exit_code == 2
    return result.output.strip().splitlines()[-1]


def test_seed_c_on_64_devices_is_refused_for_its_signatures(invoke_cli):
    # one-axis signatures of its 11 free operators (2 Conv2D, 2 ReLU, 2 Add/Einsum, a
    # Reshape and 4 of 3) to the power of the 6 mesh axes
    count = 2 * 8 ** 6 + 2 * 5 ** 6 + 2 * 6 ** 6 + 4 ** 6 + 4 * 3 ** 6
    assert _last_line(invoke_cli, 8) == (
        f"{_head(8)}{count:,} signatures for sharding propagation to enumerate (the mesh "
        "2*2*2*2*2*2 of the 64 devices, one axis per prime factor: each of 11 operators' "
        f"one-axis signatures to the power 6), above the limit of {DEFAULT_MAX_SIGNATURES:,}; "
        f"{REMEDY}")


def test_seed_c_on_32_devices_is_refused_for_its_layouts(invoke_cli):
    line, head = _last_line(invoke_cli, 4), _head(4)
    assert line.startswith(head)
    count = int(line[len(head):].split(" ")[0].replace(",", ""))
    assert count > DEFAULT_MAX_LAYOUT_PAIRS
    assert line.endswith(
        "layouts for sharding propagation to search (the mesh 2*2*2*2*2 of the 32 devices, "
        "one axis per prime factor: 5 axes of more than one device; 1,439 searches over the "
        f"tensors' (rank + 2)^5 layouts), above the limit of {DEFAULT_MAX_LAYOUT_PAIRS:,}; "
        f"{REMEDY}")
    assert f"about {count:,} layouts" in line
