"""`verify` of transformer pipelines with each stage on devices of its own
(`numeric.pipeline.StagedRun` over `simulation.verify.pipeline_split`): the boundary activations and
their gradients sent between adjacent stages, and the tied embedding / LM-head gradient
sent from the last stage to the first (Megatron-LM's embedding-group all-reduce), each
checked against the same sends on one device per stage; a dropped or corrupted send
fails."""

from __future__ import annotations

from typing import Any

import pytest

from simulator.config.hardware import load_profile
from simulator.config.scenario.load import parse_scenario
from simulator.config.scenario.schema import Scenario
from simulator.models.cases import build_case
from simulator.numeric.execution import Faults
from simulator.numeric.pipeline import SendFaults
from simulator.simulation.simulate import simulate
from simulator.simulation.stage_split import stage_split
from simulator.simulation.verify import pipeline_split, verify_scenario


def _gpt(pipeline: int, layers: int = 4, data: int = 1, tensor: int = 2, micro: int = 2,
         vocab_size: int = 32, **parallel: Any) -> Scenario:
    return parse_scenario({
        "name": f"tiny gpt pp{pipeline}", "hardware": "cpu-x86",
        "cluster": {"nodes": 1, "devices_per_node": data * tensor * pipeline},
        "model": {"type": "transformer", "layers": layers, "hidden_size": 16, "num_heads": 4,
                  "ffn_hidden_size": 32, "seq_length": 8, "vocab_size": vocab_size,
                  "dtype": "fp32"},
        "training": {"global_batch_size": micro * data, "micro_batch_size": 1,
                     "optimizer": "adam", "learning_rate": 1e-3},
        "parallel": {"data": data, "tensor": tensor, "pipeline": pipeline, **parallel}},
        "t.yaml")


def _sent(result) -> dict[str, bool]:
    return {c.tensor: c.ok for c in result.checks if "(sent stage" in c.tensor}


def test_two_stages_on_their_own_devices_equal_one_device():
    r = verify_scenario(_gpt(2))
    assert r.ok and r.devices == 4  # tensor 2 on each of 2 stages
    assert _sent(r) == {"l1.res2 (sent stage 0 -> 1)": True,
                        "l1.res2.grad (sent stage 1 -> 0)": True,
                        "wte.grad (sent stage 1 -> 0)": True}  # the tied LM head's
    # 2 micro-batches x (activation, its gradient, the tied weight's gradient)
    assert r.collectives["send_recv"] == 6
    assert "pipeline=2: each stage ran on its own 2 devices" in r.notes[-1]
    assert {c.tensor for c in r.checks} >= {"wte.grad", "wte.updated", "l3.w2.grad", "loss"}


def test_four_stages_with_data_sequence_parallel_and_zero3():
    r = verify_scenario(_gpt(4, data=2, sequence_parallel=True, optimizer_shard=3))
    assert r.ok and r.devices == 16
    assert sorted(_sent(r)) == sorted(
        [f"l{i}.res2 (sent stage {i} -> {i + 1})" for i in range(3)]
        + [f"l{i}.res2.grad (sent stage {i + 1} -> {i})" for i in range(3)]
        + ["wte.grad (sent stage 3 -> 0)"])
    assert all(_sent(r).values())


def test_shrunk_model_keeps_a_layer_per_virtual_stage():
    """hidden 256 does not fit: shrunk to one layer per stage of 2 x 2 virtual stages."""
    s = _gpt(2, layers=8, schedule="interleaved_1f1b", virtual_stages=2)
    s = s.model_copy(update={"model": s.model.model_copy(update={"hidden_size": 256})})
    r = verify_scenario(s)
    assert r.ok and r.devices == 4
    assert "shrunk to layers=4" in r.notes[0]
    assert "(operators per stage 28/25/25/29)" in r.notes[-1]  # embedding first, head last


@pytest.mark.parametrize("given, first_send", [([1, 3], "l0.res2"), ([0, 4], "embed_drop")])
def test_stages_hold_the_given_layers(given, first_send):
    s = _gpt(2, pipeline_layers=given)
    split = pipeline_split(s, build_case(s).sharded, None)
    assert split is not None
    assert [n for n, v in split.stage_of.items() if v == 0][-1] == first_send
    assert split.stage_of["lnf"] == split.stage_of["loss"] == 1
    assert f"{first_send} (sent stage 0 -> 1)" in _sent(verify_scenario(s))


def test_recompute_runs_again_on_its_stage():
    r = verify_scenario(_gpt(2, recompute="full"))
    assert r.ok and any(n.startswith("recompute: ") for n in r.notes)
    assert r.collectives["send_recv"] == 6


@pytest.mark.parametrize("fault, failed", [
    (SendFaults(drop=("fwd", 0)), "l1.res2 (sent stage 0 -> 1)"),
    (SendFaults(corrupt=("fwd", 0)), "l1.res2 (sent stage 0 -> 1)"),
    (SendFaults(drop=("bwd", 1)), "wte.grad (sent stage 1 -> 0)"),
])
def test_a_dropped_or_corrupted_send_fails(fault, failed):
    r = verify_scenario(_gpt(2), send_faults=fault)
    assert not r.ok
    assert not _sent(r)[failed]
    bad = {c.tensor for c in r.checks if not c.ok}
    assert ("l2.q" in bad) if fault.drop == ("fwd", 0) or fault.corrupt else "l0.wq.grad" in bad


def test_a_dropped_send_from_a_middle_stage_fails_four_stages():
    r = verify_scenario(_gpt(4), send_faults=SendFaults(drop=("bwd", 2)))
    assert not r.ok
    assert not _sent(r)["l1.res2.grad (sent stage 2 -> 1)"]
    assert _sent(r)["l2.res2.grad (sent stage 3 -> 2)"]  # the later stage's send is intact


def test_skipped_zero3_regather_on_a_recomputed_stage_fails():
    s = _gpt(2, data=2, recompute="full", optimizer_shard=3,
             recompute_comm={"optimizer": True})
    assert verify_scenario(s).ok
    assert not verify_scenario(s, Faults(skip_recompute_gather=True)).ok


@pytest.mark.parametrize("layers, pipeline", [(3, 2), (4, 3)])
def test_stages_hold_the_layers_run_assigns(layers, pipeline):
    """Without `pipeline_layers`, the split `run` balances on the profile's prices (the
    model fits unshrunk: its own layers)."""
    s = _gpt(pipeline, layers=layers, vocab_size=256)
    hw = load_profile("cpu-x86")
    split = pipeline_split(s, build_case(s).sharded, stage_split(s, hw))
    assert split is not None
    held = [sum(1 for n, v in split.stage_of.items() if v == stage and n.endswith(".ln1"))
            for stage in range(pipeline)]
    assert held == list(simulate(s, hw).plan.stage_layers)
    result = verify_scenario(s, split=stage_split(s, hw))
    assert result.ok and not any("shrunk" in n for n in result.notes)
