"""Rules of the mesh axes beyond data x tensor x pipeline: the parameter server, context
parallelism and 2-D / 3-D tensor parallelism (each rule yields (dotted key, message)
problems; `scenario.rules.check_rules` runs them all; what a model's type needs of an axis is
its class's answer, `schema_models.ModelConfig`)."""

from __future__ import annotations

from collections.abc import Iterator

from simulator.config.scenario.rule_helpers import Problem
from simulator.config.scenario.schema import ParameterServerSpec, Scenario

__all__ = ["parameter_server", "context", "tensor_nd"]


def parameter_server(s: Scenario) -> Iterator[Problem]:
    """Parameter server training is data parallel (MindSpore: workers run the whole model
    and push gradients; the servers own the optimizer): no other split, no sharded or
    offloaded optimizer, and the `parameter_server` block only in that mode."""
    p = s.parallel
    if p.mode != "parameter_server":
        if p.parameter_server != ParameterServerSpec():
            yield "parallel.parameter_server", (
                f"applies only with parallel.mode: parameter_server (found mode {p.mode})")
        return
    if s.model.writes_ops:
        yield "parallel.mode", ("parameter_server needs a model the workers replicate "
                                "(transformer, mlp, resnet); a graph model's split is its "
                                "model.mesh and strategies (allowed: semi_auto, auto)")
    for key, value, allowed in (("parallel.tensor", p.tensor, 1),
                                ("parallel.pipeline", p.pipeline, 1),
                                ("parallel.expert", p.expert, 1),
                                ("parallel.context", p.context, 1),
                                ("parallel.optimizer_shard", p.optimizer_shard, 0)):
        if value != allowed:
            yield key, (f"{value} does not apply with parallel.mode: parameter_server, whose "
                        f"workers are data parallel and whose servers hold the optimizer "
                        f"(allowed: {allowed})")
    if p.offload.optimizer_states:
        yield "parallel.offload.optimizer_states", (
            f"{'nvme' if p.offload.optimizer_on_nvme else 'true'} does not apply with "
            "parallel.mode: parameter_server (the servers hold the "
            "optimizer states; allowed: false)")


def context(s: Scenario) -> Iterator[Problem]:
    """Context parallelism splits the sequence of every sample over `parallel.context`
    devices, attention exchanging key/value blocks around a ring: the model's type says
    whether it has attention layers to split and what they need
    (`ModelConfig.context_problems`)."""
    if s.parallel.context == 1:
        return
    yield from s.model.context_problems(s)


def tensor_nd(s: Scenario) -> Iterator[Problem]:
    """2-D / 3-D tensor parallel (`parallel.tensor_nd`) lays the `tensor` devices out as a
    grid and splits weights on its axes: the model's type says whether it has such weights
    and what they need (`ModelConfig.tensor_nd_problems`)."""
    nd = s.parallel.tensor_nd
    if nd is None:
        return
    yield from s.model.tensor_nd_problems(s, nd)
