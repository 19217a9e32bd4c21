"""Every technique `verify` proves, broken on purpose (issue 26): each row runs a scenario
whose plan uses the technique, first as planned (it must pass), then with the technique's
numeric path mutated (a dropped collective, a lost or corrupted host copy, a skipped
reduction, pushes applied out of order, a slice run twice, ...); `verify` must fail, and
the first tensor it reports is the one the mutation reaches first."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from simulator.api.core import load_scenario
from simulator.config.scenario.schema import Scenario
from simulator.models.cases import build_case
from simulator.numeric.execution import Faults
from simulator.numeric.pipeline import SendFaults
from simulator.numeric.verify import VerifyResult, verify_case
from simulator.simulation.verify import ps_run, verify_scenario

Break = Callable[[Scenario], VerifyResult]


def _faults(**kw) -> Break:
    return lambda s: verify_scenario(s, Faults(**kw))


def _ps(**kw) -> Break:
    """The scenario's parameter server run with a mutation of `numeric.ps.PsRun`."""
    def run(s: Scenario) -> VerifyResult:
        case = build_case(s)
        return verify_case(case, s.training.optimizer, s.training.learning_rate, s.seed,
                           ps=ps_run(s, case, **kw))
    return run


# (technique, bundled scenario, --set overrides, the mutation, first tensor reported)
MUTATIONS: list[tuple[str, str, tuple[str, ...], Break, str]] = [
    ("data parallel: gradients not reduced", "verify-tiny-dp8", (),
     _faults(skip_grad_reduction=True), "wte.grad"),
    ("operator sharding: a forward collective skipped", "verify-tiny-tp8", (),
     _faults(drop_comm=0), "embed_pos"),
    ("ZeRO-3: parameters not gathered", "verify-tiny-dp8", ("parallel.optimizer_shard=3",),
     _faults(skip_param_gather=True), "embed"),
    ("recompute: the forward not run again", "tiny-cpu", ("parallel.recompute=full",),
     _faults(recompute_fault="skip"), "wte.grad"),
    ("pipeline: a forward send lost", "tiny-cpu",
     ("parallel.data=1", "parallel.pipeline=2"),
     lambda s: verify_scenario(s, send_faults=SendFaults(drop=("fwd", 0))), "l1.ln1"),
    ("offload of a transformer's parameters: the host copy lost", "tiny-cpu",
     ("parallel.offload.parameters=true",), _faults(offload_fault="drop"), "embed"),
    ("offload of a transformer's activations: the host copy corrupted", "tiny-cpu",
     ("parallel.offload.activations=true",), _faults(offload_fault="corrupt"), "wte.grad"),
    ("offload of a graph's activations: the host copy lost", "pipeline-graph-seed-c-8-cpu",
     ("parallel.offload.activations=true",), _faults(offload_fault="drop"), "conv1.w.grad"),
    ("host-placed operator: its output corrupted on the way up",
     "hetero-embedding-cpu-8-a100", (), _faults(offload_fault="corrupt"), "emb"),
    ("synchronous parameter server: a push lost", "ps-gpt2-medium-16-a100", (),
     _ps(drop_push=1), "wte.grad"),
    ("asynchronous parameter server: pushes applied out of order",
     "ps-gpt2-medium-16-a100", ("parallel.parameter_server.sync=false",),
     _ps(reorder=True), "wte.updated"),
    # MindSpore's hybrid mode (Parameter.set_param_ps on the tables only): each half breaks
    # on its own parameters
    ("hybrid parameter server: a push of the served tables lost",
     "ps-hybrid-gpt2-medium-16-a100", (), _ps(drop_push=1), "wte.grad"),
    ("hybrid parameter server: the workers' all-reduce of the rest skipped",
     "ps-hybrid-gpt2-medium-16-a100", (), _faults(skip_grad_reduction=True),
     "l0.ln1.g.grad"),
    ("uneven split (DTensor chunks): a forward collective skipped",
     "seed-sbp-partial-chain", ("model.tensors[0].shape=[7,12]", "model.tensors[1].shape=[7]"),
     _faults(drop_comm=0), "ce"),
    ("multi-copy of an operator graph: one slice run twice", "hetero-embedding-cpu-8-a100",
     ("parallel.overlap.copies=2",), _faults(copy_fault="repeat"), "embedding_table.grad"),
    ("graph replicas (parallel.data): gradients not summed over them",
     "graph-data-parallel-zero-8-cpu", ("parallel.optimizer_shard=0",),
     _faults(skip_dp_reduction=True), "embedding_table.grad"),
    ("graph replicas at a rescaled global batch: gradients not summed over them",
     "seed-a-weight-ops", ("parallel.data=2", "cluster.devices_per_node=16",
                           "training.global_batch_size=16"),
     _faults(skip_dp_reduction=True), "embedding_table.grad"),
    ("graph optimizer parallel: updated shards not gathered back",
     "graph-data-parallel-zero-8-cpu", (), _faults(skip_update_gather=True),
     "embedding_table.updated"),
    ("graph optimizer parallel, ZeRO-3: parameters not gathered",
     "graph-data-parallel-zero-8-cpu",
     ("parallel.optimizer_shard=3", "parallel.comm_fusion.bucket_mb=25"),
     _faults(skip_param_gather=True), "emb"),
    ("graph optimizer parallel, ZeRO-2: gradients not summed over the replicas",
     "graph-data-parallel-zero-8-cpu", ("parallel.optimizer_shard=2",),
     _faults(skip_dp_reduction=True), "embedding_table.grad"),
    ("manual_split (explicit uneven blocks of a Gather's table): each block's offset "
     "shifted by one", "manual-split-gather-64-rows-4-cpu", (), _faults(block_shift=True),
     "emb"),
]


@pytest.mark.parametrize("technique, name, sets, mutate, first", MUTATIONS,
                         ids=[m[0] for m in MUTATIONS])
def test_verify_fails_when_the_technique_is_broken(technique, name, sets, mutate, first):
    s = load_scenario(name, list(sets)).scenario
    good = verify_scenario(s)
    assert good.ok, [c for c in good.checks if not c.ok]
    bad = mutate(s)
    failed = [c.tensor for c in bad.checks if not c.ok]
    assert not bad.ok and failed[0] == first, failed[:5]
