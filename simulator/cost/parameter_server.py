"""Parameter-server communication and update times (closed forms).

With n workers and k servers, each worker sends its whole gradient (M bytes) and receives
the whole parameter set; the parameters are split by key range over the servers, so each
server receives n*M/k and sends as much back. When everyone transfers at once, the time of
one direction is bounded by the slower side (BytePS, Jiang et al. OSDI 2020, Sec. 3.1:
"the PS ... requires each worker to send M and each server to receive nM/k"):

    t = alpha + max(M / B_worker, n * M / (k * B_server))

Asynchronous training (Li et al. OSDI 2014, Sec. 2.2 and 4.3; MindSpore's parameter server
"supports both synchronous SGD and asynchronous SGD") applies each push on arrival: a
worker's own transfers see only its NIC, while the servers serve all n workers once per
period, which bounds the period from below; in the steady state the other n-1 workers each
push once between a worker's pull and its push (the staleness, in updates).

A server's update is memory-bound on its host: the summed gradient of its key range (n
pushes read, fp32) and the optimizer's fp32 states read and written (`OPTIMIZER_STATE_BYTES`).
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.config.hardware.schema import HardwareProfile
from simulator.cost.links import inter_bus_bandwidth

__all__ = ["PsLinks", "ps_links", "transfer_s", "server_update_s", "OPTIMIZER_STATE_BYTES"]

# fp32 bytes per parameter the server reads and writes for one update: the master weight
# and the moments, read and written (sgd: weight; momentum: + velocity; adam: + m, v)
OPTIMIZER_STATE_BYTES = {"sgd": 2 * 4, "momentum": 2 * 8, "adam": 2 * 12}


@dataclass(frozen=True)
class PsLinks:
    """Effective bandwidths (bytes/s) of one worker's NIC share and of one server, the
    network latency (s) and the server host's memory bandwidth (bytes/s)."""

    worker_Bps: float
    server_Bps: float
    latency_s: float
    server_memory_Bps: float


def ps_links(worker_hw: HardwareProfile, devices_per_node: int, server_hw: HardwareProfile,
             server_nic_Gbps: float | None) -> PsLinks:
    """A worker gets its NIC share with every device of its node transferring at once; a
    server is one host of `server_hw` (all its NICs, or `server_nic_Gbps`) at the bus
    fraction of its profile, and its whole host memory bandwidth."""
    worker = inter_bus_bandwidth(worker_hw, devices_per_node)
    nic = server_nic_Gbps * 1e9 / 8 if server_nic_Gbps else \
        server_hw.node_network_bandwidth_bytes_per_s
    server = nic * server_hw.efficiency.inter_node_bus_fraction
    memory = (server_hw.memory_bandwidth_GBps * 1e9 * server_hw.devices_per_node_default
              * server_hw.efficiency.memory_bandwidth_fraction)
    return PsLinks(worker, server, max(worker_hw.inter_link_latency_s,
                                       server_hw.inter_link_latency_s), memory)


def transfer_s(nbytes: float, workers: int, servers: int, links: PsLinks,
               concurrent: bool = True) -> float:
    """Seconds for each worker to push (or pull) `nbytes` split over the servers; with
    `concurrent` all workers at once (synchronous), else one worker alone."""
    if nbytes <= 0:
        return 0.0
    worker = nbytes / links.worker_Bps
    if not concurrent:
        return links.latency_s + max(worker, nbytes / (servers * links.server_Bps))
    return links.latency_s + max(worker, workers * nbytes / (servers * links.server_Bps))


def server_update_s(params: float, pushes: int, servers: int, optimizer: str,
                    grad_bytes: float, links: PsLinks) -> float:
    """Seconds for one server to read `pushes` gradients (`grad_bytes` per element) of its
    key range (params / servers parameters), sum them and update the range."""
    local = params / servers
    return local * (pushes * grad_bytes + OPTIMIZER_STATE_BYTES[optimizer]) \
        / links.server_memory_Bps
