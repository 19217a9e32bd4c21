"""The SimPy model: `run(plan) -> Trace`. The only module of shardsim that imports simpy.

Each (device, stream) of the plan is one generator process that runs its tasks in order. A
task starts when its stream is free, its dependencies have finished, every member of its
collective has arrived (rendezvous, full fidelity only), and the link it needs is free.

Links are shared FIFO servers, one per device and kind: 'fabric' (the device's port into
the node's NVLink/HCCS switch) and 'nic' (the device's share of its node's NICs, which the
cost model prices). A transfer holds its link for its whole duration, so a device's
pipeline sends and its gradient buckets queue behind one another on the same NIC. A link is
kept as the time it next falls free: reserving it needs no SimPy event, and requests are
served in the order they are made, which SimPy's (time, priority, sequence) heap makes
deterministic.

With `Plan.link_sharing = 'fair'` a link is shared instead of queued (processor sharing,
the max-min fair share of equal flows: Bertsekas & Gallager, "Data Networks", 2nd ed.,
Sec. 6.5.2): every transfer starts as soon as it may, and while n of them hold one link each
progresses at 1/n of its rate, so two equal flows that start together both end after twice
the time one takes alone. A flow's end is recomputed whenever a flow joins or leaves its
link (the others whose rate changes are interrupted, as compute is under a slowdown below).
A network transfer on a route of the scale-out fat tree (`Task.route`, `Plan.routes`) also
holds the uplinks it climbs through, each a shared link of its own (`cost.fabric`), and runs
at the smallest of its shares; the time it loses against a non-blocking fabric is recorded
per link in `Trace.stalls`.

Events are created lazily: a finished dependency costs nothing to wait for, and a task of
zero duration schedules no timeout, so the event count stays close to one per task.

Overlap is not free where the profile says so (`Plan.slowdown`, the hardware's
`efficiency.overlap_compute_slowdown` s): while a collective or pipeline transfer of a
device runs on one of its communication streams, the kernels of its compute stream progress
at 1/(1+s) of their rate (the communication kernels hold SMs and memory bandwidth: Lee et
al. 2025, arXiv 2507.03114, measure an 18.9% mean slowdown of overlapped compute on A100
and H100). A running compute task is interrupted when the device's communication starts or
stops and resumes at the new rate with the work it has left, so it ends at
start + work + s * (overlapped seconds at the slow rate). Those streams then record when
each transfer starts (one more event where it waits for its link).
"""

from __future__ import annotations

import time
from collections.abc import Generator
from typing import Any

import simpy

from simulator.engine.tasks import Plan, Task
from simulator.engine.trace import Trace

__all__ = ["run", "simpy_event_rate"]

# streams whose tasks are communication kernels on the device (NCCL/HCCL collectives and
# pipeline sends), and the compute-stream phases that are kernels they slow down
COMM_STREAMS = frozenset({"dp", "dp_reduce", "pp_fwd", "pp_bwd"})
KERNEL_PHASES = frozenset({"fwd", "bwd", "recompute", "optimizer"})


class _Model:
    """Per-simulation state: the clock, finish times, waiters, links, rendezvous."""

    def __init__(self, plan: Plan) -> None:
        n = len(plan.tasks)
        self.plan = plan
        self.env = simpy.Environment()
        # events scheduled: each process's start and end, every timeout and succeed (the
        # only ways this model schedules one), counted here rather than by overriding
        # Environment.schedule, which every event would pay a Python call for
        self.scheduled = 2 * len(plan.streams)
        self.done: list[float | None] = [None] * n
        self.ready = [0.0] * n
        self.start = [0.0] * n
        self.blocker = [-1] * n
        self.waiters: dict[int, simpy.Event] = {}
        self.link_free: dict[tuple[int, str], float] = {}
        self.arrivals: dict[int, list] = {}
        # overlap slowdown per device (empty: none), communication tasks running per
        # device, and the compute task running on each: [process, work left, since, rate]
        self.slowdown = {d: s for d, s in zip(plan.devices, plan.slowdown) if s > 0}
        self.talking: dict[int, int] = {}
        self.running: dict[int, list] = {}
        # fair link sharing: the flows holding each link, [process, work left, since]
        self.fair = plan.link_sharing == "fair"
        self.flows: dict[tuple, list[list[Any]]] = {}
        # NICs shared by the devices that use them (fair): device -> (resource, transfers
        # each of its own stands for, how much slower than alone it was priced); resource ->
        # device-alone transfers it carries at full rate at once
        self.nic: dict[int, tuple[tuple, int, float]] = {
            d: (("nic", r), w, k) for d, r, w, k in zip(plan.devices, plan.nic_of,
                                                         plan.nic_weight, plan.nic_priced)
            if self.fair and r >= 0}
        self.slots: dict[tuple, float] = {("nic", r): s for r, s in plan.nic_slots}
        # the fat tree's uplinks (fair): resource -> device-alone transfers it carries at
        # full rate, and what `run` calls its tier; the total weight holding each resource;
        # per task, the seconds it ran slower than priced, by the link that held it back
        self.kind: dict[tuple, str] = {}
        for r, (capacity, name) in enumerate(plan.uplinks):
            self.slots[("up", r)], self.kind[("up", r)] = capacity, name
        self.load: dict[tuple, int] = {}
        self.stalls: dict[int, dict[str, float]] = {}

    def _rendezvous(self, task: Task) -> Generator:
        """Wait until all group_size members of the collective have arrived."""
        entry = self.arrivals.setdefault(task.group, [0, self.env.event()])
        entry[0] += 1
        if entry[0] == task.group_size:
            self.scheduled += 1
            entry[1].succeed()
            del self.arrivals[task.group]
        else:
            yield entry[1]

    def stream(self, tids: tuple[int, ...]) -> Generator:
        # the hot loop of every simulation: attributes bound to locals, no helper call
        # where nothing waits (each task records when it was ready and which dependency,
        # finishing last after that, held it back: -1 for none)
        env, tasks, done, ready = self.env, self.plan.tasks, self.done, self.ready
        link_free, waiters, blocker, starts = self.link_free, self.waiters, self.blocker, \
            self.start
        timeout, event_of = env.timeout, env.event
        slowdown, talking, running, talk = self.slowdown, self.talking, self.running, \
            self._talk
        scheduled = 0
        for tid in tids:
            task = tasks[tid]
            latest = ready[tid] = env.now
            deps = task.deps
            if deps:
                for dep in deps:  # wait for each one not finished yet
                    if done[dep] is None:
                        event = waiters.get(dep)
                        if event is None:
                            event = waiters[dep] = event_of()
                        yield event
                held = -1
                for dep in deps:
                    if done[dep] > latest:  # type: ignore[operator]
                        latest, held = done[dep], dep  # type: ignore[assignment]
                blocker[tid] = held
            if task.group >= 0:
                yield from self._rendezvous(task)
            now = start = env.now
            duration = task.duration_s
            if task.link and self.fair:
                starts[tid] = now
                done[tid] = yield from self._flow(task, duration)
                event = waiters.pop(tid, None)
                if event is not None:
                    scheduled += 1
                    event.succeed()
                continue
            if task.link:
                key = (task.device, task.link)
                start = max(start, link_free.get(key, 0.0))
                link_free[key] = start + duration
            starts[tid] = start
            end = start + duration
            if end > now and task.device in slowdown:
                # a device whose compute and communication share it (module docstring),
                # inline: a generator per task less
                dev, name = task.device, task.stream
                if name in COMM_STREAMS:
                    if start > now:  # waits for its link first
                        scheduled += 1
                        yield timeout(start - now)
                    talk(dev, +1)
                    scheduled += 1
                    yield timeout(duration)
                    talk(dev, -1)
                elif name != "compute" or task.phase not in KERNEL_PHASES:
                    scheduled += 1
                    yield timeout(end - now)
                else:
                    if start > now:
                        scheduled += 1
                        yield timeout(start - now)
                    slow = 1.0 + slowdown[dev]
                    state = running[dev] = [env.active_process, duration, env.now, 1.0]
                    while True:
                        state[2], state[3] = env.now, (1.0 / slow if talking.get(dev) else 1.0)
                        scheduled += 1
                        try:
                            yield timeout(state[1] / state[3])
                            break
                        except simpy.Interrupt:  # the device's communication started or stopped
                            state[1] = max(0.0, state[1] - (env.now - state[2]) * state[3])
                    del running[dev]
                    end = env.now
            elif end > now:
                scheduled += 1
                yield timeout(end - now)
            done[tid] = end
            event = waiters.pop(tid, None)
            if event is not None:
                scheduled += 1
                event.succeed()
        self.scheduled += scheduled


    def _flow(self, task: Task, duration: float) -> Generator[simpy.Event, object, float]:
        """A transfer on a fairly shared link (module docstring): `duration` seconds of work
        at the link's full rate, done at 1/n of it while n flows hold the link; returns
        its end. A NIC its node's devices share (`Plan.nic_of`) carries `slots` transfers
        of a device alone at full rate: while flows of total weight W hold it, each runs
        at min(1, slots / W) of its rate alone, its work alone its priced duration over
        `Plan.nic_priced`. A transfer on a route (`Task.route`) also holds the fat tree's
        uplinks it climbs through (`Plan.routes`), each shared the same way, and runs at
        the smallest of its shares (the bottleneck link's; max-min fair where the flows
        on a link are alike, as the SPMD traffic of one collective is)."""
        env, key, weight, priced = self.env, (task.device, task.link), 1, 1.0
        if task.link == "nic" and task.device in self.nic:
            key, weight, priced = self.nic[task.device]
        holds: list[tuple[tuple, int]] = [(key, weight)]
        factor = 1.0
        if task.route >= 0:
            factor, ups = self.plan.routes[task.route]
            holds += [(("up", r), w) for r, w in ups]
        talks = task.device in self.slowdown and task.stream in COMM_STREAMS
        # [process, work left alone, since, rate, holds, tid, priced (its NIC's share,
        # not the fabric's: the time lost to the fat tree counts as contention), neck]
        me: list[Any] = [env.active_process, duration / (priced * factor), env.now, 1.0,
                         holds, task.tid, priced, ""]
        self._change(me, +1)
        if talks:
            self._talk(task.device, +1)
        while True:
            self.scheduled += 1
            try:
                yield env.timeout(me[1] / me[3])
                break
            except simpy.Interrupt:  # a flow joined or left: `_change` settled our work
                pass
        self._settle(me)
        self._change(me, -1)
        if talks:
            self._talk(task.device, -1)
        return env.now

    def _change(self, me: list, step: int) -> None:
        """Flow `me` joins (+1) or leaves (-1) the links it holds: every other flow on them
        whose rate changes is settled at its old rate and interrupted to wait anew."""
        affected: dict[int, list] = {}
        for key, w in me[4]:
            flows = self.flows.setdefault(key, [])
            for f in flows:
                if f is not me:
                    affected[id(f)] = f
            if step > 0:
                flows.append(me)
            else:
                flows.remove(me)
            self.load[key] = self.load.get(key, 0) + step * w
        if step > 0:
            me[3], me[7] = self._rate(me)
        for f in affected.values():
            rate, neck = self._rate(f)
            if rate != f[3]:
                self._settle(f)
                f[3], f[7] = rate, neck
                self.scheduled += 1
                f[0].interrupt()

    def _rate(self, flow: list) -> tuple[float, str]:
        """The rate (of its own alone) of `flow`: processor sharing over the total weight
        on each link it holds, the smallest; and the link that sets it ('' at full rate)."""
        rate, neck = 1.0, ""
        for key, _w in flow[4]:
            load = self.load[key]
            share = min(1.0, self.slots.get(key, 1.0) / load) if load > 0 else 1.0
            if share < rate:
                rate, neck = share, self.kind.get(key) or ("nic" if "nic" in key else key[1])
        return rate, neck

    def _settle(self, flow: list) -> None:
        """The work `flow` did since it last changed, at its rate; the time it ran slower
        than priced on a non-blocking fabric charged to its bottleneck link
        (`Trace.stalls`)."""
        now = self.env.now
        dt = now - flow[2]
        flow[1] = max(0.0, flow[1] - dt * flow[3])
        flow[2] = now
        lost = dt * (1.0 - flow[3] * flow[6])
        if lost > 0 and flow[7]:
            mine = self.stalls.setdefault(flow[5], {})
            mine[flow[7]] = mine.get(flow[7], 0.0) + lost

    def _talk(self, dev: int, step: int) -> None:
        """One communication task of `dev` more (+1) or less (-1); the compute task running
        there changes rate when the count leaves or reaches zero."""
        before = self.talking.get(dev, 0)
        self.talking[dev] = before + step
        if (before == 0) != (before + step == 0) and dev in self.running:
            self.scheduled += 1
            self.running[dev][0].interrupt()


def run(plan: Plan) -> Trace:
    """Simulate one iteration of `plan`; the returned Trace holds no SimPy object."""
    t0 = time.perf_counter()
    model = _Model(plan)
    for _device, _name, tids in plan.streams:
        model.env.process(model.stream(tids))
    model.env.run()
    if None in model.done:
        unfinished = [t for t, d in enumerate(model.done) if d is None]
        raise AssertionError(f"deadlock: {len(unfinished)} tasks never ran, first "
                             f"{unfinished[0]}")
    stalls = tuple((tid, tuple(sorted(kinds.items())))
                   for tid, kinds in sorted(model.stalls.items()))
    return Trace(start=tuple(model.start), end=tuple(model.done),  # type: ignore[arg-type]
                 ready=tuple(model.ready), blocker=tuple(model.blocker),
                 events=model.scheduled, wall_s=time.perf_counter() - t0, stalls=stalls)


def simpy_event_rate(events: int = 100_000) -> float:
    """Events per second of a bare SimPy loop (one process, unit timeouts) on this machine,
    the ceiling any SimPy model can reach."""
    env = simpy.Environment()

    def loop() -> Generator:
        for _ in range(events):
            yield env.timeout(1.0)

    env.process(loop())
    t0 = time.perf_counter()
    env.run()
    return events / (time.perf_counter() - t0)
