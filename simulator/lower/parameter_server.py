"""`parallel.mode: parameter_server` (MindSpore's parameter server training, Li et al. OSDI
2014): the data-parallel collectives replaced by pushes to and pulls from the servers
(closed forms: simulator/cost/parameter_server.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from simulator.config.hardware import load_profile
from simulator.cost.parameter_server import PsLinks, ps_links, server_update_s, transfer_s
from simulator.errors import InputError
from simulator.lower.data_parallel import Bucket, DataParallel
from simulator.lower.state import optimizer_spec

if TYPE_CHECKING:
    from simulator.lower.lowering import Lowering

__all__ = ["ParameterServer"]


class ParameterServer(DataParallel):
    """`parallel.mode: parameter_server`: push the last micro-batch's gradient buckets to
    the servers under the backward, the servers sum and update, the workers pull the
    parameters. Synchronous: every worker transfers at once (the servers' NICs take n/k of
    everything) and waits for the sum of all n pushes. Asynchronous: a worker's transfers
    see its own NIC and the servers' share of one worker, its pull waits for its own update
    only, and the servers serving all n workers once per period bound the period (a task
    on the `ps_server` stream from the start of the iteration).

    With `parameter_server.parameters` (MindSpore's hybrid mode: `Parameter.set_param_ps`
    on some parameters) only those are pushed, updated on the servers and pulled; the
    others' gradients are all-reduced among the workers bucket by bucket as without
    servers (`_whole_buckets`), and each worker updates them itself, under the servers'
    round, holding their optimizer states."""

    collective = "ps_push"
    remote_optimizer = True

    def __init__(self, low: Lowering) -> None:
        spec = low.par.parameter_server
        self.workers, self.servers, self.sync = low.ranks.data, spec.servers, spec.sync
        self.links: PsLinks = ps_links(low.costs.hardware, low.ranks.devices_per_node,
                                       _server_profile(low), spec.server_nic_Gbps)
        super().__init__(low)
        self.link = "nic"

    def sharded(self, vs: int) -> tuple[int, ...]:
        """Parameter elements of each backward piece that go to the servers."""
        work = self.low.work[vs]
        if not work.worker_params:
            return work.piece_params
        return tuple(n - w for n, w in zip(work.piece_params, work.piece_worker, strict=True))

    def _whole_buckets(self, vs: int) -> tuple[Bucket, ...]:
        """All-reduce buckets of the gradients the workers keep (not on the servers)."""
        work = self.low.work[vs]
        if not work.worker_params:
            return ()
        return tuple(Bucket(i, nb, self.low.costs.collective_s("all_reduce", nb, self.group),
                            n)
                     for i, nb, n in self._runs(vs, "all_reduce", work.piece_worker))

    def worker_params(self) -> int:
        """Parameter elements a worker all-reduces and updates itself."""
        return sum(w.worker_params for w in self.low.work)

    def _buckets(self, vs: int) -> tuple[Bucket, ...]:
        return tuple(Bucket(i, nb, self._transfer_s(nb), n)
                     for i, nb, n in self._runs(vs, "all_reduce"))

    def _transfer_s(self, nbytes: float) -> float:
        return transfer_s(nbytes, self.workers, self.servers, self.links, self.sync)

    def _update_s(self, params: float, pushes: int) -> float:
        return server_update_s(params, pushes, self.servers, self.low.sc.training.optimizer,
                               self.low.ge, self.links)

    def server_round_s(self, params: float) -> float:
        """Asynchronous: seconds the servers need per period to take every worker's push,
        answer every pull and apply every update (the slowest of their NIC directions and
        their memory, each serving all n workers)."""
        n, k, low = self.workers, self.servers, self.low
        nic_in = n * params * low.ge / (k * self.links.server_Bps)
        nic_out = n * params * low.e / (k * self.links.server_Bps)
        return max(nic_in, nic_out, n * self._update_s(params, 1))

    def remote_step(self, dev: int, params: int, deps: tuple[int, ...]) -> int:
        low = self.low
        mine = self.worker_params()
        params -= mine
        pushes = self.workers if self.sync else 1
        update = low.b.add(("dp", dev, "ps_update"), device=dev, stream="dp", name="ps_update",
                           phase="optimizer", duration_s=self._update_s(params, pushes),
                           deps=deps, link=self.link)
        pull = self.emit(dev, "ps_pull", "ps_pull", params * low.e,
                         self._transfer_s(params * low.e), (update,), ("pull",))
        waits: tuple[int, ...] = (pull,)
        if mine:  # the workers' own parameters, updated on the device under the servers' round
            spec = optimizer_spec(mine, low.prog.dtype, low.sc.training.optimizer, 0, 1.0,
                                  low.ge, low.state_dtype, low.fp8_params)
            waits += (low.b.add(("O", dev, "worker"), device=dev, stream="compute",
                                name="worker_opt", phase="optimizer",
                                duration_s=low.costs.compute_s(spec), deps=deps),)
        if not self.sync:
            waits += (low.b.add(("dp", dev, "ps_serve"), device=dev, stream="ps_server",
                                name="ps_serve", phase="comm",
                                duration_s=self.server_round_s(params)),)
        return low.b.add(("O", dev), device=dev, stream="compute", name="opt",
                         phase="optimizer", duration_s=0.0, deps=waits)

    def extras(self) -> tuple[tuple[str, object], ...]:
        low = self.low
        mine = self.worker_params()
        params = sum(w.params for w in low.work) - mine
        push, pull = params * low.ge, params * low.e
        return (("parameter_server", {
            "workers": self.workers, "servers": self.servers, "sync": self.sync,
            "push_bytes_per_worker": push, "pull_bytes_per_worker": pull,
            "bytes_in_per_server": self.workers * push / self.servers,
            "bytes_out_per_server": self.workers * pull / self.servers,
            "server_update_s": self._update_s(params, self.workers if self.sync else 1),
            "server_round_s": None if self.sync else self.server_round_s(params),
            "bottleneck": "server_nic" if self.workers * self.links.worker_Bps
            > self.servers * self.links.server_Bps else "worker_nic",
            # Li et al. 2014 Sec. 4.3: with n workers at one rate, the other n-1 push once
            # between a worker's pull and its push
            "staleness_updates": 0 if self.sync else self.workers - 1,
            # MindSpore's hybrid mode: elements on the servers, and all-reduced by the workers
            "served_params": params, "all_reduced_params": mine}),)


def _server_profile(low: Lowering):
    """The hardware profile of the server hosts (`parallel.parameter_server.server_hardware`)."""

    name = low.par.parameter_server.server_hardware
    try:
        return load_profile(name)
    except InputError as exc:
        raise InputError(low.sc.source, "parallel.parameter_server.server_hardware",
                         exc.message) from None
