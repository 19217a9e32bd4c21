"""Pipeline parallel on mlp, resnet and graph models (`schedule.graph_stages`,
`numeric.pipeline`): the stages, the bytes each sends (closed forms), the schedule's bubble,
the split (given, from `attrs.pipeline_stage`, or balanced by priced work), `verify` with
each stage on its own devices and its sends mutated, and the refusals."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.config.hardware import load_profile
from simulator.config.resources import resolve_yaml
from simulator.config.scenario import parse_scenario
from simulator.errors import InputError
from simulator.lower.costs import CostModel
from simulator.lower.layout import rank_mesh
from simulator.lower.stages import stage_work
from simulator.models.split import balanced
from simulator.numeric.pipeline import SendFaults
from simulator.program.graph_program import graph_program
from simulator.simulation.simulate import simulate
from simulator.simulation.stage_split import stage_split
from simulator.simulation.verify import verify_scenario

A100 = load_profile("a100-80gb")
F32 = 4  # bytes of an fp32 element


def _scenario(model: dict[str, Any], data: int = 2, tensor: int = 1, pipeline: int = 2,
              mbs: int = 2, micro: int = 4, **parallel: Any):
    return parse_scenario({
        "name": "pp", "hardware": "a100-80gb",
        "cluster": {"nodes": 1, "devices_per_node": data * tensor * pipeline},
        "model": model,
        "training": {"global_batch_size": mbs * data * micro, "micro_batch_size": mbs},
        "parallel": {"data": data, "tensor": tensor, "pipeline": pipeline, **parallel},
    }, "pp.yaml")


def _mlp(layers: int = 4, hidden: int = 16, **kw: Any):
    return _scenario({"type": "mlp", "layers": layers, "hidden_size": hidden,
                      "input_size": hidden, "num_classes": 8, "dtype": "fp32"}, **kw)


def _resnet(**kw: Any):
    return _scenario({"type": "resnet", "conv_layers": 3, "in_channels": 2, "channels": 4,
                      "image_size": 6, "kernel_size": 3, "fc_layers": 2, "hidden_size": 16,
                      "num_classes": 8, "dtype": "fp32"}, **kw)


def _work(s):
    gp = graph_program(s)
    return stage_work(s, gp.program, rank_mesh(s, gp.mesh), CostModel.from_hardware(A100))


def _bundled(name: str, *overrides: str):
    path = resolve_yaml(name, "scenarios")
    return parse_scenario(yaml.safe_load(path.read_text()), str(path), list(overrides))


# ---- bytes crossing a cut (closed forms) -------------------------------------------------

@pytest.mark.parametrize("layers, split", [([1, 3], 2), ([2, 2], 1)])
def test_mlp_boundary_bytes_closed_form(layers, split):
    """An mlp stage sends its last layer's activation, b x h (b: micro-batch per data
    replica), and gets its gradient back: after a column-parallel layer (fc0: output
    features split over tensor t) b x h / t, after a row-parallel one (fc1: output made
    whole) b x h. The first stage's device sends it once per micro-batch."""
    b, h, t, micro = 2, 16, 2, 4
    s = _mlp(hidden=h, tensor=t, micro=micro, pipeline_layers=layers)
    first, second = _work(s)
    want = b * h * F32 / split
    assert (first.send_fwd_bytes, second.send_bwd_bytes) == (want, want)
    assert (first.send_bwd_bytes, second.send_fwd_bytes) == (0.0, 0.0)
    result = simulate(s, A100)
    sent = [(t.device, t.name, t.comm[0][1]) for t in result.plan.tasks
            if t.name.startswith("send_")]
    assert sorted(sent) == [(0, "send_fwd", want)] * micro + [(4, "send_bwd", want)] * micro
    assert dict(result.comm_bytes)["send_recv"] == micro * want


def test_resnet_boundary_bytes_closed_form():
    """A cut after a conv block sends b x C x S x S (the conv half is data parallel), a cut
    after an FC layer b x hidden."""
    b, c, size, hidden = 2, 4, 6, 16
    conv_cut, fc_cut = _work(_resnet(pipeline_layers=[1, 4])), _work(
        _resnet(pipeline_layers=[4, 1]))
    assert conv_cut[0].send_fwd_bytes == conv_cut[1].send_bwd_bytes == b * c * size ** 2 * F32
    assert fc_cut[0].send_fwd_bytes == fc_cut[1].send_bwd_bytes == b * hidden * F32


def test_graph_boundary_bytes_closed_form():
    """seed (c) in two stages: the residual block's output, 8 images x 4 x 6 x 6 split over
    the stage's 4 devices, forward and back."""
    s = _bundled("pipeline-graph-seed-c-8-cpu")
    first, second = _work(s)
    assert (first.layers, second.layers) == (5, 8)
    assert first.send_fwd_bytes == second.send_bwd_bytes == 8 // 4 * 4 * 6 * 6 * F32


# ---- the schedule: sends and bubble --------------------------------------------------------

@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("make", [_mlp, _resnet], ids=["mlp", "resnet"])
def test_a_pipeline_sends_and_has_a_bubble(make, schedule):
    flat = simulate(make(pipeline=1, data=4), A100)
    piped = simulate(make(pipeline=2, data=2, schedule=schedule), A100)
    assert dict(flat.comm_bytes).get("send_recv", 0.0) == 0.0
    assert dict(flat.breakdown_s)["bubble"] == pytest.approx(0.0, abs=1e-12)
    assert dict(piped.comm_bytes)["send_recv"] > 0
    assert dict(piped.breakdown_s)["bubble"] > 0
    assert len(piped.plan.stage_layers) == 2


def test_more_micro_batches_shrink_the_bubble_share():
    """(p - 1) / (m + p - 1) falls with m (GPipe, Huang et al. 2019, Sec. 2.2)."""
    share = []
    for micro in (2, 8):
        r = simulate(_mlp(pipeline=4, data=1, micro=micro, layers=8), A100)
        share.append(dict(r.breakdown_s)["bubble"] / r.iteration_time_s)
    assert share[1] < share[0]


def test_each_stage_holds_its_own_parameters():
    """Model states split over the stages: the four stages' parameters add up to the
    model's, each stage's static memory holds only its own."""
    s = _mlp(pipeline=4, data=1, layers=8)
    work = _work(s)
    whole = graph_program(_mlp(pipeline=1, data=4, layers=8)).program.block("graph").params
    assert sum(w.params for w in work) == whole
    assert all(0 < w.params < whole for w in work)


# ---- the split ---------------------------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 20), min_size=1, max_size=8), st.integers(1, 8))
def test_balanced_split_is_the_lightest_bottleneck(weights, parts):
    """Against every contiguous split into `parts` non-empty parts."""
    parts = min(parts, len(weights))
    counts = balanced([float(w) for w in weights], parts)
    assert len(counts) == parts and sum(counts) == len(weights) and min(counts) >= 1

    def worst(cs):
        ends = list(itertools.accumulate(cs))
        return max(sum(weights[a:b]) for a, b in zip([0] + ends[:-1], ends))

    best = min(worst([b - a for a, b in zip((0,) + cuts, cuts + (len(weights),))])
               for cuts in itertools.combinations(range(1, len(weights)), parts - 1))
    assert worst(counts) == best


def test_given_layers_are_the_stages():
    r = simulate(_mlp(pipeline=2, data=2, pipeline_layers=[1, 3]), A100)
    assert r.plan.stage_layers == (1, 3)


def test_graph_stages_follow_pipeline_stage_attrs():
    """The operators with `pipeline_stage` 0 and those after `pipeline_stage: 1`."""
    r = simulate(_bundled("pipeline-graph-seed-c-8-cpu"), load_profile("cpu-x86"))
    assert r.plan.stage_layers == (5, 8)
    assert dict(r.breakdown_s)["bubble"] > 0


def test_the_balanced_split_is_priced():
    """Without a given split, the mlp's last unit (classifier and loss on top of a layer)
    is the heaviest: the split evens the priced work, which an even count of layers
    would not."""
    s = _mlp(pipeline=2, data=2, layers=4, hidden=1024)
    work = _work(s)
    seconds = [w.fwd.compute_s + w.bwd.compute_s + w.fwd.comm_s + w.bwd.comm_s for w in work]
    even = _work(_mlp(pipeline=2, data=2, layers=4, hidden=1024, pipeline_layers=[2, 2]))
    even_s = [w.fwd.compute_s + w.bwd.compute_s + w.fwd.comm_s + w.bwd.comm_s for w in even]
    assert max(seconds) <= max(even_s)


# ---- verify: stages on their own devices -------------------------------------------------

def test_verify_runs_each_stage_on_its_own_devices():
    s = _mlp(pipeline=2, data=2, tensor=2, micro=2)
    res = verify_scenario(s, split=stage_split(s, A100))
    assert res.ok and res.devices == 8
    sent = [c.tensor for c in res.checks if "(sent stage" in c.tensor]
    assert len(sent) == 2 and sent[0].endswith("(sent stage 0 -> 1)")
    assert res.collectives["send_recv"] == 2 * 2  # 2 micro-batches, forward and back
    assert any("each stage ran on its own 4 devices" in n for n in res.notes)


@pytest.mark.parametrize("fault", [SendFaults(drop=("fwd", 0)), SendFaults(drop=("bwd", 1)),
                                   SendFaults(corrupt=("fwd", 0)),
                                   SendFaults(corrupt=("bwd", 1))],
                         ids=["drop-fwd", "drop-bwd", "corrupt-fwd", "corrupt-bwd"])
def test_a_dropped_or_corrupted_send_fails_verify(fault):
    s = _mlp(pipeline=2, data=2, micro=2)
    res = verify_scenario(s, split=stage_split(s, A100), send_faults=fault)
    assert not res.ok
    direction, src = fault.drop or fault.corrupt  # type: ignore[misc]
    failed = [c.tensor for c in res.checks if not c.ok]
    assert any(f"(sent stage {src} -> " in t for t in failed)


def test_verify_the_graph_pipeline_and_its_dropped_send():
    s = _bundled("pipeline-graph-seed-c-8-cpu")
    cpu = load_profile("cpu-x86")
    assert verify_scenario(s, split=stage_split(s, cpu)).ok
    dropped = verify_scenario(s, split=stage_split(s, cpu), send_faults=SendFaults(drop=("fwd", 0)))
    assert "block (sent stage 0 -> 1)" in [c.tensor for c in dropped.checks if not c.ok]


def test_verify_resnet_pipeline_of_four_stages():
    res = verify_scenario(r4 := _resnet(pipeline=4, data=1, micro=2), split=stage_split(r4, A100))
    assert res.ok
    assert sum("(sent stage" in c.tensor for c in res.checks) == 6  # 3 cuts, both ways


# ---- refusals ----------------------------------------------------------------------------

@pytest.mark.parametrize("make, parallel, key, message", [
    (_mlp, {"pipeline": 8, "data": 1, "layers": 4}, "parallel.pipeline",
     "8 stages x 1 chunks need at least 8 units; a model of type 'mlp' has 4 (model.layers)"),
    (_resnet, {"pipeline_layers": [1, 1]}, "parallel.pipeline_layers",
     "adds up to 2 units; expected model.conv_layers + model.fc_layers = 5"),
    (_mlp, {"pipeline_layers": [4, 0]}, "parallel.pipeline_layers",
     "[4, 0]: every stage needs at least one unit"),
    (_mlp, {"pipeline_layers": [4]}, "parallel.pipeline_layers",
     "has 1 entries; expected one per virtual stage, parallel.pipeline*virtual_stages = 2"),
])
def test_bad_splits_are_refused_by_name(make, parallel, key, message):
    kw = dict(parallel)
    model_kw = {k: kw.pop(k) for k in ("layers",) if k in kw}
    with pytest.raises(InputError) as err:
        make(**model_kw, **kw)
    assert err.value.key == key
    assert str(err.value).endswith(message)


def _graph(stages: list[int | None], **parallel: Any):
    ops = [{"name": "mm1", "type": "MatMul", "inputs": ["x", "w"], "output": "h"},
           {"name": "act", "type": "ReLU", "inputs": ["h"], "output": "a"},
           {"name": "mm2", "type": "MatMul", "inputs": ["a", "w"], "output": "y"},
           {"name": "ce", "type": "SoftmaxCrossEntropy", "inputs": ["y", "labels"],
            "output": "ce"},
           {"name": "loss", "type": "ReduceMean", "inputs": ["ce"], "output": "loss"}]
    for op, stage in zip(ops, stages):
        if stage is not None:
            op["attrs"] = {"pipeline_stage": stage}
    return parse_scenario({
        "name": "g", "hardware": "cpu-x86", "cluster": {"nodes": 1, "devices_per_node": 2},
        "model": {"type": "graph", "dtype": "fp32", "tensors": [
            {"name": "x", "shape": [4, 8]}, {"name": "labels", "shape": [4], "kind": "label"},
            {"name": "w", "shape": [8, 8], "kind": "parameter"}], "ops": ops},
        "parallel": {"pipeline": 2, **parallel}}, "g.yaml")


@pytest.mark.parametrize("stages, key, message", [
    ([1, 0], "model.ops[1].attrs.pipeline_stage",
     "0 comes after an operator on stage 1; stages run in operator order (allowed: 1 to 1)"),
    ([0, 2], "model.ops[1].attrs.pipeline_stage",
     "2: not a stage of parallel.pipeline*virtual_stages = 2 (allowed: 0 to 1)"),
    ([0], "model.ops", "no operator is on pipeline stage 1 (attrs.pipeline_stage); every "
     "stage of parallel.pipeline*virtual_stages = 2 needs one"),
])
def test_bad_pipeline_stage_attrs_are_refused_by_name(stages, key, message):
    with pytest.raises(InputError) as err:
        _graph(stages)
    assert (err.value.key, str(err.value).split(": ", 2)[-1]) == (key, message)


def test_pipeline_stage_and_pipeline_layers_together_are_refused():
    with pytest.raises(InputError) as err:
        _graph([0, None, 1], pipeline_layers=[2, 3])
    assert err.value.key == "parallel.pipeline_layers"


def test_a_parameter_cut_apart_is_refused():
    """A weight read on two stages (a tied weight): each stage holds its own parameters."""
    s = _graph([0, None, 1])
    with pytest.raises(InputError) as err:
        simulate(s, load_profile("cpu-x86"))
    assert err.value.key == "model.ops"
    assert "parameter 'w' is read on pipeline stages 0 and 1" in str(err.value)


def test_a_pipeline_lets_the_reduction_follow_the_units():
    """Cut into units, a stage's gradients are ready unit by unit: overlapping the
    data-parallel reduction with the last backward (`overlap.grad_reduce`) now applies, and
    with buckets smaller than a unit it hides part of the reduction."""
    kw = dict(layers=8, hidden=512, pipeline=2, data=2, comm_fusion={"bucket_mb": 0.5})
    on = simulate(_mlp(**kw), A100)
    off = simulate(_mlp(**kw, overlap={"grad_reduce": False}), A100)
    assert on.iteration_time_s < off.iteration_time_s


def test_pipeline_stages_hold_their_share_of_the_model_states():
    """At its peak the first stage's device holds the model states (fp32 Adam: 16 bytes
    per parameter) of its own layers only, 3 of 8 here; the pipeline's communicator adds
    framework memory (NCCL buffers)."""
    def states(r):
        cats = dict(r.memory.by_category)
        return cats["parameters"] + cats["gradients"] + cats["optimizer_states"]

    flat = simulate(_mlp(layers=8, hidden=512, pipeline=1, data=1), A100)
    piped = simulate(_mlp(layers=8, hidden=512, pipeline=4, data=1), A100)
    first = _work(_mlp(layers=8, hidden=512, pipeline=4, data=1))[0]
    assert states(piped) == 16 * first.params < states(flat)


# ---- micro-batches of an operator graph --------------------------------------------------

def test_graph_micro_batches_fill_the_pipeline():
    """`parallel.micro_batches` (MindSpore PipelineCell's micro_size): each micro-batch is
    the graph as written; more of them send more and leave a smaller share idle, under
    GPipe and 1F1B alike."""
    cpu = load_profile("cpu-x86")
    share, sent = {}, {}
    for m in (1, 8):
        for schedule in ("1f1b", "gpipe") if m > 1 else ("1f1b",):
            r = simulate(_bundled("pipeline-graph-seed-c-8-cpu", f"parallel.micro_batches={m}",
                                  f"parallel.schedule={schedule}"), cpu)
            share[(m, schedule)] = dict(r.breakdown_s)["bubble"] / r.iteration_time_s
            sent[(m, schedule)] = dict(r.comm_bytes)["send_recv"]
    assert sent[(8, "gpipe")] == sent[(8, "1f1b")] == 8 * sent[(1, "1f1b")] == 8 * 1152
    assert share[(8, "1f1b")] < share[(1, "1f1b")]
    assert share[(8, "gpipe")] < share[(1, "1f1b")]


def test_graph_micro_batches_verify_as_accumulated_steps():
    """Without a pipeline, micro-batches are gradient accumulation: verify runs two of the
    graph's micro-batches, each with data of its own, against one device accumulating the
    same two."""
    s = _bundled("seed-c-resnet-boundary", "parallel.micro_batches=3")
    res = verify_scenario(s)
    assert res.ok
    assert "2 of 3 micro-batches run" in res.notes


@pytest.mark.parametrize("sets, key, message", [
    (["parallel.schedule=gpipe", "parallel.micro_batches=1"], "parallel.schedule",
     "gpipe orders the micro-batches of a pipeline; this operator graph runs 1 on 2 "
     "stage(s) (allowed: 1f1b; give parallel.pipeline and parallel.micro_batches > 1)"),
])
def test_graph_schedule_needs_micro_batches(sets, key, message):
    with pytest.raises(InputError) as err:
        _bundled("pipeline-graph-seed-c-8-cpu", *sets)
    assert (err.value.key, str(err.value).split(": ", 2)[-1]) == (key, message)


def test_micro_batches_of_other_models_are_derived():
    with pytest.raises(InputError) as err:
        _mlp(micro_batches=4)
    assert err.value.key == "parallel.micro_batches"
    assert str(err.value).endswith(
        "4 applies to model.type graph; a model of type 'mlp' has "
        "training.global_batch_size / (micro_batch_size * data) micro-batches (allowed: 1)")


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("p, m", [(2, 3), (4, 4), (4, 8)])
def test_mlp_bubble_fraction_is_p_minus_1_over_m_plus_p_minus_1(schedule, p, m):
    """Uniform stages and free communication: each hidden layer's MatMul 1 s forward and
    its weight-gradient GEMM 2 s backward, nothing else costs time; 8 layers in p stages
    take (m + p - 1)(t_f + t_b), idle (p - 1)/(m + p - 1) of it (Huang et al. 2019;
    Narayanan et al. 2021, Sec. 2.2)."""
    import re

    def compute_s(spec) -> float:
        if re.fullmatch(r"fc\d+", spec.name):
            return 1.0
        return 2.0 if re.fullmatch(r"fc\d+\.wgrad", spec.name) else 0.0

    costs = CostModel(compute_s=compute_s, collective_s=lambda *a: 0.0,
                      send_recv_s=lambda nbytes, intra: 0.0)
    s = _mlp(layers=8, pipeline=p, data=1, micro=m, schedule=schedule)
    r = simulate(s, A100, costs=costs)
    assert r.plan.stage_layers == (8 // p,) * p
    assert r.iteration_time_s == pytest.approx((m + p - 1) * 3.0 * (8 // p))
    assert dict(r.breakdown_s)["bubble"] / r.iteration_time_s == pytest.approx(
        (p - 1) / (m + p - 1))
