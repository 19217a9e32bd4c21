"""Link figures fitted to nccl-tests logs through the collective model `shardsim comm` and
`run` use (`simulator.cost.collectives.collective_choice`, NCCL's tuning model where the
profile has an `nccl:` block).

The fitted figures are the profile's own knobs of that model: the effective bus bandwidths
(`efficiency.intra_node_bus_fraction`, `efficiency.inter_node_bus_fraction`), NVLink SHARP's
share of it and its latency (`intra_node.nvls`), and the per-step latencies of the profile
(`intra_node.latency_us`, `inter_node.latency_us`: all_to_all and send_recv, and every
collective of a profile without NCCL's model). Each figure is fitted to the logs of its own
links: the NVLink figures and NCCL's fixed overhead (`nccl.overhead_us`) to the logs inside
one node, the network figures and the further overhead across nodes
(`nccl.net_overhead_us`) to the logs across nodes; so a log across nodes, whose ring is as
fast as its slower link, does not move the NVLink figures. A figure
is fitted only where those logs cover it: changing it must change the modelled time of at
least one of their points. The loss is the mean squared log of modelled over measured time
over those points, so a 10 us collective and a 10 ms one weigh alike; the figures are
fitted one at a time, in the order below, twice round (coordinate descent), each over its
whole allowed range, then refined together by Nelder and Mead's simplex.

A base profile with a measured all_reduce curve inside a node (`intra_node.allreduce_busbw_GBps`,
which prices every ring inside a node in place of the model) has it replaced by the logged
all_reduce curve of the most ranks inside one node, when there is one.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from simulator.calibrate.search import minimise, simplex
from simulator.calibrate.values import get_value, with_value
from simulator.config.hardware.schema import HardwareProfile
from simulator.config.measurements import NcclLog
from simulator.cost.collectives import collective_choice
from simulator.cost.specs import GroupSpec

__all__ = ["CommFit", "fit_comm", "group_of", "model_time_s", "CURVE_KEY"]

CURVE_KEY = "intra_node.allreduce_busbw_GBps"
# (dotted key, the logs it is fitted to, lower bound, upper bound, digits kept): the schema's
# ranges, latencies from 0.05 us (below any measured step) to 1 ms
_PARAMS: tuple[tuple[str, str, float, float, int], ...] = (
    ("efficiency.intra_node_bus_fraction", "intra", 0.02, 1.0, 3),
    ("intra_node.nvls.efficiency", "intra", 0.02, 1.0, 3),
    ("efficiency.inter_node_bus_fraction", "inter", 0.02, 1.0, 3),
    ("nccl.overhead_us", "intra", 0.01, 1000.0, 2),
    ("nccl.net_overhead_us", "inter", 0.01, 1000.0, 2),
    ("intra_node.latency_us", "intra", 0.05, 1000.0, 2),
    ("intra_node.nvls.latency_us", "intra", 0.05, 1000.0, 2),
    ("inter_node.latency_us", "inter", 0.05, 1000.0, 2),
)
_ROUNDS = 2
_MIN_BUSBW = 1e-3  # GB/s, the profile schema's least bandwidth


@dataclass(frozen=True)
class CommFit:
    """The fitted profile, {key: value} of what was replaced, {key: the logs that cover it},
    the loss before and after."""

    hw: HardwareProfile
    values: dict[str, object]
    sources: dict[str, tuple[str, ...]]
    loss_before: float
    loss_after: float


def group_of(log: NcclLog, hw: HardwareProfile) -> GroupSpec:
    """The ranks of `log` as a group: its ranks per node, or the profile's node size."""
    per_node = log.ranks_per_node or hw.devices_per_node_default
    return GroupSpec(size=log.ranks, stride=1, devices_per_node=min(per_node, log.ranks))


def model_time_s(log: NcclLog, nbytes: float, hw: HardwareProfile) -> float:
    """The modelled time of one point of `log`, as `shardsim comm` prices it."""
    return collective_choice(log.collective, nbytes, group_of(log, hw), hw).time_s


def _loss(logs: tuple[NcclLog, ...], hw: HardwareProfile) -> float:
    errors = [math.log(model_time_s(log, p.nbytes, hw) / (p.time_us * 1e-6))
              for log in logs for p in log.points]
    return sum(e * e for e in errors) / len(errors)


def _covering(key: str, lo: float, hi: float, logs: tuple[NcclLog, ...],
              hw: HardwareProfile) -> tuple[str, ...]:
    """The logs whose modelled times move when `key` moves (empty: not covered)."""
    value = get_value(hw, key)
    if value is None:
        return ()
    moved = [with_value(hw, key, min(max(x, lo), hi)) for x in (value / 2, value * 2 or 1.0)]
    out = []
    for log in logs:
        for p in log.points:
            base = model_time_s(log, p.nbytes, hw)
            if any(abs(model_time_s(log, p.nbytes, m) - base) > 1e-9 * base for m in moved):
                out.append(log.source)
                break
    return tuple(out)


def _domain(logs: tuple[NcclLog, ...], hw: HardwareProfile, domain: str
            ) -> tuple[NcclLog, ...]:
    """The logs inside one node ('intra'), across nodes ('inter'), or all of them."""
    if domain == "all":
        return logs
    return tuple(x for x in logs if group_of(x, hw).crosses_nodes == (domain == "inter"))


def measured_curve(logs: tuple[NcclLog, ...], hw: HardwareProfile
                   ) -> tuple[str, tuple[tuple[float, float], ...]] | None:
    """(source, [(bytes, busbw GB/s)]) of the intra-node all_reduce log of most ranks,
    busbw recomputed from bytes and time (the printed one has two decimals), from the first
    size whose busbw reaches the schema's 0.001 GB/s."""
    inside = [x for x in _domain(logs, hw, "intra") if x.collective == "all_reduce"]
    if not inside:
        return None
    log = max(inside, key=lambda x: x.ranks)
    factor = 2 * (log.ranks - 1) / log.ranks
    points = ((float(p.nbytes), float(f"{factor * p.nbytes / p.time_us / 1e3:.5g}"))
              for p in log.points)
    # the schema's floor of 0.001 GB/s: below it (a few bytes) the curve's first point holds
    return log.source, tuple((n, bw) for n, bw in points if bw >= _MIN_BUSBW)


def _comm_loss(logs: tuple[NcclLog, ...], hw: HardwareProfile, key: str
               ) -> Callable[[float], float]:
    return lambda x: _loss(logs, with_value(hw, key, x))


def _fit_group(logs: tuple[NcclLog, ...], hw: HardwareProfile,
               params: list[tuple[str, float, float, int, tuple[str, ...]]]) -> HardwareProfile:
    """Fit `params` to `logs`: coordinate descent over each one's whole range (a grid, so
    that it does not stop where the modelled algorithm switches), then Nelder-Mead's simplex
    over them together (the figures are coupled: an all_reduce's small-size time is NCCL's
    overhead plus NVLS's latency), then each rounded to its digits."""
    if not params:
        return hw
    for _ in range(_ROUNDS):
        for key, lo, hi, _digits, _covers in params:
            hw = with_value(hw, key, minimise(_comm_loss(logs, hw, key), lo, hi))
    keys = [p[0] for p in params]

    def joint(x: list[float]) -> float:
        moved = hw
        for key, value in zip(keys, x):
            moved = with_value(moved, key, value)
        return _loss(logs, moved)

    best = simplex(joint, [float(get_value(hw, k)) for k in keys], [p[1] for p in params],
                   [p[2] for p in params])
    for (key, _lo, _hi, digits, _covers), value in zip(params, best):
        hw = with_value(hw, key, round(value, digits) or 10.0 ** -digits)
    return hw


def fit_comm(logs: tuple[NcclLog, ...], hw: HardwareProfile) -> CommFit:
    """Fit the figures the logs cover (see the module docstring)."""
    values: dict[str, object] = {}
    sources: dict[str, tuple[str, ...]] = {}
    before = _loss(logs, hw)
    curve = measured_curve(logs, hw) if hw.intra_node.allreduce_busbw_GBps else None
    if curve is not None:
        hw = with_value(hw, CURVE_KEY, curve[1])
        values[CURVE_KEY], sources[CURVE_KEY] = curve[1], (curve[0],)
    for domain in ("intra", "inter"):
        mine = _domain(logs, hw, domain)
        params = [(k, lo, hi, digits, _covering(k, lo, hi, mine, hw))
                  for k, d, lo, hi, digits in _PARAMS if d == domain and mine]
        params = [p for p in params if p[4]]
        hw = _fit_group(mine, hw, params)
        for key, _lo, _hi, _digits, covers in params:
            values[key], sources[key] = get_value(hw, key), covers
    return CommFit(hw, values, sources, before, _loss(logs, hw))
