"""The NICs a node's devices share, as the engine shares them (`inter_node.flow_sharing:
fair`; `cost.links.nic_sharing` says which NIC resource a device uses and what it carries):
per simulated device, its NIC resource, the devices of that resource it stands for (under
`representative` fidelity the devices of its pipeline stage there, all transferring at once
as the cost model's all-active share assumes; under `full`, itself), and how much slower
than alone its transfers were priced. Under `fifo` (the default) nothing: each device
keeps its link, priced at the all-active share."""

from __future__ import annotations

from collections import Counter
from typing import Any

from simulator.cost.links import nic_sharing
from simulator.lower.layout import RankMesh

__all__ = ["nic_fields"]


def nic_fields(hw: Any, ranks: RankMesh, devices: tuple[int, ...], fidelity: str
               ) -> dict[str, tuple]:
    """The `engine.tasks.Plan` fields nic_of, nic_weight, nic_priced and nic_slots of a
    plan on `hw` (none without a profile or under fifo sharing)."""
    if hw is None or hw.inter_node.flow_sharing != "fair":
        return {}
    dpn = ranks.devices_per_node
    share = nic_sharing(hw, dpn)

    def resource(rank: int) -> int:  # global: the node's resources numbered below dpn
        return (rank // dpn) * dpn + share.resource(rank % dpn)

    per_stage = ranks.devices // ranks.pipeline
    weights = []
    for dev in devices:
        if fidelity == "full":
            weights.append(1)
            continue
        first = ranks.stage(dev) * per_stage
        on = Counter(resource(r) for r in range(first, first + per_stage))
        weights.append(on[resource(dev)])
    used = sorted({resource(d) for d in devices})
    return {"nic_of": tuple(resource(d) for d in devices), "nic_weight": tuple(weights),
            "nic_priced": (share.priced,) * len(devices),
            "nic_slots": tuple((r, share.slots) for r in used)}
