"""`shardsim verify`: sharded plans compute what one device computes, and broken plans fail."""

import json
import subprocess
import sys

import pytest
import yaml

from simulator.config.resources import resolve_yaml
from simulator.config.scenario import parse_scenario
from simulator.errors import InputError
from simulator.numeric.execution import Faults
from simulator.simulation.verify import verify_scenario


def _scenario(name: str, overrides=()):
    path = resolve_yaml(name, "scenarios")
    return parse_scenario(yaml.safe_load(path.read_text()), str(path), list(overrides))


@pytest.mark.parametrize("name", ["verify-tiny-dp8", "verify-tiny-tp8",
                                  "verify-tiny-dp2-tp4-sp"])
def test_transformer_plans_equal_one_device(name):
    result = verify_scenario(_scenario(name)).to_dict()
    assert result["ok"] is True
    assert result["devices"] == 8
    assert result["max_rel_error"] <= 1e-5  # computed in float64
    # outputs of every op (3 embedding, 25 per GPT layer with its biases, 4 head), then a
    # gradient and an updated value per parameter (2 + 16 per layer + 2)
    assert result["tensors_checked"] == (3 + 2 * 25 + 4) + 2 * (2 + 2 * 16 + 2)
    assert {c["tensor"] for c in result["checks"]} >= {"loss", "l1.wq.grad", "wte.updated",
                                                        "ce", "l1.proj.bias.grad"}


def test_sequence_parallel_plan_runs_gathers_and_scatters():
    collectives = verify_scenario(_scenario("verify-tiny-dp2-tp4-sp")).collectives
    assert collectives["all_gather"] > 0 and collectives["reduce_scatter"] > 0


@pytest.mark.parametrize("overrides", [
    ["parallel.optimizer_shard=1"],
    ["model.attention=flash"],
    ["model.attention=flash", "model.num_kv_heads=4", "parallel.sequence_parallel=false"],
    ["model.num_kv_heads=4", "model.ffn_activation=swiglu"],
    ["training.optimizer=sgd", "training.global_batch_size=16"],  # 2 accumulation steps
])
def test_variants_verify(overrides):
    assert verify_scenario(_scenario("verify-tiny-dp2-tp4-sp", overrides)).ok


@pytest.mark.parametrize("name,tensors", [("seed-a-weight-ops", 17),
                                          ("seed-b-dimension-changing", 13),
                                          ("seed-c-resnet-boundary", 23),
                                          ("seed-sbp-partial-chain", 8)])
def test_seed_graph_examples_verify(name, tensors):
    result = verify_scenario(_scenario(name))
    assert result.ok
    assert len(result.checks) == tensors
    assert result.to_dict()["max_rel_error"] <= 1e-4  # float32 scenarios


def test_dropped_all_reduce_fails():
    assert not verify_scenario(_scenario("verify-tiny-tp8"), Faults(drop_comm=0)).ok


def test_wrong_slice_fails():
    s = _scenario("verify-tiny-dp2-tp4-sp", ["parallel.optimizer_shard=1"])
    assert not verify_scenario(s, Faults(wrong_slice=True)).ok


def test_missing_gradient_reduction_fails():
    result = verify_scenario(_scenario("verify-tiny-dp8"), Faults(skip_grad_reduction=True))
    assert not result.ok
    failed = {c.tensor for c in result.checks if not c.ok}
    assert "l0.w1.grad" in failed and "l0.w1.updated" in failed
    assert "loss" not in failed  # the forward pass is untouched


def test_large_scenarios_are_shrunk_and_say_so():
    result = verify_scenario(_scenario("gpt3-175b-1024-a100"))
    assert result.ok
    assert result.devices == 1024  # data 8 x tensor 8 on each of the 16 pipeline stages
    note = result.shrunk_note
    assert "pipeline=16: each stage ran on its own 64 devices" in note
    assert "shrunk to layers=16" in note and "data=8 tensor=8" in note  # a layer a stage


def _graph_scenario(op_overrides: dict) -> dict:
    data = yaml.safe_load(resolve_yaml("seed-b-dimension-changing", "scenarios").read_text())
    data["model"]["ops"][1].update(op_overrides)
    return data


def test_strategy_that_uses_wrong_device_count_is_input_error():
    s = parse_scenario(_graph_scenario({"strategy": [[3, 1, 1]]}), "g.yaml")
    with pytest.raises(InputError) as err:
        verify_scenario(s)
    assert str(err.value) == (
        "g.yaml: model.ops[1].strategy: op 'pool' (ReduceMean): strategy uses 3 devices, "
        "which does not divide the 8 devices")


def test_strategy_splitting_a_reduced_dim_of_softmax_is_input_error():
    data = yaml.safe_load(resolve_yaml("seed-b-dimension-changing", "scenarios").read_text())
    data["model"]["ops"].insert(1, {"name": "sm", "type": "Softmax", "inputs": ["xb"],
                                    "output": "xs", "attrs": {"axis": -1},
                                    "strategy": [[1, 1, 8]]})
    data["model"]["ops"][2]["inputs"] = ["xs"]
    with pytest.raises(InputError, match=r"model\.ops\[1\]\.strategy: op 'sm' \(Softmax\): "
                                         r"dimension label 'd2' cannot be split"):
        verify_scenario(parse_scenario(data, "g.yaml"))


def test_unknown_operator_type_is_input_error():
    s = parse_scenario(_graph_scenario({"type": "MatMull"}), "g.yaml")
    with pytest.raises(InputError, match=r"g.yaml: model.ops\[1\]: pool: unknown operator "
                                         r"type 'MatMull' \(registered: Add, "):
        verify_scenario(s)


def test_cli_verify_json_contract():
    out = subprocess.run([sys.executable, "-m", "simulator", "verify", "seed-sbp-partial-chain",
                          "--json"], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert {"scenario", "devices", "ok", "max_abs_error", "max_rel_error", "tensors_checked",
            "checks"} <= set(data)
    assert data["ok"] is True and data["devices"] == 4
