"""DeepEP's expert all-to-all (deepseek-ai/DeepEP, README, "Normal kernels with NVLink and
RDMA forwarding"; DeepSeek-V3, arXiv:2412.19437, Sec. 3.2.2): a token bound for experts on
another node crosses the network ONCE to the GPU of the same local rank there, which
forwards it over NVLink to the GPUs holding its experts; with node-limited routing (Sec.
2.1.2: "each token will be sent to at most M nodes", DeepSeek-V3's group-limited routing
with one group of experts per node, n_group 8, topk_group 4) a token reaches at most M
nodes.

So of a device's send buffer of k copies a token (one per routed expert), what crosses its
NIC share is the expected count of *remote nodes* the token's experts sit on, over k
(`remote_share`), and what crosses NVLink is the copies bound for another GPU than the one
that receives them, (m - 1) / m of them, on m GPUs a node. The two run at once (the
kernels pipeline RDMA and NVLink forwarding), as in `cost.algorithms._all_to_all`.

Expected remote nodes, experts spread evenly over N nodes (E/N each), a token's k experts
uniformly among those it may choose:
- unlimited: (N - 1) (1 - P0), P0 = C(E - E/N, k) / C(E, k) the chance a node has none;
- M of N nodes (groups = N, group_top_k = M): (N - 1) (M / N) (1 - P0'), P0' = C(E_M -
  E/N, k) / C(E_M, k) over the E_M = M E / N experts of the chosen nodes.
Balanced routing is assumed (the auxiliary-loss-free balancing of Sec. 2.1.2 aims at it).
`benchmarks.deepep_alltoall` sets the result beside DeepEP's published bandwidths.
"""

from __future__ import annotations

from math import comb

__all__ = ["remote_nodes", "remote_share"]


def _none_on_a_node(pool: int, per_node: int, k: int) -> float:
    """Chance that none of k distinct experts drawn from `pool` is one of a node's
    `per_node`."""
    return comb(pool - per_node, k) / comb(pool, k) if pool - per_node >= k else 0.0


def remote_nodes(experts: int, top_k: int, nodes: int, groups: int = 1,
                 group_top_k: int = 1) -> float:
    """Expected number of other nodes a token's `top_k` experts sit on (module doc), for
    `experts` spread over `nodes`; node-limited when the routing groups are the nodes
    (`groups == nodes`, `group_top_k` < nodes)."""
    if nodes <= 1:
        return 0.0
    per_node = experts // nodes
    if groups == nodes and group_top_k < nodes:
        m = group_top_k
        used = 1.0 - _none_on_a_node(m * per_node, per_node, top_k)
        return (nodes - 1) * (m / nodes) * used
    return (nodes - 1) * (1.0 - _none_on_a_node(experts, per_node, top_k))


def remote_share(experts: int, top_k: int, nodes: int, groups: int = 1,
                 group_top_k: int = 1) -> float:
    """The share of a device's dispatch buffer (k copies a token) that crosses its NIC
    under once-per-node forwarding: remote nodes a token / k."""
    return remote_nodes(experts, top_k, nodes, groups, group_top_k) / top_k
