"""The parameter server, executed: workers push their gradients to the servers that own
each key range, the servers sum and update, the workers pull (`parallel.mode:
parameter_server`; Li et al. OSDI 2014, Sec. 3-4: keys range-partitioned over the servers,
push / pull of key-value ranges).

Synchronous: each server sums the n pushes of its range in worker order and applies one
update; the pulled parameters must equal the single-device step (verify's proof that
synchronous PS is data parallel). Asynchronous: each push is applied on arrival, on
parameters other workers have moved since (staleness), so the step is not the single-device
step by design: verify compares the forward and the pushed gradients, and says the updates
were not compared.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.numeric.dist import DistTensor, distribute
from simulator.numeric.optimizer import update
from simulator.sharding.plan import ShardingPlan

__all__ = ["PsRun", "ps_step", "key_ranges"]


@dataclass(frozen=True)
class PsRun:
    """What verify needs of `parallel.parameter_server`, and the mutation of a dropped push
    (worker `drop_push`'s gradient never reaches the servers)."""

    servers: int
    sync: bool = True
    drop_push: int | None = None


def key_ranges(size: int, servers: int) -> list[slice]:
    """The element ranges of a flattened tensor the servers own (contiguous, as even as
    possible; a server may own nothing of a small tensor)."""
    bounds = np.linspace(0, size, servers + 1).round().astype(int)
    return [slice(int(a), int(b)) for a, b in zip(bounds, bounds[1:])]


def _pushes(g: DistTensor) -> list[np.ndarray]:
    """Each worker's whole accumulated gradient (its partial sum over its batch)."""
    blocks = [np.asarray(b) for b in g.blocks]
    assert all(b.shape == tuple(g.shape) for b in blocks), \
        "parameter-server workers hold whole tensors (data parallel only)"
    return [b.reshape(-1) for b in blocks]


def ps_step(plan: ShardingPlan, params: dict[str, DistTensor], grads: dict[str, DistTensor],
            kind: str, lr: float, run: PsRun
            ) -> tuple[dict[str, DistTensor], dict[str, DistTensor], dict[str, int]]:
    """(pulled parameters, summed gradients, transfers by kind) of one step."""
    new, reduced = {}, {}
    transfers = {"ps_push": 0, "ps_pull": 0}
    for name, p in params.items():
        pushes = _pushes(grads[name])
        whole = np.asarray(p.blocks[0]).reshape(-1)
        pulled, summed = whole.copy(), np.zeros_like(whole)
        for rng in key_ranges(whole.size, run.servers):
            if rng.start == rng.stop:
                continue
            arrived = [g[rng] for w, g in enumerate(pushes) if w != run.drop_push]
            transfers["ps_push"] += len(pushes)
            summed[rng] = np.sum(arrived, axis=0)
            pulled[rng] = update(kind, whole[rng], summed[rng], lr)
            transfers["ps_pull"] += len(pushes)
        shape = tuple(p.shape)
        new[name] = distribute(pulled.reshape(shape), p.layout, plan.mesh)
        reduced[name] = distribute(summed.reshape(shape), p.layout, plan.mesh)
    return new, reduced, transfers
