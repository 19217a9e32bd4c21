"""The lowering by parts: one data-parallel strategy per optimizer-sharding level, the
cluster's one named mesh (groups and strides derived from it), keyword-only task
construction, and pipelines refused for single-block programs."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import yaml

from simulator.errors import InputError
from simulator.hardware import load_profile
from simulator.resources import resolve_yaml
from simulator.scenario import parse_scenario
from simulator.schedule.layout import rank_mesh
from simulator.schedule.tasks_builder import Builder
from simulator.sharding.mesh import Mesh
from simulator.simulate import simulate


def _scenario(**parallel: Any):
    return parse_scenario({
        "name": "parts", "hardware": "a100-80gb",
        "cluster": {"nodes": 1, "devices_per_node": 8},
        "model": {"type": "transformer", "layers": 4, "hidden_size": 512, "num_heads": 8,
                  "seq_length": 256, "vocab_size": 4096, "dtype": "bf16"},
        "training": {"global_batch_size": 8, "micro_batch_size": 2},  # 2 micro-batches
        "parallel": {"data": 2, "tensor": 2, "pipeline": 2, **parallel},
    }, "test")


def _dp_tasks(shard: int, **parallel: Any) -> Counter:
    result = simulate(_scenario(optimizer_shard=shard, **parallel), load_profile("a100-80gb"))
    dev = result.plan.devices[0]
    return Counter((t.name, t.comm[0][0]) for t in result.plan.tasks
                   if t.device == dev and t.stream == "dp")


def test_each_sharding_level_emits_its_own_collectives():
    """Stage 0 all-reduces the last micro-batch's buckets; 1 reduce-scatters them and
    all-gathers the parameters (overlapped with the next forward by default); 2 also
    reduce-scatters every earlier micro-batch; 3 gathers before each F and B instead."""
    zero = _dp_tasks(0)
    assert set(zero) == {("grad_bucket", "all_reduce")}
    one = _dp_tasks(1)
    assert set(one) == {("grad_bucket", "reduce_scatter"), ("param_gather", "all_gather")}
    assert one[("grad_bucket", "reduce_scatter")] == zero[("grad_bucket", "all_reduce")]
    two = _dp_tasks(2)
    assert set(two) == set(one) | {("grad_reduce", "reduce_scatter")}
    assert two[("grad_reduce", "reduce_scatter")] == 1  # micro-batch 0 of 2
    three = _dp_tasks(3)
    assert three[("param_gather", "all_gather")] == 2 * 2  # F and B of each micro-batch
    assert set(three) == {("grad_bucket", "reduce_scatter"), ("grad_reduce", "reduce_scatter"),
                          ("param_gather", "all_gather")}


def test_stage_one_gathers_after_the_step_when_not_overlapped():
    tasks = _dp_tasks(1, overlap={"param_gather": False})
    assert tasks[("param_gather", "all_gather")] == 1


def test_the_cluster_mesh_gives_megatrons_rank_order_and_groups():
    ranks = rank_mesh(_scenario())
    assert ranks.mesh.axes == (("pp", 2), ("dp", 2), ("tp", 2))
    groups = ranks.groups()
    assert [(groups[a].size, groups[a].stride) for a in ("tp", "dp", "pp")] == \
        [(2, 1), (2, 2), (2, 4)]
    assert ranks.with_stage(3, 1) == 7 and ranks.except_axis(3, "dp") == (0, 1)


def test_an_operator_graph_brings_its_own_axes():
    sc = _scenario()
    ranks = rank_mesh(sc, Mesh.of(m0=2, m1=2))
    assert ranks.mesh.names == ("pp", "m0", "m1")
    assert ranks.data == 1 and ranks.groups()["m0"].stride == 2


def test_tasks_are_built_by_name():
    b = Builder()
    with pytest.raises(TypeError):
        b.add("k", 0, "compute", "F", "fwd", 1.0)  # type: ignore[misc]
    tid = b.add("k", device=0, stream="compute", name="F", phase="fwd", duration_s=1.0)
    assert b.tasks()[tid].micro == -1


def test_a_pipeline_over_a_one_block_model_is_refused():
    path = resolve_yaml("seed-c-resnet-boundary", "scenarios")
    sc = parse_scenario(yaml.safe_load(path.read_text()), str(path), ["parallel.pipeline=2"])
    with pytest.raises(InputError) as err:
        simulate(sc, load_profile(sc.hardware))
    assert err.value.key == "parallel.pipeline"
    assert "one block (allowed: 1)" in str(err.value)


def _layers_run(**parallel: Any):
    sc = parse_scenario({
        "name": "uneven", "hardware": "a100-80gb",
        "cluster": {"nodes": 1, "devices_per_node": 8},
        "model": {"type": "transformer", "layers": 10, "hidden_size": 512, "num_heads": 8,
                  "seq_length": 256, "vocab_size": 32768, "dtype": "bf16"},
        "training": {"global_batch_size": 8, "micro_batch_size": 1},
        "parallel": {"data": 2, "pipeline": 4, **parallel},
    }, "test")
    return simulate(sc, load_profile("a100-80gb"))


def test_layers_that_do_not_divide_are_split_by_work():
    """10 layers on 4 stages: 2 each and 2 more, placed where the work is least: the middle
    stages, since the first also embeds and the last runs the 32k-vocabulary head."""
    result = _layers_run()
    assert result.plan.stage_layers == (2, 3, 3, 2)
    assert sum(w for w in result.plan.stage_layers) == 10


def test_given_stage_layers_are_used_and_change_the_time():
    even = _layers_run(pipeline_layers=[1, 4, 4, 1])
    assert even.plan.stage_layers == (1, 4, 4, 1)
    skewed = _layers_run(pipeline_layers=[4, 2, 2, 2])
    assert skewed.iteration_time_s > even.iteration_time_s  # the slowest stage sets the pace
