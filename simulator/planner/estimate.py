"""A fast estimate of the iteration time of a configuration, to rank the search space
before the event engine times the most promising ones.

The per-layer work is measured, not modelled again: for each (tensor degree, micro-batch
size, sequence parallelism, recompute) the event engine (`simulate()`, as a black box)
times four tiny probes of the same model on one tensor-parallel group, with 1 or 2 layers
and 1 or 2 micro-batches. With T(L, m) = m (E + L X) + O0 + L O1 they give X, one layer's
forward + recompute + backward of one micro-batch (with its tensor-parallel collectives),
E, the embedding, LM head and loss, and O1, one layer's optimizer step. The rest is the
closed form of each mechanism:

- pipeline (Narayanan et al. 2021, Sec. 2.2): with p stages of L/p layers, the last also
  running E, and m micro-batches, 1f1b takes m t_max + (p - 1) t = (m + p - 1) t + m E;
  the interleaved schedule with v chunks shrinks the fill and drain to (p - 1) t / v
  (Sec. 2.2.2, bubble (p - 1)/(v m)); a boundary send costs each fill and drain step;
- data parallelism: the gradient buckets of the last micro-batch are reduced under its
  backward, so only what exceeds that backward is exposed (at least the last bucket);
  with ZeRO >= 1 the updated parameters are all-gathered under the next forward (likewise);
  ZeRO >= 2 reduce-scatters every micro-batch and ZeRO-3 all-gathers each chunk's
  parameters before each forward, recompute and backward (Rajbhandari et al. 2020,
  Sec. 5.2-5.3, Fig. 1), which bounds the step from below when the data-parallel stream
  is busier than the compute stream;
- optimizer: the probes' per-layer step divided by the ZeRO shard; with ZeRO-Offload the
  gradient shard goes down and the parameters come back over PCIe (Ren et al. 2021, Sec. 4).

Collective times come from `simulator.cost.collectives.collective_time_s`, the function
`shardsim comm` reports (CONTRACT section 4), so the estimate prices links as the engine does.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from simulator.config.scenario.schema import DTYPE_BYTES, Scenario
from simulator.cost.collectives import collective_time_s, send_recv_time_s
from simulator.cost.specs import GroupSpec
from simulator.lower.host import offload_step_s
from simulator.lower.state import state_bytes_per_param
from simulator.planner.memory import Workload, gather_bytes, layer_params, storage_bytes
from simulator.planner.space import Config
from simulator.simulation.simulate import simulate

__all__ = ["LayerCosts", "Probes", "estimate_time", "shared_probes"]

_BWD_SHARE = 2.0 / 3.0  # backward's share of forward + backward (twice the forward FLOPs)


@dataclass(frozen=True)
class LayerCosts:
    """Seconds per micro-batch: `layer` (X) and `ends` (E); `opt_layer` (O1) and
    `opt_ends` (O0) per optimizer step, unsharded."""

    layer: float
    ends: float
    opt_layer: float
    opt_ends: float


def _probe_scenario(base: Scenario, cfg: Config, layers: int, micro: int,
                    devices_per_node: int) -> Scenario:
    data = base.model_dump()
    t = cfg.tensor
    per_node = min(devices_per_node, t)
    data["cluster"] = {"nodes": max(1, t // per_node), "devices_per_node": per_node}
    data["model"]["layers"] = layers
    data["training"].update(micro_batch_size=cfg.micro_batch_size,
                            global_batch_size=cfg.micro_batch_size * micro)
    par = data["parallel"]
    par.update(data=1, tensor=t, pipeline=1, schedule="1f1b", virtual_stages=1,
               sequence_parallel=cfg.sequence_parallel, recompute=cfg.recompute,
               optimizer_shard=0)
    par["offload"] = {**par["offload"], "optimizer_states": False}
    return Scenario.model_validate(data)


_SHARED: list[dict[tuple, LayerCosts]] = []  # the active shared store (innermost last)


@contextmanager
def shared_probes(store: dict[tuple, LayerCosts]) -> Iterator[None]:
    """Within the block, the Probes of every search keep their costs in `store`: the
    searches of one capacity question (the same scenario and profile on other device
    counts, `planner.capacity`) measure each probe once."""
    _SHARED.append(store)
    try:
        yield
    finally:
        _SHARED.pop()


class Probes:
    """Per-layer costs measured by tiny simulations, cached by (t, b, sp, recompute) and
    the devices per node of the probe's group."""

    def __init__(self, base: Scenario, hw: Any, devices_per_node: int) -> None:
        self.base, self.hw, self.per_node = base, hw, devices_per_node
        self.cache: dict[tuple, LayerCosts] = _SHARED[-1] if _SHARED else {}
        self.simulations = 0

    def _time(self, cfg: Config, layers: int, micro: int) -> float:

        self.simulations += 1
        sc = _probe_scenario(self.base, cfg, layers, micro, self.per_node)
        return simulate(sc, self.hw).iteration_time_s

    def costs(self, cfg: Config) -> LayerCosts:
        key = (cfg.tensor, cfg.micro_batch_size, cfg.sequence_parallel, cfg.recompute,
               min(self.per_node, cfg.tensor))
        if key not in self.cache:
            t11, t12 = self._time(cfg, 1, 1), self._time(cfg, 1, 2)
            t21, t22 = self._time(cfg, 2, 1), self._time(cfg, 2, 2)
            ex = t12 - t11  # E + X
            x = (t22 - t21) - ex
            o1 = (t21 - t11) - x
            self.cache[key] = LayerCosts(x, ex - x, o1, t11 - ex - o1)
        return self.cache[key]


def _coll(name: str, nbytes: float, size: int, stride: int, per_node: int, hw: Any) -> float:

    return collective_time_s(name, nbytes, GroupSpec(size, stride, per_node), hw)


def _bucketed(name: str, total: float, bucket: float, cfg: Config, per_node: int,
              hw: Any) -> tuple[float, float]:
    """(all buckets, the last bucket) seconds of a data-parallel collective of `total`."""
    if cfg.data == 1 or total <= 0:
        return 0.0, 0.0
    n = max(1, math.ceil(total / bucket))
    one = _coll(name, total / n, cfg.data, cfg.tensor, per_node, hw)
    return n * one, one


def _pipeline_s(cfg: Config, micro: int, stage_s: float, ends_s: float, send_s: float
                ) -> float:
    p, v = cfg.pipeline, cfg.virtual_stages
    fill = (p - 1) * stage_s / (v if cfg.schedule == "interleaved_1f1b" else 1)
    return micro * (stage_s + ends_s) + fill + 2 * (p - 1) * send_s


def _send_s(w: Workload, cfg: Config, per_node: int, hw: Any) -> float:

    if cfg.pipeline == 1:
        return 0.0
    m = w.model
    # an fp8 model's activations cross the stages in bf16, as the lowering sends them
    nbytes = float(storage_bytes(m) * m.seq_length * cfg.micro_batch_size * m.hidden_size)
    nbytes /= cfg.tensor if cfg.sequence_parallel else 1
    return send_recv_time_s(nbytes, cfg.tensor * cfg.data < per_node, hw, per_node)


def _dp_s(w: Workload, cfg: Config, micro: int, stage_s: float, params: float,
          per_node: int, hw: Any) -> tuple[float, float]:
    """(exposed seconds at the end of the step, data-parallel stream seconds per
    micro-batch for ZeRO >= 2) of the gradient and parameter collectives."""
    if cfg.data == 1:
        return 0.0, 0.0
    e, z = DTYPE_BYTES[w.model.dtype], cfg.optimizer_shard
    coll = "reduce_scatter" if z >= 1 else "all_reduce"
    grads, last = _bucketed(coll, params * w.grad_bytes, w.bucket_bytes, cfg, per_node, hw)
    exposed = max(last, grads - _BWD_SHARE * stage_s)
    if z in (1, 2):
        gather, first = _bucketed("all_gather", params * gather_bytes(w, cfg), w.bucket_bytes,
                                  cfg, per_node, hw)
        exposed += max(first, gather - (1 - _BWD_SHARE) * stage_s)
    per_mb = 0.0
    if z >= 2 and micro > 1:
        per_mb = grads
    if z >= 3:
        passes = 3 if cfg.recompute != "none" else 2
        per_mb += passes * _bucketed("all_gather", params * e, w.bucket_bytes, cfg, per_node,
                                     hw)[0]
    return exposed, per_mb


def _optimizer_s(w: Workload, cfg: Config, lc: LayerCosts, params: float, hw: Any) -> float:
    share = cfg.data if cfg.optimizer_shard >= 1 else 1
    if not cfg.offload_optimizer:
        return (lc.opt_layer * w.model.layers / cfg.pipeline + lc.opt_ends) / share
    e = DTYPE_BYTES[w.model.dtype]
    local = params / share
    # the copies down and up, and the host CPU's step as the lowering prices it
    # (`lower.step`: the node's devices share its host sockets)
    per_node = min(cfg.data * cfg.tensor * cfg.pipeline, w.devices_per_node)
    host = offload_step_s(int(local), "bf16" if w.model.dtype == "fp8" else w.model.dtype,
                          w.optimizer, per_node)
    if cfg.offload_nvme:  # the states read and written back (`lower.nvme`)
        states = local * state_bytes_per_param(w.optimizer, w.model.dtype, w.state_dtype,
                                               w.fp8_params) * per_node
        host += states / hw.nvme_read_bytes_per_s + states / hw.nvme_write_bytes_per_s
    return local * (w.grad_bytes + e) / hw.pcie_bandwidth_bytes_per_s + host


def estimate_time(w: Workload, cfg: Config, probes: Probes) -> float:
    """Estimated seconds per iteration of configuration `cfg` (see the module docstring)."""
    lc = probes.costs(cfg)
    hw, per_node = probes.hw, probes.per_node
    micro = w.global_batch // (cfg.micro_batch_size * cfg.data)
    layers = w.model.layers // cfg.pipeline
    stage_s = layers * lc.layer
    params = layers * layer_params(w.model, cfg.tensor)
    pipe = _pipeline_s(cfg, micro, stage_s, lc.ends, _send_s(w, cfg, per_node, hw))
    exposed, dp_per_mb = _dp_s(w, cfg, micro, stage_s, params, per_node, hw)
    busy = max(pipe, micro * dp_per_mb)
    return busy + exposed + _optimizer_s(w, cfg, lc, params, hw)
