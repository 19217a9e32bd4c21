"""Host & device heterogeneous placement: operators of a `type: graph` model marked
`attrs: {primitive_target: CPU}` run on the host CPU.

MindSpore's heterogeneous training (MindSpore tutorial "Other Features",
"EmbeddingLookUp: add_prim_attr('primitive_target', 'CPU')"; "Distributed Parallelism Overview",
"Host&Device Heterogeneous"; the tutorial tutorials/parallel/host_device_training) puts an
operator with much memory and little computation -- the embedding-table lookup of a large
recommendation model -- on the host: its parameters (and their gradients and optimizer states)
stay in host memory, the kernel runs at the host CPU's speed, and its activations cross the
host link: the inputs produced on the device go down (D2H) before it runs and its output
comes up (H2D) after; in the backward, the output's gradient goes down and the gradients of
its device-side inputs come up.

Priced here: the host kernel with the bundled `cpu-x86` hardware profile (HOST_PROFILE, the
roofline of `simulator.cost`, in fp32 where the host has no matrix unit for the model's
dtype) plus the copies at the device profile's `host.pcie_bandwidth_GBps`
(`CostModel.copy_s`), serial with the device's work: the device waits for the host's result,
as a graph with a CPU operator in its middle does. The host's optimizer step over those
parameters runs beside the device's (`host_optimizer_s`, a task on the device's offload lane
the iteration waits for). Not modelled: a data-parallel reduction of their gradients between
hosts (still priced as the device's collective).
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from typing import Any

from simulator.config.hardware import load_profile
from simulator.cost import compute_time_s
from simulator.cost.specs import ComputeSpec
from simulator.lower.costs import CostModel
from simulator.lower.state import optimizer_spec

__all__ = ["HOST_PROFILE", "HOST_SOCKETS", "host_costs", "host_optimizer_s", "offload_step_s"]

HOST_PROFILE = "cpu-x86"  # hardware_profiles/cpu-x86.yaml: one socket of a 2-socket Xeon server
HOST_SOCKETS = 2  # sockets of that host server (the profile's 2-socket Xeon 8480+ node)


@lru_cache(maxsize=1)
def _host() -> Any:

    return load_profile(HOST_PROFILE)


def host_optimizer_s(params: int, dtype: str, optimizer: str) -> float:
    """The host's optimizer step over the parameters it keeps (dense: every row of a table,
    as MindSpore's Adam; its LazyAdam/FTRL sparse updates would touch fewer), priced on the
    host profile like the device's step (`lower.state.optimizer_spec`)."""

    host = _host()
    spec = optimizer_spec(params, dtype if host.has_dtype(dtype) else "fp32", optimizer, 0, 1)
    return compute_time_s(spec, host)


def offload_step_s(params: int, dtype: str, optimizer: str, devices_per_node: int) -> float:
    """ZeRO-Offload's host step over one device's shard of `params` parameters: priced
    on one socket (`host_optimizer_s`), which updates the shards of the
    devices_per_node / HOST_SOCKETS devices sharing it one after another."""
    return (host_optimizer_s(params, dtype, optimizer)
            * max(1, devices_per_node // HOST_SOCKETS))


def host_costs(costs: CostModel, kernels: tuple[tuple[str, float], ...]) -> CostModel:
    """`costs` with the kernels named in `kernels` priced on the host, plus their copies."""
    if not kernels:
        return costs

    table, device = dict(kernels), costs.compute_s
    host = _host()

    def compute_s(spec: ComputeSpec) -> float:
        link = table.get(spec.name)
        if link is None:
            return device(spec)
        on_host = spec if host.has_dtype(spec.dtype) else replace(spec, dtype="fp32")
        return compute_time_s(on_host, host) + costs.copy_s(link)

    return replace(costs, compute_s=compute_s)
