"""The lowering by parts: one data-parallel strategy per optimizer-sharding level, the
cluster's one named mesh (groups and strides derived from it), keyword-only task
construction, and pipelines refused for single-block programs."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import yaml

from simulator.config.hardware import load_profile
from simulator.config.resources import resolve_yaml
from simulator.config.scenario import parse_scenario
from simulator.cost.specs import ComputeSpec
from simulator.errors import InputError
from simulator.lower.costs import CostModel
from simulator.lower.iteration import lower
from simulator.lower.layout import rank_mesh
from simulator.lower.tasks_builder import Builder
from simulator.program.graph_program import graph_program
from simulator.program.model_program import transformer_program
from simulator.sharding.mesh import Mesh
from simulator.simulation.simulate import simulate


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
                   if t.device == dev and t.stream in ("dp", "dp_reduce"))


def test_each_sharding_level_emits_its_own_collectives():
    """Stage 0 all-reduces the last micro-batch's buckets; 1 reduce-scatters them and
    all-gathers the parameters (overlapped with the next forward by default); 2 also
    reduce-scatters every earlier micro-batch; 3 gathers each unit before its forward and
    its backward and reduce-scatters each unit's gradient, every micro-batch."""
    zero = _dp_tasks(0)
    assert set(zero) == {("grad_bucket", "all_reduce")}
    one = _dp_tasks(1)
    assert set(one) == {("grad_bucket", "reduce_scatter"), ("param_gather", "all_gather")}
    assert one[("grad_bucket", "reduce_scatter")] == zero[("grad_bucket", "all_reduce")]
    two = _dp_tasks(2)
    assert set(two) == set(one) | {("grad_reduce", "reduce_scatter")}
    assert two[("grad_reduce", "reduce_scatter")] == 1  # micro-batch 0 of 2
    three = _dp_tasks(3)  # the first stage: the embedding and 2 layers, unit by unit
    assert three == {("param_gather", "all_gather"): 2 * 2 * 3,  # F and B, 2 micro-batches
                     ("grad_reduce", "reduce_scatter"): 2 * 3}


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


def test_a_pipeline_over_a_one_block_program_is_refused():
    """The lowering's guard: a program derived without a pipeline (one block) cannot be
    lowered onto pipeline stages; `graph_program` cuts a pipelined graph into units."""
    path = resolve_yaml("tiny-cpu", "scenarios")
    mlp = ["model={type: mlp, layers: 2, hidden_size: 64, input_size: 32, num_classes: 16}"]
    flat = parse_scenario(yaml.safe_load(path.read_text()), str(path), mlp)
    piped = parse_scenario(yaml.safe_load(path.read_text()), str(path),
                           mlp + ["parallel.pipeline=2", "parallel.data=1"])
    one_block = graph_program(flat).program
    assert len(one_block.sequence()) == 1 and len(graph_program(piped).program.sequence()) == 2
    costs = CostModel.from_hardware(load_profile("cpu-x86"))
    with pytest.raises(InputError) as err:
        lower(piped, one_block, costs, model_mesh=graph_program(piped).mesh)
    assert err.value.key == "parallel.pipeline"
    assert "is one block (allowed: 1)" in str(err.value)


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


def _zero3_expected(c_f: float, c_b: float, g: float, layers: int) -> float:
    """The closed form of ZeRO-3 / FSDP unit prefetch (see schedule.reduction): one stage,
    one micro-batch; units embedding, layers, head (free compute but for the layers);
    each gather takes g on one FIFO stream; the gather of unit k waits for unit k-2's
    compute (the first two for the task before); unit k computes once unit k-1 has and its
    gather is done. Gradient reductions and the optimizer are free."""
    fwd = [0.0] + [c_f] * layers + [0.0]
    bwd = [0.0] + [c_b] * layers + [0.0]
    stream, clock, ends = 0.0, 0.0, []
    for k, c in enumerate(fwd):
        stream = max(stream, ends[k - 2] if k >= 2 else 0.0) + g
        clock = max(clock, stream) + c
        ends.append(clock)
    f_end, ends = clock, []
    for k, c in enumerate(bwd):
        stream = max(stream, ends[k - 2] if k >= 2 else f_end) + g
        clock = max(clock, stream) + c
        ends.append(clock)
    return clock


@pytest.mark.parametrize("ratio", [0.5, 3.0])  # gathers hidden, and gathers exposed
def test_zero3_prefetch_overlap_follows_its_closed_form(ratio: float):
    sc = parse_scenario({
        "name": "zero3", "hardware": "a100-80gb",
        "cluster": {"nodes": 1, "devices_per_node": 2},
        "model": {"type": "transformer", "layers": 4, "hidden_size": 512, "num_heads": 8,
                  "seq_length": 256, "vocab_size": 4096, "dtype": "bf16"},
        "training": {"global_batch_size": 2, "micro_batch_size": 1},
        "parallel": {"data": 2, "optimizer_shard": 3},
    }, "test")
    prog = transformer_program(sc)
    layer = {op.name for op in prog.block("layer").fwd + prog.block("layer").bwd}
    c_f = sum(1e-3 for op in prog.block("layer").fwd if isinstance(op, ComputeSpec))
    c_b = sum(1e-3 for op in prog.block("layer").bwd if isinstance(op, ComputeSpec))
    g = ratio * c_f
    costs = CostModel(
        compute_s=lambda spec: 1e-3 if spec.name in layer else 0.0,
        collective_s=lambda coll, nbytes, group: g if coll == "all_gather" and nbytes else 0.0,
        send_recv_s=lambda nbytes, intra: 0.0)
    result = simulate(sc, load_profile("a100-80gb"), costs=costs)
    assert result.iteration_time_s == pytest.approx(_zero3_expected(c_f, c_b, g, 4),
                                                    rel=1e-9)


def test_blocking_pipeline_sends_hold_the_senders_compute_stream(tmp_path):
    """Megatron's p2p ends in torch.cuda.synchronize() (framework overlap.p2p_blocking):
    the sends run on the sender's compute stream, and the step grows by no more than the
    time of the sends the slowest device now waits for; the same stack with asynchronous
    sends keeps them on their own streams. (Stages on two nodes: the sends cross the NIC,
    the tensor-parallel collectives NVLink, so nothing else on their link changes.)"""
    data = yaml.safe_load(resolve_yaml("megatron-lm-2021", "framework_profiles").read_text())
    assert data["overlap"]["p2p_blocking"] == "always"
    data["overlap"]["p2p_blocking"] = "never"
    path = tmp_path / "async.yaml"
    path.write_text(yaml.safe_dump(data))
    hw = load_profile("a100-80gb")
    sc = parse_scenario({
        "name": "p2p", "hardware": "a100-80gb", "cluster": {"nodes": 2, "devices_per_node": 4},
        "model": {"type": "transformer", "layers": 4, "hidden_size": 1024, "num_heads": 8,
                  "seq_length": 1024, "vocab_size": 4096, "dtype": "bf16"},
        "training": {"global_batch_size": 8, "micro_batch_size": 1},
        "parallel": {"data": 1, "tensor": 4, "pipeline": 2}}, "test")
    blocking = simulate(sc, hw)  # the A100 default stack, Megatron-LM 2021
    free = simulate(sc.model_copy(update={"framework": str(path)}), hw)
    streams = lambda r: {t.stream for t in r.plan.tasks if t.name.startswith("send_")}  # noqa: E731
    assert streams(blocking) == {"compute"}
    assert streams(free) == {"pp_fwd", "pp_bwd"}
    sends = max(sum(t.duration_s for t in blocking.plan.tasks
                    if t.device == dev and t.name.startswith("send_"))
                for dev in blocking.plan.devices)
    assert free.iteration_time_s < blocking.iteration_time_s
    assert blocking.iteration_time_s - free.iteration_time_s <= 2 * sends
