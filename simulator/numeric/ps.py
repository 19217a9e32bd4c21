"""The parameter server, executed: workers push their gradients to the servers that own
each key range, the servers sum and update, the workers pull (`parallel.mode:
parameter_server`; Li et al. OSDI 2014, Sec. 3-4: keys range-partitioned over the servers,
push / pull of key-value ranges).

Synchronous: each server sums the n pushes of its range in worker order and applies one
update; the pulled parameters must equal the single-device step (verify's proof that
synchronous PS is data parallel). Asynchronous: each push is applied on arrival, on
parameters other workers have moved since (staleness), so the step is not the single-device
step by design. Every worker computed its gradient on the parameters it pulled before the
others' pushes landed (a staleness of up to n - 1 updates, the bound `run` prices); each
push is the gradient of the worker's own mean loss (n times its share of the global
batch's), and each server applies the pushes of its key range one after another in arrival
order (worker order here), its optimizer state carried from push to push (Li et al. OSDI
2014, Sec. 4.3 "flexible consistency": bounded delay). Verify compares the pushes' sum with
the single-device gradient, and the servers' parameters with a bounded-staleness reference:
one device applying the same stale pushes to the whole tensors in the same order
(`stale_reference`).

With `served` (MindSpore's hybrid mode, `Parameter.set_param_ps` on some parameters) only
those go through the servers; verify all-reduces and updates the others as data parallel
does (`numeric.sharded_step`), and the synchronous step still equals one device.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.numeric.dist import DistTensor, distribute
from simulator.numeric.optimizer import update, updates
from simulator.sharding.plan import ShardingPlan

__all__ = ["PsRun", "ps_step", "key_ranges", "pushes", "stale_reference"]


@dataclass(frozen=True)
class PsRun:
    """What verify needs of `parallel.parameter_server`, and its mutations: a dropped push
    (worker `drop_push`'s gradient never reaches the servers); asynchronous pushes applied
    in the reverse of their arrival order (`reorder`). `served`: the parameters on the
    servers (None: all)."""

    servers: int
    sync: bool = True
    drop_push: int | None = None
    reorder: bool = False
    served: frozenset[str] | None = None

    def serves(self, name: str) -> bool:
        """Whether parameter `name` is pushed to and pulled from the servers."""
        return self.served is None or name in self.served


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


def pushes(grads: dict[str, DistTensor]) -> dict[str, list[np.ndarray]]:
    """What each worker pushes of each parameter, in arrival order: its whole gradient."""
    return {n: _pushes(g) for n, g in grads.items()}


def _apply(kind: str, whole: np.ndarray, arrived: list[np.ndarray], lr: float,
           run: PsRun, workers: int) -> np.ndarray:
    """A key range updated by the pushes that arrived: synchronous, one update with their
    sum; asynchronous, one update per push (each the worker's own mean-loss gradient: n
    times its share), in arrival order."""
    if run.sync:
        return update(kind, whole, np.sum(arrived, axis=0), lr)
    scaled = [workers * g for g in arrived]
    return updates(kind, whole, scaled[::-1] if run.reorder else scaled, lr)


def stale_reference(kind: str, params: dict[str, np.ndarray],
                    pushed: dict[str, list[np.ndarray]], lr: float) -> dict[str, np.ndarray]:
    """The bounded-staleness reference of an asynchronous step: one device applying the
    same pushes (each computed on the parameters before any landed), n times each, to each
    whole parameter in arrival order."""
    out = {}
    for name, p in params.items():
        grads = [len(pushed[name]) * g.reshape(p.shape) for g in pushed[name]]
        out[name] = updates(kind, np.asarray(p, dtype=grads[0].dtype), grads, lr)
    return out


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
            pulled[rng] = _apply(kind, whole[rng], arrived, lr, run, len(pushes))
            transfers["ps_pull"] += len(pushes)
        shape = tuple(p.shape)
        new[name] = distribute(pulled.reshape(shape), p.layout, plan.mesh)
        reduced[name] = distribute(summed.reshape(shape), p.layout, plan.mesh)
    return new, reduced, transfers
