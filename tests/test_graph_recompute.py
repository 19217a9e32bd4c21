"""Activation recompute of mlp, resnet and graph models (issue 10 item 3,
`schedule.graph_recompute`): `parallel.recompute: full` checkpoints at the units a pipeline
cuts between, `attrs.recompute: true` recomputes one operator of a `type: graph` model.
Closed forms of what stays stored and what runs again, the direction of memory and time
against no recompute (pipelined or not), `verify` re-running the recomputed forwards with
its mutations, and the refusal of `selective`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from simulator.config.hardware import load_profile
from simulator.config.resources import resolve_yaml
from simulator.config.scenario import parse_scenario
from simulator.cost.specs import CommSpec
from simulator.errors import InputError
from simulator.numeric.execution import Faults
from simulator.program.graph_program import graph_program
from simulator.program.program import total_flops
from simulator.simulation.simulate import simulate
from simulator.simulation.verify import verify_scenario

F32 = 4
RESNET = {"type": "resnet", "conv_layers": 4, "in_channels": 4, "channels": 4,
          "image_size": 8, "kernel_size": 3, "fc_layers": 2, "hidden_size": 32,
          "num_classes": 8, "dtype": "fp32"}


def _bundled(name: str, *overrides: str):
    path = resolve_yaml(name, "scenarios")
    return parse_scenario(yaml.safe_load(path.read_text()), str(path), list(overrides))


def _scenario(model: dict[str, Any], recompute: str = "none", data: int = 4,
              pipeline: int = 1, mbs: int = 8, micro: int = 4, hardware: str = "cpu-x86"):
    return parse_scenario({
        "name": "rc", "hardware": hardware,
        "cluster": {"nodes": 1, "devices_per_node": data * pipeline},
        "model": model,
        "training": {"global_batch_size": mbs * data * micro, "micro_batch_size": mbs},
        "parallel": {"data": data, "pipeline": pipeline, "recompute": recompute},
    }, "rc.yaml")


def _mlp(layers: int, hidden: int = 16, classes: int = 8, **kw: Any):
    return _scenario({"type": "mlp", "layers": layers, "hidden_size": hidden,
                      "input_size": hidden, "num_classes": classes, "dtype": "fp32"}, **kw)


def _sim(s) -> tuple[float, float, float]:
    r = simulate(s, load_profile(s.hardware))
    return r.iteration_time_s, r.memory.peak_bytes, dict(r.breakdown_s)["recompute"]


def _with_op_attrs(name: str, ops: dict[str, dict], tmp_path) -> str:
    doc = yaml.safe_load(resolve_yaml(name, "scenarios").read_text())
    for op in doc["model"]["ops"]:
        op["attrs"] = {**op.get("attrs", {}), **ops.get(op["name"], {})}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def _seed_c_recomputed(tmp_path):
    """The seed (c) pipeline with a ReLU recomputed on each stage (those whose outputs the
    next MatMul keeps)."""
    path = _with_op_attrs("pipeline-graph-seed-c-8-cpu",
                          {n: {"recompute": True} for n in ("relu1", "fc1_relu")},
                          tmp_path)
    return parse_scenario(yaml.safe_load(Path(path).read_text()), path, [])


# ---- closed forms -----------------------------------------------------------------------

@pytest.mark.parametrize("layers", [2, 3, 5])
def test_full_recompute_stores_only_the_unit_inputs(layers):
    """An mlp of L layers, b local rows, h hidden, c classes (data parallel, fp32): without
    recompute each layer keeps its MatMul output and its ReLU output (2 b h each), the
    classifier its logits (b c); with full recompute only the L - 1 activations entering
    layers 1..L-1 stay, and the last unit's backward holds its own set again: its two
    tensors and the logits (it is re-run first, when nothing has been freed yet)."""
    b, h, c = 8, 16, 8
    plain = graph_program(_mlp(layers)).program
    staged = graph_program(_mlp(layers, recompute="full")).program
    n = len(staged.sequence())
    assert n == layers
    assert plain.block("graph").saved_bytes == (2 * layers * b * h + b * c) * F32
    assert staged.saved_bytes(0, n) == (layers - 1) * b * h * F32
    assert staged.working_bytes(0, n) == (2 * b * h + b * c) * F32


def test_full_recompute_runs_every_forward_again_but_the_last_fc_layers():
    """Every conv block and the first FC layer run their forward again; the last unit
    (the classifier, the loss) does not: nothing its backward reads would be made again
    (its MatMul keeps only its input, the unit before's output; the cross-entropy keeps
    its probabilities, which re-making would need the logits stored instead)."""
    *units, last = graph_program(_scenario(RESNET, "full")).program.sequence()
    assert [total_flops(u.recompute) for u in units] == [total_flops(u.fwd) for u in units]
    assert last.ops == ("fc1", "ce", "loss") and last.recompute == ()
    assert all(op.phase == "recompute" for u in units for op in u.recompute)


@pytest.mark.parametrize("name", ["seed-sbp-partial-chain", "seed-c-resnet-boundary"])
def test_full_recompute_with_nothing_to_recompute_is_refused(name):
    """Graphs whose cells are single operators keeping only other cells' outputs: a
    re-run would make nothing their backward reads."""
    with pytest.raises(InputError) as err:
        graph_program(_bundled(name, "parallel.recompute=full"))
    assert str(err.value).endswith(
        "parallel.recompute: full finds nothing to recompute in this model of type 'graph': "
        "no block's re-run would make a tensor its backward reads (its operators keep only "
        "their inputs from other blocks; allowed: none, or attrs.recompute: true on the "
        "operators whose outputs are kept)")


def test_an_operator_recompute_that_changes_nothing_is_refused(tmp_path):
    """The loss's mean: no operator keeps its output."""
    path = _with_op_attrs("seed-a-weight-ops", {"loss": {"recompute": True}}, tmp_path)
    with pytest.raises(InputError) as err:
        graph_program(parse_scenario(yaml.safe_load(Path(path).read_text()), path, []))
    assert str(err.value).endswith(
        "model.ops[8].attrs.recompute: true: no operator's backward reads what loss "
        "makes (it is kept by no one, or by a recomputed operator of another run), so its "
        "re-run would change nothing (allowed: false)")


def test_an_operator_recompute_runs_that_operator_and_the_move_of_its_output_again():
    """seed (a) with its GeLU recomputed: the GeLU kernel runs again with its input's
    redistribution, and so does the one that brings its output to the row-parallel
    MatMul's layout; its output is no longer stored (the one tensor the GeLU makes), its
    input still is."""
    prog = graph_program(_bundled("recompute-graph-seed-a-ops")).program
    plain = graph_program(_bundled("seed-a-weight-ops")).program
    unit = next(u for u in prog.sequence() if u.ops == ("ffn.act",))
    assert [op.name for op in unit.recompute if not isinstance(op, CommSpec)] == ["ffn.act"]
    assert total_flops(unit.recompute) == total_flops(unit.fwd)
    moved = [op for op in unit.recompute if isinstance(op, CommSpec)]
    want = [op for op in plain.block("graph").fwd if isinstance(op, CommSpec)
            and op.name.startswith(("ffn.act.", "ffn.projection."))]
    assert [(m.collective, m.bytes) for m in moved] == [(w.collective, w.bytes) for w in want]
    kept = prog.saved_bytes(0, len(prog.sequence()))
    # a = GeLU(h): [32, 32] split (2, 4) over the 8 devices as the projection reads it
    assert plain.block("graph").saved_bytes - kept == 32 * 32 // 8 * F32


# ---- direction: memory down, time up -----------------------------------------------------

@pytest.mark.parametrize("without, with_rc", [
    (("recompute-mlp-tiny-verify", "parallel.recompute=none"), ("recompute-mlp-tiny-verify",)),
    (("seed-a-weight-ops",), ("recompute-graph-seed-a-ops",)),
], ids=["mlp", "graph"])
def test_recompute_lowers_the_peak_and_costs_time(without, with_rc):
    t0, m0, r0 = _sim(_bundled(*without))
    t1, m1, r1 = _sim(_bundled(*with_rc))
    assert r0 == 0 < r1
    assert m1 < m0 and t1 > t0


def test_resnet_recompute_lowers_the_peak_and_costs_time():
    t0, m0, _ = _sim(_scenario(RESNET, mbs=64))
    t1, m1, r1 = _sim(_scenario(RESNET, "full", mbs=64))
    assert m1 < m0 and t1 > t0 and r1 > 0


@pytest.mark.parametrize("model", [
    {"type": "mlp", "layers": 8, "hidden_size": 32, "input_size": 32, "num_classes": 8,
     "dtype": "fp32"}, RESNET], ids=["mlp", "resnet"])
def test_pipelined_recompute_lowers_the_peak_and_costs_time(model):
    t0, m0, _ = _sim(_scenario(model, data=2, pipeline=2, mbs=64))
    t1, m1, r1 = _sim(_scenario(model, "full", data=2, pipeline=2, mbs=64))
    assert m1 < m0 and t1 > t0 and r1 > 0


def test_pipelined_graph_operator_recompute_lowers_the_peak(tmp_path):
    s = _seed_c_recomputed(tmp_path)
    t0, m0, _ = _sim(_bundled("pipeline-graph-seed-c-8-cpu"))
    t1, m1, r1 = _sim(s)
    assert m1 < m0 and t1 > t0 and r1 > 0


# ---- verify --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def mlp_runs():
    return {mode: verify_scenario(_bundled("recompute-mlp-tiny-verify",
                                           f"parallel.recompute={mode}"))
            for mode in ("none", "full")}


def _recomputed(result) -> int:
    note = next(n for n in result.notes if n.startswith("recompute: "))
    return int(note.split()[1])


def test_verify_reruns_every_forward_and_its_collectives(mlp_runs):
    """19 operators (8 x MatMul + ReLU, the classifier, the loss and its mean) run again
    in each of the 2 micro-batches verify runs, with their forward collectives: the
    tensor-parallel ones `run` prices in the forward."""
    full, none = mlp_runs["full"], mlp_runs["none"]
    assert full.ok and none.ok
    assert _recomputed(full) == 19 * 2
    assert not any("recompute" in n for n in none.notes)
    fwd = [op for u in graph_program(_bundled("recompute-mlp-tiny-verify")).program.sequence()
           for op in u.fwd if isinstance(op, CommSpec)]
    extra = {k: full.collectives[k] - none.collectives.get(k, 0) for k in full.collectives}
    assert sum(extra.values()) == 2 * len(fwd)


@pytest.mark.parametrize("fault", ["skip", "corrupt"])
def test_verify_fails_when_the_recompute_is_skipped_or_stale(fault):
    bad = verify_scenario(_bundled("recompute-mlp-tiny-verify"), Faults(recompute_fault=fault))
    assert not bad.ok
    # the forward is right; what the backward read was not
    assert all(".grad" in c.tensor or ".updated" in c.tensor for c in bad.checks if not c.ok)


@pytest.mark.parametrize("name, sets", [
    ("recompute-graph-seed-a-ops", ()),
    ("resnet", ()),
    ("seed-a-weight-ops", ("parallel.recompute=full",)),
])
def test_verify_recompute_of_every_model_type(name, sets):
    s = _bundled(name, *sets) if name != "resnet" else _scenario(
        RESNET, "full", data=2, pipeline=2, mbs=2, micro=2)
    good = verify_scenario(s)
    assert good.ok and _recomputed(good) > 0
    assert not verify_scenario(s, Faults(recompute_fault="corrupt")).ok


def test_verify_pipelined_operator_recompute(tmp_path):
    s = _seed_c_recomputed(tmp_path)
    good = verify_scenario(s)
    assert "2 of 4 micro-batches run" in good.notes
    assert good.ok and _recomputed(good) == 2 * 2  # 2 operators, 2 micro-batches
    assert not verify_scenario(s, Faults(recompute_fault="skip")).ok


def test_kept_collectives_move_fewer_bytes_and_hold_more(mlp_runs):
    """`recompute_comm.tensor: false` (MindSpore mp_comm_recompute) on an mlp: the
    recompute pass runs no tensor-parallel collective (verify runs exactly the collectives
    of the run without recompute), their outputs stay in memory."""
    base = _bundled("recompute-mlp-tiny-verify")
    kept = _bundled("recompute-mlp-tiny-verify", "parallel.recompute_comm.tensor=false")
    a, b = (simulate(s, load_profile(s.hardware)) for s in (base, kept))
    assert sum(dict(b.comm_bytes).values()) < sum(dict(a.comm_bytes).values())
    assert b.memory.peak_bytes > a.memory.peak_bytes
    assert b.iteration_time_s < a.iteration_time_s
    got = verify_scenario(kept)
    assert got.ok and _recomputed(got) == 19 * 2
    assert got.collectives == mlp_runs["none"].collectives


# ---- refusals ------------------------------------------------------------------------------

@pytest.mark.parametrize("name, sets, kind", [
    ("recompute-mlp-tiny-verify", (), "mlp"),
    ("pipeline-resnet-8-a100", (), "resnet"),
    ("seed-a-weight-ops", (), "graph"),
])
def test_selective_is_refused_by_name(name, sets, kind):
    with pytest.raises(InputError) as err:
        _bundled(name, *sets, "parallel.recompute=selective")
    assert str(err.value).endswith(
        f"parallel.recompute: selective recomputes a transformer layer's attention core; a "
        f"model of type '{kind}' has none (allowed: none, full; or attrs.recompute: true on "
        f"the operators of a type graph model)")


@pytest.mark.parametrize("knob", ["parallel.recompute=full", "parallel.offload.activations=true"])
def test_host_placed_tables_stay_on_the_host(knob):
    """The embedding table of a `primitive_target: CPU` lookup stays in host memory when
    recompute or offload cut the graph into units (its gradient is still reduced): the
    device's model states are those of the run without the knob, which keeps less and
    takes no less time."""
    base, other = (simulate(s, load_profile(s.hardware)) for s in (
        _bundled("hetero-embedding-cpu-8-a100"), _bundled("hetero-embedding-cpu-8-a100", knob)))
    assert other.plan.static_memory == base.plan.static_memory
    assert other.memory.peak_bytes < base.memory.peak_bytes
    assert other.iteration_time_s >= base.iteration_time_s
