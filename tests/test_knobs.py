"""No parallel or batch knob ends in an internal error on any model type: each `--set` of a
`parallel.*` or batch key on a transformer, an mlp, a resnet and operator-graph scenario
either runs (exit 0) or is refused with exit 2 and a message naming the key (or the rule
across keys it breaks)."""

from __future__ import annotations

import json

import pytest
from model_kinds import MODEL_KINDS, run_kind, stderr_of

KNOBS = ["parallel.data=4", "parallel.data=1", "parallel.tensor=4", "parallel.tensor=1",
         "parallel.pipeline=2", "parallel.schedule=gpipe", "parallel.schedule=interleaved_1f1b",
         "parallel.virtual_stages=2", "parallel.sequence_parallel=true",
         "parallel.optimizer_shard=1", "parallel.optimizer_shard=2",
         "parallel.optimizer_shard=3", "parallel.recompute=selective",
         "parallel.recompute=full", "parallel.offload.optimizer_states=true",
         "parallel.offload.parameters=true", "parallel.offload.activations=true",
         "parallel.comm_fusion.mode=none", "parallel.comm_fusion.mode=index",
         "parallel.comm_fusion.bucket_mb=0.01", "parallel.overlap.grad_reduce=false",
         "parallel.overlap.param_gather=false", "parallel.overlap.copies=2",
         "parallel.overlap.tp_comm=true", "parallel.mode=auto",
         "training.micro_batch_size=4", "training.global_batch_size=16",
         "parallel.pipeline_layers=[1,1]", "parallel.mode=parameter_server",
         "parallel.parameter_server.servers=2", "parallel.parameter_server.sync=false",
         "parallel.expert=2", "parallel.context=2", "parallel.tensor_nd=[2,2]",
         "parallel.recompute_comm.tensor=false", "parallel.recompute_comm.optimizer=false",
         "parallel.enable_alltoall=false", "parallel.comm_subgraph.reuse=true",
         "parallel.micro_batches=4",
         "parallel.dataset_strategy=full_batch", "parallel.dataset_strategy=data_parallel",
         "parallel.full_batch=true"]


# Knobs that run and leave the result unchanged, each for a stated reason (anything else that
# runs must change the result: nothing is inert)
SAME_BY_CONSTRUCTION = {
    ("graph", "parallel.data=1"), ("graph", "parallel.tensor=1"),  # already the values
    ("graph-sbp", "parallel.data=1"), ("graph-sbp", "parallel.tensor=1"),
    # every operator of the SBP chain has its strategy: the search has nothing to choose
    ("graph-sbp", "parallel.mode=auto"),
    # seed (a) already loads every input as its operators read it: the ids split on the batch
    # over all 8 devices, the labels too -- MindSpore's data_parallel dataset strategy
    ("graph", "parallel.dataset_strategy=data_parallel"),
}


def _comparable(stdout: str) -> dict:
    out = json.loads(stdout)
    # ("dataset" echoes the dataset strategy asked for; its effects are compared elsewhere)
    for key in ("simulation", "notes", "critical_path", "dataset"):
        out.pop(key, None)
    return out


@pytest.mark.parametrize("kind", list(MODEL_KINDS))
def test_every_knob_runs_or_is_refused_by_name(kind, invoke_cli):
    plain = run_kind(invoke_cli, kind)
    assert plain.exit_code == 0, plain.output  # the scenario itself runs
    base_out = _comparable(plain.stdout)
    ran = 0
    for knob in KNOBS:
        result = run_kind(invoke_cli, kind, knob)
        assert result.exit_code in (0, 2), (kind, knob, result.exit_code, result.output)
        if result.exit_code == 0:
            out = _comparable(result.stdout)
            assert out["iteration_time_s"] > 0
            inert = out == base_out
            assert inert == ((kind, knob) in SAME_BY_CONSTRUCTION), (kind, knob, "inert")
            ran += 1
        else:
            message = stderr_of(result)
            assert message.startswith("error: ") and "internal error" not in message, \
                (kind, knob, message)
    assert ran >= 6  # most knobs apply to every model type


def test_tensor_nd_changes_a_transformer_and_is_refused_by_name_elsewhere(invoke_cli):
    """On the transformer at tensor=4 the 2 x 2 grid runs another plan (its all-gathers,
    reduce-scatters and all-to-alls on two axes); on tensor=2 it does not match and says so;
    other model types refuse it by name (tests/test_tensor_2d.py has their messages)."""
    sets = ("parallel.data=1", "parallel.tensor=4", "parallel.sequence_parallel=true")
    plain = run_kind(invoke_cli, "transformer", *sets)
    two_d = run_kind(invoke_cli, "transformer", *sets, "parallel.tensor_nd=[2,2]")
    assert plain.exit_code == two_d.exit_code == 0, two_d.output
    a, b = _comparable(plain.stdout), _comparable(two_d.stdout)
    assert a != b
    assert "all_to_all" in b["communication"]["by_collective"]
    assert "all_to_all" not in a["communication"]["by_collective"]
    mismatch = run_kind(invoke_cli, "transformer", "parallel.tensor_nd=[2,2]")
    assert mismatch.exit_code == 2
    assert "parallel.tensor_nd: [2, 2]: 2*2 = 4 must equal parallel.tensor=2" in stderr_of(
        mismatch)
    for kind in ("mlp", "resnet", "graph", "graph-sbp"):
        result = run_kind(invoke_cli, kind, "parallel.tensor_nd=[2,2]")
        assert result.exit_code == 2 and "parallel.tensor_nd: [2, 2]" in stderr_of(result)


def _bytes(out: dict) -> int:
    return out["communication"]["bytes_per_device"]


# MindSpore's communication options, each where it applies, against the same run without it:
# (kind, base --set items, the knob, what must hold of (without, with))
DIRECTED = [
    # mp_comm_recompute false: fewer bytes in the backward, the kept outputs in memory
    ("transformer", ["parallel.recompute=full"], "parallel.recompute_comm.tensor=false",
     lambda a, b: _bytes(b) < _bytes(a) and b["memory"]["peak_bytes"]
     > a["memory"]["peak_bytes"] and b["iteration_time_s"] < a["iteration_time_s"]),
    # parallel_optimizer_comm_recompute false: no second parameter all-gather
    ("transformer", ["parallel.recompute=full", "parallel.optimizer_shard=3"],
     "parallel.recompute_comm.optimizer=false",
     lambda a, b: b["communication"]["by_collective"]["all_gather"]
     < a["communication"]["by_collective"]["all_gather"]),
    # enable_alltoall false: all-gather + slice, more bytes, never faster
    ("graph", [], "parallel.enable_alltoall=false",
     lambda a, b: "all_to_all" not in b["communication"]["by_collective"]
     and _bytes(b) > _bytes(a) and b["iteration_time_s"] >= a["iteration_time_s"]),
    # subgraph reuse: fewer compiled operators and build time, the same step
    ("graph", ["parallel.comm_subgraph.reuse=false"], "parallel.comm_subgraph.reuse=true",
     lambda a, b: b["comm_subgraph"]["distinct_ops"] < a["comm_subgraph"]["distinct_ops"]
     and b["comm_subgraph"]["build_s"] < a["comm_subgraph"]["build_s"]
     and b["iteration_time_s"] == a["iteration_time_s"]),
]


def _peak(out: dict) -> int:
    return out["memory"]["peak_bytes"]


def _saves_memory_costs_time(a: dict, b: dict) -> bool:
    return _peak(b) < _peak(a) and b["iteration_time_s"] > a["iteration_time_s"]


def _offloads(a: dict, b: dict) -> bool:
    """Device memory down, host-link bytes reported, the copies priced (never faster)."""
    return (_peak(b) < _peak(a) and b["offload_bytes_per_device"]["d2h"] > 0
            and b["iteration_time_s"] >= a["iteration_time_s"])


# a micro-batch large enough that its activations, not the gradient reduction, set the peak
_BIG = ["training.global_batch_size=512", "training.micro_batch_size=128"]
# recompute and offload on the other model types (schedule/graph_recompute.py and
# schedule/offload.py over the units of schedule/graph_stages.py)
DIRECTED += [
    ("mlp", _BIG, "parallel.recompute=full", _saves_memory_costs_time),
    ("resnet", _BIG, "parallel.recompute=full", _saves_memory_costs_time),
    ("graph", [], "parallel.recompute=full", _saves_memory_costs_time),
    ("resnet", _BIG, "parallel.offload.activations=true", _offloads),
    ("graph", [], "parallel.offload.activations=true", _offloads),
    ("graph", [], "parallel.offload.parameters=true", _offloads),
    ("graph-sbp", [], "parallel.offload.parameters=true", _offloads),
]


@pytest.mark.parametrize("kind, base, knob, holds", DIRECTED,
                         ids=[f"{kind}-{knob}" for kind, _, knob, _ in DIRECTED])
def test_communication_options_move_the_result_their_way(kind, base, knob, holds, invoke_cli):
    without, with_knob = (run_kind(invoke_cli, kind, *base, *extra) for extra in ([], [knob]))
    assert without.exit_code == with_knob.exit_code == 0, with_knob.output
    assert holds(json.loads(without.stdout), json.loads(with_knob.stdout))


@pytest.mark.parametrize("kind", ["mlp", "resnet"])
def test_a_pipeline_changes_every_model_type(kind, invoke_cli):
    """`parallel.pipeline=2` (data 1 keeps the 4 devices) cuts an mlp or resnet into two
    stages: activations and gradients are sent between them and the schedule has a
    bubble, where the one-stage run sends nothing and has none."""
    plain = json.loads(run_kind(invoke_cli, kind).stdout)
    piped = run_kind(invoke_cli, kind, "parallel.pipeline=2", "parallel.data=1")
    assert piped.exit_code == 0, piped.output
    out = json.loads(piped.stdout)
    assert "send_recv" not in plain["communication"]["by_collective"]
    assert out["communication"]["by_collective"]["send_recv"] > 0
    assert plain["breakdown_s"]["bubble"] == 0 < out["breakdown_s"]["bubble"]
    assert out["pipeline_layers"] == [1, 1] if kind == "mlp" else len(out["pipeline_layers"]) == 2


def test_a_pipeline_changes_a_graph_model(invoke_cli):
    """The seed (c) graph in the two stages its operators' `pipeline_stage` give, against
    the same graph on one stage (`seed-c-resnet-boundary`)."""
    plain = json.loads(invoke_cli("run", "seed-c-resnet-boundary", "--json").stdout)
    result = invoke_cli("run", "pipeline-graph-seed-c-8-cpu", "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert "send_recv" not in plain["communication"]["by_collective"]
    # 4 micro-batches of the 2 x 4 x 6 x 6 fp32 block each device of a stage holds
    assert out["communication"]["by_collective"]["send_recv"] == 4 * 2 * 4 * 6 * 6 * 4
    assert plain["breakdown_s"]["bubble"] == 0 < out["breakdown_s"]["bubble"]
    one = invoke_cli("run", "pipeline-graph-seed-c-8-cpu", "--set", "parallel.pipeline=1")
    assert one.exit_code == 2
    assert "model.ops[5].attrs.pipeline_stage: 1: not a stage" in stderr_of(one)
