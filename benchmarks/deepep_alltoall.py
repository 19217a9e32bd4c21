"""The expert-parallel all-to-all against DeepEP's published bandwidths (docs/techniques/moe.md).

DeepEP (deepseek-ai/DeepEP, README, "Normal kernels with NVLink and RDMA forwarding", the
figures after its 2025-04 optimisation) measured its dispatch and combine
on H800 (NVLink ~160 GB/s) with CX7 InfiniBand 400 Gb/s NICs (~50 GB/s) in DeepSeek-V3's
pretraining setting (4096 tokens a batch, hidden 7168, top-8 of 256 experts in 4 of 8
groups, FP8 dispatch, BF16 combine), and gives the "bottleneck bandwidth": the bytes that
cross NVLink (inside a node, EP 8) or the NIC (across nodes, EP 16-64) over the time.

The simulator prices a plain all-to-all as a pairwise exchange (cost.algorithms._all_to_all):
a device keeps 1/n of its buffer, sends (m-1)/n of it over NVLink and (n-m)/n through its NIC
share, both at once. With DeepEP's once-a-node forwarding (`parallel.expert_dispatcher:
deepep`, cost.deepep) a token crosses the network once to each remote node its experts sit
on (at most 4 of 8 nodes at EP 64, DeepEP's test routing `num_topk_groups = min(num_nodes,
4)`) and is forwarded over NVLink there. DeepEP's test counts its RDMA bytes as the tokens
times the distinct nodes they reach, own node included (tests/test_internode.py:
`num_rdma_token_sent` after `inplace_unique(rdma_idx, num_nodes)`); the table prints both
simulated figures on that count: each device sends 4096 x 8 x 7168 bytes (the FP8 dispatch)
on h800-sxm, 8 devices a node. Nothing is fitted to DeepEP's figures; the script prints a
markdown table and never asserts (tests/test_moe_modern.py checks EP 8 and EP 16,
tests/test_deepep.py the once-a-node count).

    python -m benchmarks.deepep_alltoall   (repo root)
"""

from __future__ import annotations

from simulator.config.hardware import load_profile
from simulator.cost.collectives import collective_time_s
from simulator.cost.deepep import remote_nodes, remote_share
from simulator.cost.specs import GroupSpec

TOKENS, HIDDEN, TOP_K, PER_NODE, EXPERTS = 4096, 7168, 8, 8, 256
# EP degree: (dispatch, combine) bottleneck GB/s, DeepEP README (H800, CX7 400 Gb/s)
DEEPEP = {8: (153.0, 158.0), 16: (43.0, 43.0), 32: (58.0, 57.0), 64: (51.0, 50.0)}


def bottleneck_GBps(ep: int, hardware: str = "h800-sxm", once_a_node: bool = False
                    ) -> float:
    """The simulated all-to-all's NVLink (EP <= a node) or RDMA bytes over its time; RDMA
    bytes as DeepEP's test counts them (tokens x distinct nodes reached, own included)."""
    hw = load_profile(hardware)
    nbytes = float(TOKENS * TOP_K * HIDDEN)  # FP8: one byte an element
    nodes = max(1, ep // PER_NODE)
    limit = min(nodes, 4)
    share = remote_share(EXPERTS, TOP_K, nodes, nodes, limit) if once_a_node else 0.0
    seconds = collective_time_s("all_to_all", nbytes, GroupSpec(ep, 1, PER_NODE, share), hw)
    if ep <= PER_NODE:
        return (ep - 1) / ep * nbytes / seconds / 1e9
    reached = remote_nodes(EXPERTS, TOP_K, nodes, nodes, limit) * nodes / (nodes - 1)
    return reached * TOKENS * HIDDEN / seconds / 1e9


def main() -> None:
    print("| EP | simulated GB/s, pairwise | simulated GB/s, once a node | DeepEP dispatch GB/s "
          "| DeepEP combine GB/s | link |")
    print("|---|---|---|---|---|---|")
    for ep, (dispatch, combine) in DEEPEP.items():
        link = "NVLink" if ep <= PER_NODE else "RDMA"
        print(f"| {ep} | {bottleneck_GBps(ep):.1f} | {bottleneck_GBps(ep, once_a_node=True):.1f}"
              f" | {dispatch:.0f} | {combine:.0f} | {link} |")


if __name__ == "__main__":
    main()
