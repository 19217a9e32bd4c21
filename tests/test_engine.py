"""The SimPy engine on hand-written plans: exact start/end times, links, rendezvous."""

from __future__ import annotations

from dataclasses import replace

from pytest import approx

from simulator.engine.core import run, simpy_event_rate
from simulator.engine.tasks import Plan, Task


def _plan(tasks: list[Task], devices: tuple[int, ...] = (0, 1)) -> Plan:
    streams: dict[tuple[int, str], list[int]] = {}
    for task in tasks:
        streams.setdefault((task.device, task.stream), []).append(task.tid)
    return Plan(tasks=tuple(tasks), streams=tuple((d, s, tuple(t)) for (d, s), t in
                                                  streams.items()),
                devices=devices, represents=(1,) * len(devices), stage_of=(0,) * len(devices),
                static_memory=((),) * len(devices), total_devices=len(devices), micro_batches=1)


def test_streams_run_in_order_and_wait_for_dependencies():
    plan = _plan([
        Task(0, 0, "compute", "F", "fwd", 0, 0, 2.0),
        Task(1, 0, "pp_fwd", "send_fwd", "comm", 0, 0, 0.5, deps=(0,)),
        Task(2, 1, "compute", "F", "fwd", 0, 1, 3.0, deps=(1,)),
        Task(3, 0, "compute", "F", "fwd", 1, 0, 2.0),
    ])
    trace = run(plan)
    assert trace.start == (0.0, 2.0, 2.5, 2.0)
    assert trace.end == (2.0, 2.5, 5.5, 4.0)
    assert trace.blocker == (-1, 0, 1, -1)
    assert trace.ready == (0.0, 0.0, 0.0, 2.0)


def test_transfers_on_one_link_queue_first_come_first_served():
    plan = _plan([
        Task(0, 0, "pp_fwd", "send_fwd", "comm", 0, 0, 1.0, link="nic"),
        Task(1, 0, "dp", "grad_bucket", "comm", -1, 0, 1.0, link="nic"),
        Task(2, 1, "dp", "grad_bucket", "comm", -1, 0, 1.0, link="nic"),  # another device
        Task(3, 0, "pp_bwd", "send_bwd", "comm", 0, 0, 1.0, link="fabric"),
    ])
    trace = run(plan)
    assert trace.start == (0.0, 1.0, 0.0, 0.0)


def test_a_collective_starts_when_its_last_member_arrives():
    plan = _plan([
        Task(0, 0, "compute", "B", "bwd", 0, 0, 1.0),
        Task(1, 1, "compute", "B", "bwd", 0, 0, 3.0),
        Task(2, 0, "dp", "grad_bucket", "comm", -1, 0, 2.0, deps=(0,), group=0, group_size=2),
        Task(3, 1, "dp", "grad_bucket", "comm", -1, 0, 2.0, deps=(1,), group=0, group_size=2),
    ])
    trace = run(plan)
    assert trace.start[2] == trace.start[3] == 3.0
    assert trace.end[2] == trace.end[3] == 5.0


def test_same_plan_same_trace_and_few_events():
    tasks = [Task(i, 0, "compute", "F", "fwd", i, 0, 1.0) for i in range(100)]
    first, second = run(_plan(tasks, (0,))), run(_plan(tasks, (0,)))
    assert first == second
    assert first.end[-1] == 100.0
    assert first.events <= 102  # one timeout per task, plus the process start


def test_zero_duration_tasks_schedule_no_timeout():
    tasks = [Task(i, 0, "compute", "F", "fwd", i, 0, 0.0) for i in range(50)]
    assert run(_plan(tasks, (0,))).events <= 2


def test_bare_simpy_rate_is_measured():
    assert simpy_event_rate(2000) > 1e4


def _slowed(tasks: list[Task], slowdown: float) -> Plan:
    return replace(_plan(tasks, devices=(0,)), slowdown=(slowdown,))


def test_compute_beside_a_collective_runs_slower_by_the_overlapped_time():
    # work 4 s from t=0 while the device communicates from 0 to 3: 3/(1+s) of the work done
    # by t=3, the rest at full rate
    s = 0.25
    plan = _slowed([
        Task(0, 0, "compute", "F", "fwd", 0, 0, 4.0),
        Task(1, 0, "dp", "param_gather", "comm", 0, 0, 1.0),
        Task(2, 0, "dp", "param_gather", "comm", 0, 0, 1.0, deps=(3,)),
        Task(3, 0, "dp_reduce", "wait", "comm", 0, 0, 2.0),  # another stream: starts t=2
    ], s)
    trace = run(plan)
    # the reduce (t 0-2) and the gathers (0-1, 2-3) keep communication running 0-3
    assert trace.end[0] == approx(3.0 + (4.0 - 3.0 / (1 + s)))
    assert trace.end[1:] == (1.0, 3.0, 2.0)


def test_overlap_is_free_without_a_slowdown_and_for_transfers_that_do_not_overlap():
    tasks = [Task(0, 0, "compute", "F", "fwd", 0, 0, 2.0),
             Task(1, 0, "dp", "grad_bucket", "comm", 0, 0, 1.0, deps=(0,)),
             Task(2, 0, "compute", "B", "bwd", 0, 0, 0.5, deps=(1,))]
    assert run(_slowed(tasks, 0.0)).end == run(_slowed(tasks, 0.3)).end == (2.0, 3.0, 3.5)
    beside = [*tasks[:2], Task(2, 0, "compute", "B", "bwd", 0, 0, 0.5)]
    assert run(_slowed(beside, 0.0)).end[2] == 2.5
    assert run(_slowed(beside, 0.3)).end[2] == approx(2.0 + 0.5 * 1.3)  # all of it beside


def _fair(tasks: list[Task]) -> Plan:
    return replace(_plan(tasks), link_sharing="fair")


def test_two_equal_flows_on_one_link_each_take_twice_as_long():
    """Processor sharing: two 1 s transfers that start together on one NIC each get half
    of it and both end at 2 s (FIFO: the second starts at 1 s); a transfer on another link
    or another device's NIC is not slowed."""
    tasks = [
        Task(0, 0, "pp_fwd", "send_fwd", "comm", 0, 0, 1.0, link="nic"),
        Task(1, 0, "dp", "grad_bucket", "comm", -1, 0, 1.0, link="nic"),
        Task(2, 1, "dp", "grad_bucket", "comm", -1, 0, 1.0, link="nic"),
        Task(3, 0, "pp_bwd", "send_bwd", "comm", 0, 0, 1.0, link="fabric"),
    ]
    fair, fifo = run(_fair(tasks)), run(_plan(tasks))
    assert fair.start == (0.0, 0.0, 0.0, 0.0) and fair.end == (2.0, 2.0, 1.0, 1.0)
    assert fifo.start == (0.0, 1.0, 0.0, 0.0) and fifo.end == (1.0, 2.0, 1.0, 1.0)


def test_a_flow_that_joins_halfway_shares_what_is_left():
    """A (2 s alone) from 0, B (1 s alone) from 1 s: alone until 1 s (A has 1 s of work
    left), then half each; B's 1 s of work ends at 3 s, as does A's (1 s at half rate),
    then nothing is left. C (1 s) from 0.5 s on a three-flow link: A 0-0.5 alone, then
    A, C at half until B joins at 1 s; shares as closed forms below."""
    two = run(_fair([
        Task(0, 0, "dp", "grad_bucket", "comm", -1, 0, 2.0, link="nic"),
        Task(1, 0, "compute", "B", "bwd", 0, 0, 1.0),
        Task(2, 0, "pp_bwd", "send_bwd", "comm", 0, 0, 1.0, deps=(1,), link="nic"),
    ]))
    assert two.start[2] == 1.0 and two.end[0] == approx(3.0) and two.end[2] == approx(3.0)
    three = run(_fair([
        Task(0, 0, "dp", "grad_bucket", "comm", -1, 0, 2.0, link="nic"),
        Task(1, 0, "compute", "B", "bwd", 0, 0, 0.5),
        Task(2, 0, "pp_bwd", "send_bwd", "comm", 0, 0, 1.0, deps=(1,), link="nic"),
        Task(3, 0, "offload", "h2d", "offload", 0, 0, 1.0),
        Task(4, 0, "pp_fwd", "send_fwd", "comm", 0, 0, 0.25, deps=(3,), link="nic"),
    ]))
    # 0-0.5: A alone (1.5 left); 0.5-1: A, C at 1/2 (A 1.25, C 0.75 left); from 1: A, C, D
    # at 1/3: D's 0.25 takes 0.75 s (ends 1.75; A 1.0, C 0.5 left); then A, C at 1/2: C ends
    # after 1 s (2.75; A 0.5 left), A alone 0.5 s more (3.25)
    assert three.end[4] == approx(1.75) and three.end[2] == approx(2.75)
    assert three.end[0] == approx(3.25)
