"""The expert-parallel all-to-all against DeepEP's published bandwidths (docs/techniques/moe.md).

DeepEP (deepseek-ai/DeepEP, README, "Normal kernels with NVLink and RDMA forwarding", the
figures after its 2025-04 optimisation) measured its dispatch and combine
on H800 (NVLink ~160 GB/s) with CX7 InfiniBand 400 Gb/s NICs (~50 GB/s) in DeepSeek-V3's
pretraining setting (4096 tokens a batch, hidden 7168, top-8 of 256 experts in 4 of 8
groups, FP8 dispatch, BF16 combine), and gives the "bottleneck bandwidth": the bytes that
cross NVLink (inside a node, EP 8) or the NIC (across nodes, EP 16-64) over the time.

The simulator prices an all-to-all as a pairwise exchange (cost.algorithms._all_to_all): a
device keeps 1/n of its buffer, sends (m-1)/n of it over NVLink and (n-m)/n through its
NIC share, both at once. Here each device sends 4096 x 8 x 7168 bytes (the FP8 dispatch)
on h800-sxm, with 8 devices a node; the table prints the NVLink or NIC bytes over the
simulated time beside DeepEP's figure. Inside a node and at EP 16 the two agree within a
few percent; at EP 32-64 DeepEP reaches more than the simulator, and more than its NIC's
nominal rate, because it sends a token once per node and forwards it there over NVLink
(node-limited routing sends each token to at most 4 nodes), which a plain all-to-all of
the dispatched slots does not model. It prints a markdown table and never asserts
(tests/test_moe_modern.py checks EP 8 and EP 16).

    python -m benchmarks.deepep_alltoall   (repo root)
"""

from __future__ import annotations

from simulator.config.hardware import load_profile
from simulator.cost.collectives import collective_time_s
from simulator.cost.specs import GroupSpec

TOKENS, HIDDEN, TOP_K, PER_NODE = 4096, 7168, 8, 8
# EP degree: (dispatch, combine) bottleneck GB/s, DeepEP README (H800, CX7 400 Gb/s)
DEEPEP = {8: (153.0, 158.0), 16: (43.0, 43.0), 32: (58.0, 57.0), 64: (51.0, 50.0)}


def bottleneck_GBps(ep: int, hardware: str = "h800-sxm") -> float:
    """The simulated all-to-all's NVLink (EP <= a node) or NIC bytes over its time."""
    hw = load_profile(hardware)
    nbytes = float(TOKENS * TOP_K * HIDDEN)  # FP8: one byte an element
    seconds = collective_time_s("all_to_all", nbytes, GroupSpec(ep, 1, PER_NODE), hw)
    m = min(ep, PER_NODE)
    crossing = (m - 1) / ep if ep <= PER_NODE else (ep - m) / ep
    return crossing * nbytes / seconds / 1e9


def main() -> None:
    print("| EP | simulated GB/s | DeepEP dispatch GB/s | DeepEP combine GB/s | link |")
    print("|---|---|---|---|---|")
    for ep, (dispatch, combine) in DEEPEP.items():
        link = "NVLink" if ep <= PER_NODE else "RDMA"
        print(f"| {ep} | {bottleneck_GBps(ep):.1f} | {dispatch:.0f} | {combine:.0f} | {link} |")


if __name__ == "__main__":
    main()
