"""Strategy checkpoints (MindSpore's strategy_ckpt_save_file / strategy_ckpt_load_file,
issue 26 item 4): `explain` writes the plan it shows, and a scenario that loads it runs
and verifies that very plan; bad files and models are refused by key."""

from __future__ import annotations

import json

import pytest


def _run(invoke_cli, *args: str) -> dict:
    result = invoke_cli(*args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _figures(out: dict) -> tuple:
    return out["iteration_time_s"], out["communication"], out["memory"]["peak_bytes"]


def test_the_plan_explain_saves_is_the_plan_a_load_runs(invoke_cli, tmp_path):
    ckpt = tmp_path / "plan.json"
    invoke_cli("explain", "seed-c-propagate", "--set",
               f"parallel.strategy_ckpt_save_file={ckpt}")
    saved = json.loads(ckpt.read_text())
    assert saved["format"] == "shardsim strategy checkpoint 1"
    # the boundary operators as configured: fc1 data parallel, fc2 model parallel
    assert saved["ops"]["fc1"] == {"flat": ["S(0)"] * 3, "fc1.w": ["B"] * 3,
                                   "out": ["S(0)"] * 3}
    assert saved["ops"]["fc2"] == {"g1": ["B"] * 3, "fc2.w": ["S(1)"] * 3,
                                   "out": ["S(1)"] * 3}
    assert len(saved["ops"]) == 13  # every operator, configured or chosen
    auto = _run(invoke_cli, "run", "seed-c-propagate", "--json")
    loaded = _run(invoke_cli, "run", "seed-c-propagate", "--json", "--set",
                  "parallel.mode=semi_auto", "--set",
                  f"parallel.strategy_ckpt_load_file={ckpt}")
    assert _figures(loaded) == _figures(auto)
    proof = _run(invoke_cli, "verify", "seed-c-propagate", "--json", "--set",
                 "parallel.mode=semi_auto", "--set",
                 f"parallel.strategy_ckpt_load_file={ckpt}")
    assert proof["ok"]


def test_the_bundled_checkpoint_is_the_recursive_searchs_plan(invoke_cli):
    loaded = _run(invoke_cli, "run", "ms-strategy-ckpt-load-seed-c", "--json")
    searched = _run(invoke_cli, "run", "ms-recursive-search-seed-c", "--json")
    assert _figures(loaded) == _figures(searched)
    assert _figures(loaded) != _figures(_run(invoke_cli, "run", "seed-c-propagate", "--json"))


@pytest.mark.parametrize("name, write, message", [
    ("seed-c-propagate", '{"format": "shardsim strategy checkpoint 1", "ops": {"nope": {}}}',
     "parallel.strategy_ckpt_load_file: 'CKPT' holds operator 'nope', which the model does "
     "not have (operators: conv1, relu1, conv2, relu2, residual, flatten, fc1, fc1_relu, "
     "fc2, fc2_relu, fc3, ce, loss)"),
    ("seed-c-propagate", '{"ops": {}}',
     "parallel.strategy_ckpt_load_file: 'CKPT' is not a strategy checkpoint (expected a JSON "
     "object with format 'shardsim strategy checkpoint 1' and ops, as `shardsim explain` "
     "writes under parallel.strategy_ckpt_save_file)"),
    ("tiny-cpu", "{}",
     "parallel.strategy_ckpt_load_file: applies to model.type graph, whose operators take "
     "strategies (the transformer, mlp and resnet build their own)"),
])
def test_bad_checkpoints_are_refused_by_key(invoke_cli, tmp_path, name, write, message):
    ckpt = tmp_path / "plan.json"
    ckpt.write_text(write)
    result = invoke_cli("run", name, "--set", f"parallel.strategy_ckpt_load_file={ckpt}")
    text = result.stderr if hasattr(result, "stderr") else result.output
    assert result.exit_code == 2, text
    assert message.replace("CKPT", str(ckpt)) in " ".join(text.split()), text
