"""MindSpore's parallel modes (mindspore.context.ParallelMode) and search modes as scenario
keys (issue 26 item 4): DATA_PARALLEL is `parallel.mode: data` (every operator data
parallel: strategies and model-parallel degrees refused by key), HYBRID_PARALLEL is refused
by name with the reason, and `search_mode="recursive_programming"` is `parallel.search:
recursive_programming` (tests/test_propagate.py pins its plans)."""

from __future__ import annotations

import json

import pytest
from model_kinds import refused_flat


def test_data_mode_runs_every_operator_data_parallel(invoke_cli):
    result = invoke_cli("verify", "ms-data-parallel-mode-8-cpu", "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    semi = invoke_cli("verify", "ms-data-parallel-mode-8-cpu", "--json", "--set",
                      "parallel.mode=semi_auto")
    same = json.loads(semi.stdout)  # the plan of unconfigured operators under semi_auto
    assert out["ok"] and out["checks"] == same["checks"]
    assert out["collectives"] == same["collectives"]


@pytest.mark.parametrize("name, sets, message", [
    ("tiny-cpu", ("parallel.mode=data",),
     "parallel.tensor: 2 does not apply with parallel.mode: data, where every operator is "
     "data parallel (allowed: 1)"),
    ("seed-a-weight-ops", ("parallel.mode=data",),
     "model.ops[0].strategy: does not apply with parallel.mode: data, where every operator "
     "is data parallel (remove it, or use semi_auto)"),
    ("verify-tiny-dp8", ("parallel.mode=hybrid",),
     "parallel.mode: hybrid (MindSpore's HYBRID_PARALLEL: the network's own code slices the "
     "tensors and calls the collectives) is not simulated; write the same split as operator "
     "strategies under semi_auto, which inserts those collectives (allowed: semi_auto, auto, "
     "parameter_server, data)"),
])
def test_modes_that_do_not_apply_are_refused_by_key(invoke_cli, name, sets, message):
    args = ["run", name]
    for item in sets:
        args += ["--set", item]
    result = invoke_cli(*args)
    text = refused_flat(result)
    assert message in text, text


def test_the_recursive_search_scenario_verifies(invoke_cli):
    result = invoke_cli("verify", "ms-recursive-search-seed-c", "--json")
    assert result.exit_code == 0 and json.loads(result.stdout)["ok"], result.output


def test_the_recursive_search_says_which_search_it_runs(invoke_cli):
    """Not MindSpore's whole double recursive search: `run` notes and `explain` prints that
    it runs the inner recursion only, on the other searches' cost."""
    runs = ("the inner recursion of MindSpore's double recursive search (SAPP) only: "
            "operators by decreasing weight, each cheapest against those decided; not "
            "SAPP's outer recursion, which bisects the devices a factor of two at a time")
    run = invoke_cli("run", "ms-recursive-search-seed-c", "--json")
    assert run.exit_code == 0, run.output
    assert any(n.startswith(f"parallel.search recursive_programming runs {runs}")
               for n in json.loads(run.stdout)["notes"])
    text = invoke_cli("explain", "ms-recursive-search-seed-c")
    assert text.exit_code == 0 and f"  (recursive_programming: {runs}" in text.stdout
    other = invoke_cli("run", "seed-c-propagate", "--json")
    assert not any("parallel.search" in n for n in json.loads(other.stdout)["notes"])
