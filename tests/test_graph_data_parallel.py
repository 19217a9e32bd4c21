"""Operator graphs (`type: graph`) with `parallel.data` replicas of model.mesh (an outer
mesh axis `dp`), a rescaled `training.global_batch_size`, optimizer parallel and fusion
buckets: the batch flow, the widened strategies, the rescaled graph, the refusals by key,
and the run's memory and collectives against closed forms."""

from __future__ import annotations

import json
import math

import pytest
from model_kinds import refused_flat

from simulator.api.core import load_scenario
from simulator.graph.batch_flow import batch_flow
from simulator.models.graph_batch import resolved
from simulator.models.model_graph import planned_graph
from simulator.sharding.graph_yaml import graph_from_model
from simulator.sharding.placement import Partial, Shard
from simulator.sharding.plan import build_plan

ZERO = "graph-data-parallel-zero-8-cpu"


def _scenario(name: str, *sets: str):
    return load_scenario(name, list(sets)).scenario


def _run(invoke_cli, name: str, *sets: str) -> dict:
    args = ["run", name, "--json"]
    for item in sets:
        args += ["--set", item]
    result = invoke_cli(*args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _refused(invoke_cli, name: str, *sets: str) -> str:
    args = ["run", name]
    for item in sets:
        args += ["--set", item]
    result = invoke_cli(*args)
    text = refused_flat(result)
    assert "Traceback" not in text
    return text


def test_the_batch_runs_through_dim_0_and_leaves_at_the_loss():
    s = _scenario("seed-a-weight-ops")
    flow = batch_flow(graph_from_model(s.model, s.source))
    assert {n: flow.dims[n] for n in ("ids", "emb", "x", "h", "logits", "labels", "ce")} \
        == dict.fromkeys(("ids", "emb", "x", "h", "logits", "labels", "ce"), 0)
    assert flow.dims["loss"] is None and flow.dims["ffn.w1"] is None
    assert flow.labels["loss"] is not None  # the mean reduces the batch away


def test_replicas_split_the_batch_on_the_outer_axis_and_leave_the_gradients_partial():
    s = _scenario("seed-a-weight-ops", "parallel.data=2", "cluster.devices_per_node=16",
                  "training.global_batch_size=16")
    graph, mesh = planned_graph(s)
    assert mesh.names[0] == "dp" and mesh.shape == (2, 2, 2, 2)
    plan = build_plan(graph, mesh)
    emb = plan.op_plan("embedding")
    assert emb.sig.input_layout(1).placements[0] == Shard(0)  # ids split on dp
    assert str(emb.sig.axes[1:]) == str(build_plan(*planned_graph(_scenario(
        "seed-a-weight-ops", "training.global_batch_size=16"))).op_plan("embedding").sig.axes)
    for param in ("embedding_table", "ffn.w1", "ffn.w2", "head.w"):
        assert isinstance(plan.grad_layout(param).placements[0], Partial), param


def test_a_global_batch_rescales_inputs_labels_and_the_reshape_target():
    s = resolved(_scenario("seed-a-weight-ops", "training.global_batch_size=24"))
    shapes = {t.name: list(t.shape) for t in s.model.tensors}
    assert shapes["ids"] == [24, 4] and shapes["labels"] == [96]
    assert s.model.ops[1].attrs["shape"] == [96, 16]
    assert resolved(s) is s  # the key is consumed: rescaling again changes nothing


def test_micro_batches_share_the_global_batch(invoke_cli):
    out = _run(invoke_cli, "pipeline-graph-seed-c-8-cpu", "training.global_batch_size=32")
    assert out["config"]["global_batch_size"] == 32
    assert out["config"]["grad_accum_steps"] == 4
    assert "parallel.micro_batches=4" in _refused(
        invoke_cli, "pipeline-graph-seed-c-8-cpu", "training.global_batch_size=30")


def test_a_reshape_that_does_not_keep_the_batch_is_refused_by_key(invoke_cli):
    model = ("model={type: graph, dtype: fp32, tensors: [{name: x, shape: [8, 4]}, "
             "{name: w, shape: [4, 4], kind: parameter}], ops: ["
             "{name: mm, type: MatMul, inputs: [x, w], output: y}, "
             "{name: t, type: Transpose, inputs: [y], output: yt}, "
             "{name: flat, type: Reshape, inputs: [yt], output: f, attrs: {shape: [32]}}, "
             "{name: loss, type: ReduceMean, inputs: [f], output: l}]}")
    text = _refused(invoke_cli, "seed-a-weight-ops", model, "training.global_batch_size=16")
    assert "model.ops[2].attrs.shape: [32]: flat takes the batch into no single dim" in text


@pytest.mark.parametrize("sets, key, words", [
    (("parallel.data=3",), "parallel.data", "3 must divide the 8 devices of a pipeline stage"),
    (("parallel.data=2", "cluster.devices_per_node=12"), "model.mesh",
     "the cluster has 12 devices, 6 per replica of parallel.data=2"),
    (("parallel.data=2", "cluster.devices_per_node=16", "training.global_batch_size=7"),
     "training.global_batch_size", "2 replicas cannot share a batch of 7 samples"),
    (("parallel.optimizer_shard=1",), "parallel.optimizer_shard",
     "with parallel.data=1 a graph's gradient reductions"),
    (("parallel.data=2", "model.mesh={dp: 2, mp: 2}"), "model.mesh", "an axis named dp"),
    (("parallel.data=2", "parallel.dataset_strategy=[[2,1],[1]]"),
     "parallel.dataset_strategy", "not simulated yet"),
])
def test_what_does_not_fit_is_refused_by_key(invoke_cli, sets, key, words):
    base = ("model.mesh={m0: 2, m1: 2, m2: 2}",) if key == "model.mesh" and \
        "dp" not in words else ()
    if "devices_per_node=12" in " ".join(sets):
        base = ("model.mesh={m0: 2, m1: 2}",)
    text = _refused(invoke_cli, "seed-a-weight-ops", *base, *sets)
    assert f"{key}:" in text and words in text, text


def test_optimizer_parallel_divides_the_states_and_zero2_the_gradients(invoke_cli):
    """Rajbhandari et al. 2020: states / D under ZeRO-1, gradients / D under ZeRO-2
    (MindSpore's parallel optimizer over the data-parallel dimension)."""
    mem = {k: _run(invoke_cli, ZERO, f"parallel.optimizer_shard={k}")["memory"]
           ["by_category_bytes"] for k in (0, 1, 2)}
    d = 2
    assert mem[1]["optimizer_states"] * d == mem[0]["optimizer_states"]
    assert mem[1]["gradients"] == mem[0]["gradients"]
    assert mem[2]["gradients"] * d == mem[0]["gradients"]
    assert mem[0]["optimizer_states"] == mem[0]["parameters"]  # momentum: one fp32 state


def test_fusion_buckets_regroup_the_replicas_reduction_without_changing_its_bytes(invoke_cli):
    runs = [_run(invoke_cli, ZERO, *sets) for sets in (
        ("parallel.comm_fusion.bucket_mb=1",), ("parallel.comm_fusion.bucket_mb=0.1",),
        ("parallel.comm_fusion.mode=none",))]
    assert len({json.dumps(r["communication"], sort_keys=True) for r in runs}) == 1
    assert len({r["iteration_time_s"] for r in runs}) > 1


def test_replicas_across_nodes_reduce_over_the_slower_link(invoke_cli):
    across = _run(invoke_cli, ZERO)  # model.mesh fills a node: the replicas are 2 nodes
    within = _run(invoke_cli, ZERO, "cluster.nodes=1", "cluster.devices_per_node=8")
    assert across["iteration_time_s"] > within["iteration_time_s"]
    assert across["communication"] == within["communication"]


def _plan(invoke_cli, name: str, *args: str) -> dict:
    result = invoke_cli("plan", name, "--json", *args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_plan_searches_replicas_zero_and_buckets_of_a_graph(invoke_cli):
    out = _plan(invoke_cli, "seed-b-dimension-changing")
    configs = [row["config"] for row in out["top"]]
    assert all(row["fits"] for row in out["top"])
    assert any(int(c.get("parallel.data", "1")) > 1 for c in configs)
    assert any("parallel.optimizer_shard" in c for c in configs)
    # a key operator left to propagation takes its out_strategy with it
    freed = [c for c in configs if "model.ops[2].strategy" in c]
    assert freed and all(c.get("model.ops[2].out_strategy") == "null" for c in freed)
    times = [row["iteration_time_s"] for row in out["top"]]
    assert times == sorted(times)


def test_plan_on_more_devices_writes_the_mesh_it_keeps(invoke_cli):
    """A mesh-less graph on 16 devices: the configuration names its mesh (the prime
    factors of the devices a replica holds), and its scenario runs as planned."""
    best = _plan(invoke_cli, "seed-a-weight-ops", "--devices", "16")["best"]
    d = int(best["config"]["parallel.data"])
    mesh = json.loads(best["config"]["model.mesh"])
    assert d * math.prod(mesh.values()) == 16
    again = _run(invoke_cli, "seed-a-weight-ops", *best["overrides"])
    assert again["iteration_time_s"] == best["iteration_time_s"]


def test_multi_copy_slices_the_rescaled_global_batch():
    """The slices of multi-copy are cut from the global batch (32 -> 2 x 16), not from the
    graph as written rescaled again."""
    from simulator.simulation.verify import verify_scenario
    result = verify_scenario(_scenario(ZERO, "parallel.overlap.copies=2"))
    assert result.ok, [c for c in result.checks if not c.ok][:3]


def test_plan_searches_pipeline_degrees_keeping_the_global_batch():
    """Where no operator names its stage, the splits include pipelines of p stages with p
    or 2p micro-batches sharing the scenario's global batch (and, for a graph without
    model.mesh, the mesh of a stage written out)."""
    from simulator.planner.graph_space import graph_splits
    s = _scenario("seed-a-weight-ops")
    piped = [i for i in graph_splits(s, 8) if "parallel.pipeline" in i]
    assert {(i["parallel.pipeline"], i["parallel.micro_batches"]) for i in piped} == \
        {(2, 2), (2, 4), (4, 4), (4, 8), (8, 8)}
    assert all(i["training.global_batch_size"] == 8 for i in piped)
    staged = _scenario("pipeline-graph-seed-c-8-cpu")  # its operators name their stages
    assert not any("parallel.pipeline" in i for i in graph_splits(staged, 8))


def test_a_global_batch_too_large_to_verify_names_its_key(invoke_cli):
    result = invoke_cli("verify", "seed-a-weight-ops", "--set",
                        "training.global_batch_size=16000000")
    text = refused_flat(result)
    assert "training.global_batch_size: about 910 GFLOP to execute" in text


def test_overlap_keys_are_refused_where_the_reduction_waits_for_the_whole_backward(invoke_cli):
    text = _refused(invoke_cli, ZERO, "parallel.overlap.grad_reduce=false")
    assert "parallel.overlap.grad_reduce: false: not simulated for model.type graph " \
           "without a pipeline" in text
    piped = _run(invoke_cli, "pipeline-graph-seed-c-8-cpu", "parallel.data=2",
                 "cluster.devices_per_node=16", "parallel.overlap.grad_reduce=false")
    assert piped["iteration_time_s"] > 0


def test_a_fusion_bucket_dropped_is_seen_in_the_bytes(invoke_cli, monkeypatch):
    """The mutation of fusion: a bucket lost from the replicas' reduction changes the
    bytes it moves, which fusion alone never does (the test above)."""
    import simulator.lower.buckets as buckets
    real = buckets._by_size
    monkeypatch.setattr(buckets, "_by_size", lambda pieces, size: real(pieces, size)[:-1])
    fused = _run(invoke_cli, ZERO, "parallel.comm_fusion.bucket_mb=0.1")
    plain = _run(invoke_cli, ZERO, "parallel.comm_fusion.mode=none")
    assert fused["communication"] != plain["communication"]
