"""How much work a command will do, estimated from the scenario alone, before doing it.

`run` simulates one task per kernel group, message and gradient bucket on each simulated
device; a typo one key away from a real scenario (a batch of 2e9 sequences, 10 kB gradient
buckets on a 175B model) would keep it busy for hours. `estimate_run` counts those tasks
from the scenario (no schedule internals) so the CLI can refuse with the estimate, the key
that drives it and the flag that raises the limit; `estimate_verify` does the same for the
numpy devices of `verify`.

The counts are estimates (within a small factor of the engine's event count for the bundled
scenarios, see tests/test_budget.py), not the engine's own.
"""

from __future__ import annotations

import math

from simulator.config.scenario.schema import Scenario, TransformerModel
from simulator.limits import (
    DEFAULT_MAX_EVENTS,
    DEFAULT_MAX_LAYOUT_PAIRS,
    DEFAULT_MAX_SIGNATURES,
    DEFAULT_MAX_VERIFY_DEVICES,
    DEFAULT_MAX_VERIFY_GB,
    DEFAULT_MAX_VERIFY_GFLOP,
    Estimate,
    check_budget,
    estimate_propagation,
    estimate_signatures,
)
from simulator.lower.buckets import COLLAPSE_MIN
from simulator.lower.pipeline import steady_window
from simulator.models.model_graph import planned_graph
from simulator.models.opgraph import graph_model
from simulator.models.params import transformer_params
from simulator.models.registry import family
from simulator.models.transformer import transformer_model
from simulator.program.graph_program import graph_model_flops

__all__ = ["Estimate", "estimate_run", "estimate_every_micro_batch", "estimate_verify",
           "check_budget", "shortened_run",
           "DEFAULT_MAX_EVENTS", "DEFAULT_MAX_VERIFY_DEVICES", "DEFAULT_MAX_VERIFY_GFLOP",
           "DEFAULT_MAX_VERIFY_GB", "STEADY_MIN_EVENTS", "estimate_verify_gflop",
           "estimate_verify_gb", "estimate_propagation",
           "estimate_signatures", "DEFAULT_MAX_LAYOUT_PAIRS", "DEFAULT_MAX_SIGNATURES"]

# Above this many events for every micro-batch, `run` simulates a shortened steady state
# twice and extends it (`shortened_run`, `simulator.simulation.simulate`); below, it simulates every
# micro-batch, so the trace and timeline files show them all (a few seconds at most).
STEADY_MIN_EVENTS = 100_000

# Per micro-batch and simulated device: a forward and a backward task, and on a pipeline the
# send and receive of the activation and of its gradient (Narayanan et al. 2021, sec. 2.2).
_TASKS_PER_MICRO = 2
_P2P_PER_MICRO = 4
# parameter tensors per transformer layer (QKV, projection, two FFN weights, biases, norms),
# one collective each under comm_fusion.mode=none (Megatron-LM GPT layer, 12 tensors)
_TENSORS_PER_LAYER = 12
_GRAD_BYTES = 4  # an fp32 gradient, the largest any stack keeps


def transformer_param_count(m: TransformerModel, expert: int = 1) -> int:
    """Parameters one tensor-and-pipeline shard's worth of devices holds (with a mixture
    of experts, every `every`-th layer's FFN is `experts / expert` FFNs per device): the
    program's count (`models.params`)."""
    return transformer_params(m, expert=expert).total


def _reduction_kind(s: Scenario) -> str:
    """The collective that reduces the gradients (`parallel.comm_fusion.<kind>` fuses it)."""
    return "all_reduce" if s.parallel.optimizer_shard == 0 else "reduce_scatter"


def _buckets(s: Scenario, kind: str | None = None) -> int:
    """Gradient buckets per simulated device under the fusion rule of collective `kind`
    (its own `comm_fusion.<kind>` entry where given; default: the gradient reduction)."""
    if not family(s.model).layered:
        return 0
    m, p = transformer_model(s.model), s.parallel
    layers = m.layers // p.pipeline or 1
    mode, bucket_mb, _ = p.comm_fusion.of(kind or _reduction_kind(s))
    if mode == "index":
        return layers + 1
    if mode == "none":
        return (layers + 1) * _TENSORS_PER_LAYER
    grad_bytes = transformer_param_count(m, p.expert_axis) * _GRAD_BYTES / (p.tensor * p.pipeline)
    return int(-(-grad_bytes // (bucket_mb * 1e6)))


def _bucket_tasks(s: Scenario, fidelity: str, other_tasks: int) -> tuple[int, int, bool]:
    """(tasks of the data-parallel collectives per simulated device, gradient buckets,
    whether identical buckets run as one task): a reduction per bucket, or about three per
    backward piece when its buckets are collapsed (COLLAPSE_MIN, `lower.lowering`, and
    only when that saves more tasks than the device's `other_tasks` plus the collapsed
    ones, the cost of the second simulation that cuts them, as `simulator.simulation.simulate`
    decides); with optimizer sharding, a parameter gather per bucket as well."""
    n, p = _buckets(s), s.parallel
    pieces = (transformer_model(s.model).layers // p.pipeline or 1) + 1 \
        if family(s.model).layered else 1
    gathers = _buckets(s, "all_gather") if p.optimizer_shard else 0
    overlapped_gather = (p.optimizer_shard in (1, 2) and p.overlap.param_gather
                         and not p.offload.optimizer_states)  # one task per bucket
    if (fidelity == "representative"
            and p.comm_fusion.of(_reduction_kind(s))[0] in ("size", "auto")
            and n >= COLLAPSE_MIN * pieces and not overlapped_gather
            and n - 3 * pieces > other_tasks + 3 * pieces):
        return 3 * pieces + gathers, n, True
    return n + gathers, n, False


def _bucket_key(s: Scenario) -> tuple[str, float, int]:
    """The `bucket_mb` key behind the most buckets (a per-kind entry where one is given),
    its value in MB and its buckets per simulated device."""
    f = s.parallel.comm_fusion
    kinds = [_reduction_kind(s)] + (["all_gather"] if s.parallel.optimizer_shard else [])
    best = max(kinds, key=lambda k: _buckets(s, k))
    own = getattr(f, best)
    if own is not None and own.mode != "auto" and own.bucket_mb is not None:
        return f"parallel.comm_fusion.{best}.bucket_mb", own.bucket_mb, _buckets(s, best)
    return "parallel.comm_fusion.bucket_mb", f.bucket_mb, _buckets(s, best)


def shortened_run(s: Scenario, fidelity: str = "representative") -> tuple[int, int] | None:
    """(micro-batches of the shortened run, period in micro-batches) when `run` simulates
    the steady state of the pipeline shortened (that run and one with a period more) and
    extends it to the scenario's micro-batches: when the schedule has a steady period
    (`lower.pipeline.steady_window`), every micro-batch would take more than
    STEADY_MIN_EVENTS events, and the two shortened runs fewer. None: every micro-batch is
    simulated."""
    p = s.parallel
    window = steady_window(p.schedule, p.pipeline, s.grad_accum_steps, p.virtual_stages)
    if window is None:
        return None
    every = _estimate(s, fidelity, s.grad_accum_steps).count
    short, period = window
    both = (_estimate(s, fidelity, short).count + _estimate(s, fidelity, short + period).count)
    return window if both < every and every > STEADY_MIN_EVENTS else None


def estimate_run(s: Scenario, fidelity: str = "representative") -> Estimate:
    """Events `run` will simulate, and the key that contributes most: every micro-batch, or
    the two shortened runs of `shortened_run`; under `cluster.jitter`, each jitter sample
    simulated in full besides."""
    jitter = s.cluster.jitter
    if jitter is not None:
        calm = s.model_copy(update={"cluster": s.cluster.model_copy(update={"jitter": None})})
        one, every = estimate_run(calm, fidelity), _estimate(calm, fidelity,
                                                             calm.grad_accum_steps)
        if one.count == every.count:  # the step, then each jitter sample, in full
            steps = 1 + jitter.samples
            return Estimate(one.count * steps, "cluster.jitter.samples",
                            f"{steps} steps (1 + {jitter.samples} jitter samples) of "
                            f"{one.count:,} tasks: {one.detail}")
        return Estimate(one.count + every.count * jitter.samples, "cluster.jitter.samples",
                        f"the step ({one.count:,} tasks: {one.detail}) and "
                        f"{jitter.samples} jitter samples of {every.count:,} tasks each, "
                        f"every micro-batch simulated")
    window = shortened_run(s, fidelity)
    if window is None:
        return _estimate(s, fidelity, s.grad_accum_steps)
    short, period = window
    first, second = _estimate(s, fidelity, short), _estimate(s, fidelity, short + period)
    return Estimate(first.count + second.count, second.key,
                    f"{second.detail}; the steady state of {s.grad_accum_steps:,} "
                    f"micro-batches is simulated for {short} and {short + period} and "
                    f"extended")


def estimate_every_micro_batch(s: Scenario, fidelity: str = "representative") -> Estimate:
    """Events of simulating every micro-batch (what `run` does when the shortened runs of
    `shortened_run` do not repeat exactly)."""
    est = _estimate(s, fidelity, s.grad_accum_steps)
    return Estimate(est.count, est.key, f"{est.detail}; the steady state of the pipeline "
                    f"does not repeat exactly (a queue that keeps growing, such as a "
                    f"data-parallel stream slower than the compute), so every micro-batch "
                    f"is simulated")


def _estimate(s: Scenario, fidelity: str, micro: int) -> Estimate:
    """Events of one simulated run of `micro` micro-batches per replica."""
    p = s.parallel
    if family(s.model).writes_ops:
        ops, micro = len(graph_model(s.model).ops), max(1, micro)
        count = ops * 2 * micro * (s.devices if fidelity == "full" else 1)
        if micro > 1:
            return Estimate(count, "parallel.micro_batches", f"{micro} micro-batches x "
                            f"{ops} operators, forward and backward")
        return Estimate(count, "model.ops", f"{ops} operators")
    devices = s.devices if fidelity == "full" else p.pipeline
    micro = max(1, micro)
    per_micro = p.virtual_stages * (_TASKS_PER_MICRO + (_P2P_PER_MICRO if p.pipeline > 1
                                                        else 0))
    # the last micro-batch's backward runs piece by piece (a task per layer) where its
    # gradient buckets leave as their layers finish (lower.lowering, backward `split`)
    split = transformer_model(s.model).layers // p.pipeline if (
        family(s.model).layered and p.overlap.grad_reduce and p.data > 1) else 0
    compute = devices * (micro * per_micro + split)
    tasks, n, collapsed = _bucket_tasks(s, fidelity, micro * per_micro)
    buckets = devices * tasks
    # collapsed buckets: one simulation finds where other transfers cut them, one runs
    total = (compute + buckets) * (2 if collapsed else 1)
    where = "all devices (--fidelity full)" if fidelity == "full" else "pipeline stages"
    if buckets > compute:
        key, mb, n = _bucket_key(s)
        return Estimate(total, key,
                        f"{n} gradient buckets of {mb:g} MB on each of "
                        f"{devices} simulated devices ({where})"
                        + ("; identical ones run as one task" if collapsed else ""))
    return Estimate(total, "training.global_batch_size",
                    f"{micro} micro-batches x {per_micro} tasks on each of {devices} "
                    f"simulated devices ({where})")


def estimate_verify(s: Scenario) -> Estimate:
    """Numpy devices `verify` runs (pipeline stages are composed, so data x tensor)."""
    if family(s.model).writes_ops:
        n = 1
        for size in (graph_model(s.model).mesh or {}).values():
            n *= size
        return Estimate(n, "model.mesh", "devices of the graph's mesh")
    p = s.parallel
    if p.context > 1:  # each context rank is a numpy device with its sequence chunk
        return Estimate(p.data * p.tensor * p.context, "parallel.data",
                        f"parallel.data*tensor*context = {p.data}*{p.tensor}*{p.context} "
                        f"numpy devices")
    return Estimate(p.data * p.tensor, "parallel.data",
                    f"parallel.data*tensor = {p.data}*{p.tensor} numpy devices")


def estimate_verify_gflop(s: Scenario) -> Estimate | None:
    """Matrix GFLOP `verify` runs for an operator graph (None for the other model types,
    which verify shrinks): twice the graph's forward and backward contractions (the sharded
    run and the single-device reference)."""
    if not family(s.model).writes_ops:
        return None

    graph, _ = planned_graph(s)
    micro = min(s.grad_accum_steps, 2)  # verify runs two micro-batches (models.cases)
    gflop = 2 * graph_model_flops(graph, micro) / 1e9
    key, shapes = _shapes_key(s)
    return Estimate(math.ceil(gflop), key,
                    "matrix GFLOP of the graph's forward and backward, run sharded and on one "
                    f"device at the shapes {shapes}")


def estimate_verify_gb(s: Scenario) -> Estimate | None:
    """GB of tensors `verify` holds for an operator graph (None for the other model types,
    which verify shrinks): every tensor of the graph (inputs, parameters, every operator's
    output) in float64, its gradient too, once on the single-device reference and once
    spread over the sharded devices; rounded up to whole GB."""
    if not family(s.model).writes_ops:
        return None

    graph, _ = planned_graph(s)
    elements = sum(math.prod(t.shape) for t in graph.tensors.values())
    gb = 2 * 2 * 8 * elements / 1e9
    key, shapes = _shapes_key(s)
    return Estimate(math.ceil(gb), key,
                    "float64 values and gradients of every tensor of the graph, on one device "
                    f"and sharded, at the shapes {shapes}")


def _shapes_key(s: Scenario) -> tuple[str, str]:
    """The key that sets an operator graph's shapes, and the shapes in words: its global
    batch where given (which rescales model.tensors), else model.tensors."""
    if "global_batch_size" in s.training.model_fields_set:
        return "training.global_batch_size", (f"training.global_batch_size="
                                              f"{s.training.global_batch_size} gives")
    return "model.tensors", "model.tensors gives"
