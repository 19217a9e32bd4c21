"""NCCL's own tuning model: the latency and bandwidth it gives each algorithm and protocol.

Every figure here is a constant of NVIDIA/nccl src/graph/tuning.cc at v2.30.7
(makefiles/version.mk NCCL_MAJOR 2, NCCL_MINOR 30, NCCL_PATCH 7; commit 5067397c), copied,
not fitted:

- `ncclTunerConstantsDefaults.baseLatencies[algorithm][protocol]` (us): the fixed cost of one
  collective of that algorithm and protocol (Tree, Ring, NVLS, NVLS Tree, PAT);
- `hwLatencies[NVLINK | NET][algorithm][protocol]` (us): the latency of one step over an
  NVLink hop or a network hop;
- `llMaxBws[index1][index2]` (GB/s, bus bandwidth): the ceiling of the LL protocol, per GPU
  generation inside one node (index1 = compute-capability index) and per CPU vendor across
  nodes (index1 = 0 Intel, 1 AMD), for 1, 2 and more nodes (index2);
- the bandwidth refinements of `ncclTopoTuneModel`: ring LL at half the bus bandwidth (capped
  at llMaxBw), ring LL128 at 0.92 of it (120 of each 128 bytes are payload), tree all_reduce
  at 0.92, tree LL at 1/3.8 (capped at llMaxBw), tree LL128 at 7/9 inside a node and 120/128
  across nodes, PAT at 0.75;
- `getNetOverhead`: 1 us of network post overhead per step on x86 (2 us on AMD), three times
  that with Simple, the floor of the intra-node step latency of a ring across nodes;
- `ncclTopoGetAlgoTime`: the ring's "plateau effect" (Simple all_reduce across nodes on
  compute capability >= 8.0: latency x 1.4). Its `treeCorrectionFactor`, a static cut of the
  tree's bandwidth at medium sizes, is not used: the cause it corrects for, the fill of the
  tree's chunk pipeline, is priced below (`tree_fill_bytes`), as is the NVLS pipeline's
  (`nvls_pipeline_bytes`), from NCCL's chunk sizes and channel counts.

NCCL chooses, per collective and size, the (algorithm, protocol) of least
`latency + bytes / bandwidth` (`ncclTopoGetAlgoTime`, enqueue.cc `topoGetAlgoInfo`);
`simulator.cost.algorithms` prices every candidate this way and takes the fastest.
A hardware profile opts in with its `nccl:` block (the GPU generation and the CPU vendor);
a profile without one (Ascend, CPU) keeps its own measured step latencies.
"""

from __future__ import annotations

import math

__all__ = ["NCCL_VERSION", "base_latency_us", "hop_latency_us", "ll_max_busbw_GBps",
           "net_overhead_us", "protocol_bandwidth_factor", "nvls_channels", "nvls_chunk_bytes",
           "nvls_pipeline_bytes", "tree_chunk_bytes", "tree_fill_bytes", "RING_PLATEAU",
           "GENERATIONS", "NVLS_STAGES"]

NCCL_VERSION = "2.30.7"
GENERATIONS: tuple[str, ...] = ("volta", "ampere", "hopper", "blackwell")
_PROTO = {"ll": 0, "ll128": 1, "simple": 2}

# baseLatencies, us: {LL, LL128, Simple}
_BASE: dict[str, tuple[float, float, float]] = {
    "tree": (6.8, 14.0, 8.4), "ring": (6.6, 14.0, 8.4),
    "nvls": (0.0, 0.0, 0.0), "nvls_tree": (0.0, 0.0, 0.0), "pat": (8.0, 8.0, 8.0),
}
# hwLatencies, us per step: {LL, LL128, Simple}
_HOP: dict[str, dict[str, tuple[float, float, float]]] = {
    "nvlink": {"tree": (0.6, 1.25, 4.0), "ring": (0.6, 1.9, 3.4), "nvls": (0.0, 0.0, 25.0),
               "nvls_tree": (0.0, 0.0, 25.0), "pat": (0.0, 0.0, 4.0)},
    "net": {"tree": (5.0, 8.5, 14.0), "ring": (2.7, 4.0, 14.0), "nvls": (0.0, 0.0, 18.0),
            "nvls_tree": (0.0, 0.0, 20.9), "pat": (0.0, 0.0, 14.0)},
}
# llMaxBws, GB/s: rows Volta/Intel, Ampere/AMD, Hopper, Blackwell; columns 1, 2, >2 nodes
_LL_MAX: tuple[tuple[float, float, float], ...] = (
    (39.0, 39.0, 20.4), (87.7, 22.5, 19.0), (141.0, 45.0, 35.0), (2 * 141.0, 2 * 45.0, 2 * 35.0))
RING_PLATEAU = 1.4  # ncclTopoGetAlgoTime: ring Simple all_reduce across nodes, compCap >= 80


def base_latency_us(algorithm: str, protocol: str) -> float:
    """NCCL's fixed latency of one collective (baseLatencies), us."""
    return _BASE[algorithm][_PROTO[protocol]]


def hop_latency_us(link: str, algorithm: str, protocol: str) -> float:
    """NCCL's latency of one step over `link` ('nvlink' or 'net'), us (hwLatencies)."""
    return _HOP[link][algorithm][_PROTO[protocol]]


def ll_max_busbw_GBps(generation: str, cpu_vendor: str, nodes: int) -> float:
    """The LL protocol's bus-bandwidth ceiling (llMaxBws), GB/s: per GPU generation inside
    one node, per CPU vendor across nodes."""
    column = 0 if nodes <= 1 else 1 if nodes == 2 else 2
    row = GENERATIONS.index(generation) if nodes <= 1 else (1 if cpu_vendor == "amd" else 0)
    return _LL_MAX[row][column]


def net_overhead_us(cpu_vendor: str, protocol: str) -> float:
    """getNetOverhead: network post overhead per step (x3 with Simple), us."""
    return (2.0 if cpu_vendor == "amd" else 1.0) * (3.0 if protocol == "simple" else 1.0)


def protocol_bandwidth_factor(algorithm: str, collective: str, protocol: str,
                              nodes: int) -> float:
    """The share of the algorithm's bus bandwidth NCCL's model gives `protocol`
    (before the LL ceiling, which `ll_max_busbw_GBps` gives)."""
    factor = 1.0
    if algorithm == "ring":
        factor = {"ll": 0.5, "ll128": 0.92, "simple": 1.0}[protocol]
    elif algorithm == "tree":
        factor = 0.92 if collective == "all_reduce" else 1.0
        if protocol == "ll":
            factor /= 3.8
        elif protocol == "ll128":
            factor *= 7.0 / 9.0 if nodes == 1 else 120.0 / 128.0
    elif algorithm == "pat":
        factor = 0.75
    return factor


# NVLink SHARP pipelines (NVIDIA/nccl v2.30.7). A channel moves its share of the buffer in
# loops of nHeads chunks (src/device/all_reduce.h, RunWorkColl NCCL_ALGO_NVLS: `loopSize =
# nChannels * nvls->nHeads * chunkSize`), each chunk passing through the kernel's warp groups
# in turn: all_reduce in one node scatter -> reduce+multicast -> gather (3 stages); across
# nodes (NVLS_TREE) scatter -> reduce+send to the network -> receive+multicast -> gather (4);
# reduce_scatter and all_gather one copy stage beside the switch operation (2). A pipeline of
# D stages fed k loops takes k + D - 1 loop times, so a buffer of S bytes costs the
# bandwidth time of S + (D - 1) * min(S, loop bytes): the fill that makes mid-size NVLS
# collectives slower than their asymptote.
NVLS_STAGES: dict[tuple[str, str], int] = {
    ("nvls", "all_reduce"): 3, ("nvls_tree", "all_reduce"): 4,
    ("nvls", "reduce_scatter"): 2, ("nvls", "all_gather"): 2,
}
_NVLS_CHUNK = 128 * 1024  # transport/nvls.cc NCCL_NVLS_CHUNKSIZE default


def nvls_channels(generation: str, nodes: int) -> int:
    """transport/nvls.cc: NVLS_NCHANNELS_SM90 16; SM100 24 in one node, 32 across nodes."""
    if generation == "blackwell":
        return 24 if nodes <= 1 else 32
    return 16


def nvls_chunk_bytes(algorithm: str, nbytes: float, channels: int, heads: int,
                     nodes: int) -> int:
    """The chunk NCCL's enqueue.cc (`calcCollChunking`) gives an NVLS / NVLS_TREE
    collective of `nbytes` over `channels` channels of `heads` heads each."""
    ops = channels * heads
    if algorithm == "nvls":
        chunk = _NVLS_CHUNK
        for mult, above, to in ((64, 65536, 65536), (8, 32768, 32768), (2, 16384, 16384)):
            if nbytes < mult * ops * chunk and chunk > above:
                chunk = to
        return chunk
    chunk = min(_NVLS_CHUNK, 65536 if nodes >= 4 else _NVLS_CHUNK)  # nvlsTreeMaxChunkSize
    for mult, above, to in ((32, 262144, 262144), (16, 131072, 131072), (4, 65536, 65536),
                            (1, 32768, 32768)):
        if nbytes < mult * ops * chunk and chunk > above:
            chunk = to
    return chunk


def nvls_pipeline_bytes(algorithm: str, collective: str, nbytes: float, generation: str,
                        heads: int, nodes: int) -> float:
    """The bytes an NVLS pipeline's bandwidth term carries: S + (D - 1) * min(S, loop)."""
    stages = NVLS_STAGES.get((algorithm, collective), 1)
    channels = nvls_channels(generation, nodes)
    loop = channels * heads * nvls_chunk_bytes(algorithm, nbytes, channels, heads, nodes)
    return nbytes + (stages - 1) * min(nbytes, loop)


# Tree all_reduce (NVIDIA/nccl v2.30.7): a chain through the m ranks of a node and a double
# binary tree across the N nodes, reduced up and broadcast down, each channel's chunks
# pipelined through its 2 ((m - 1) + log2 N) hops. Chunks: enqueue.cc `calcCollChunking`
# (Simple: the 512 KiB step, buffSize 4 MiB / NCCL_STEPS 8; LL128: its 120-of-128 step,
# halved while a channel holds fewer than (1 + log2 N + 0.1 ppn) * 64 / ppn chunks down to
# 128 KiB, then while fewer than that * 16 / ppn down to 32 KiB; LL: half its step).
_STEP = {"simple": 4 * 1024 * 1024 // 8,
         "ll128": (120 * 640 * 8 * 8 // 8) // 16 * 15,
         "ll": (8 * 512 * 8 * 16 // 8) // 2}


def tree_chunk_bytes(protocol: str, nbytes: float, channels: int, ppn: int,
                     nodes: int) -> int:
    """The chunk of a tree all_reduce of `nbytes` (enqueue.cc `calcCollChunking`)."""
    chunk = _STEP[protocol]
    if protocol == "ll128":
        steps = 1 + (int(math.floor(math.log2(nodes))) if nodes > 1 else 0) + 0.1 * ppn
        while nbytes // (channels * chunk) < steps * 64 / ppn and chunk > 131072:
            chunk //= 2
        while nbytes // (channels * chunk) < steps * 16 / ppn and chunk > 32768:
            chunk //= 2
    return chunk


def tree_fill_bytes(protocol: str, nbytes: float, channels: int, ppn: int,
                    nodes: int) -> float:
    """Bytes of pipeline fill of a tree all_reduce: (hops - 1) waves of one chunk per
    channel (the whole buffer where it is smaller)."""
    hops = 2 * ((ppn - 1) + (int(math.floor(math.log2(nodes))) if nodes > 1 else 0))
    wave = min(nbytes, channels * tree_chunk_bytes(protocol, nbytes, channels, ppn, nodes))
    return max(hops - 1, 0) * wave
