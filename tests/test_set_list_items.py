"""`--set` reaches list items: `model.ops[0].strategy=...` (an operator's strategy,
overridden or swept), `parallel.pipeline_layers[0]=5`, with exact errors for a bad index."""

from __future__ import annotations

import json

import pytest

from simulator.api import load_scenario
from simulator.errors import InputError


def test_operator_strategy_override():
    base = load_scenario("seed-a-weight-ops").scenario
    new = load_scenario("seed-a-weight-ops", ["model.ops[2].strategy=[[8, 1], [1, 1]]"]).scenario
    assert base.model.ops[2].name == "ffn.mapping"
    assert new.model.ops[2].strategy != base.model.ops[2].strategy
    assert [list(s) for s in new.model.ops[2].strategy] == [[8, 1], [1, 1]]
    assert new.model.ops[4] == base.model.ops[4]  # the other operators as written


def test_operator_strategy_changes_the_run(invoke_cli):
    times = []
    for strategy in ("[[2, 1], [1, 4]]", "[[8, 1], [1, 1]]"):
        res = invoke_cli("run", "seed-a-weight-ops", "--json", "--set",
                         f"model.ops[2].strategy={strategy}")
        assert res.exit_code == 0, res.stderr
        times.append(json.loads(res.stdout)["communication"])
    assert times[0] != times[1]


def test_pipeline_layers_item():
    # the scenario's own remedy (balancing by speed, [14, 26]), then one item moved: the
    # overrides apply in order
    new = load_scenario("mixed-a100-h100-pp2", [
        "parallel.pipeline_layers=[14, 26]", "parallel.pipeline_layers[0]=15",
        "parallel.pipeline_layers[1]=25"]).scenario
    assert list(new.parallel.pipeline_layers) == [15, 25]


@pytest.mark.parametrize(("item", "key", "message"), [
    ("model.ops[9].strategy=[[1, 1]]", "model.ops[9].strategy",
     "model.ops has 9 items (index 0..8); found [9]"),
    ("model.ops[x].strategy=1", "model.ops[x].strategy",
     "found [x]; a list index is a whole number >= 0 in brackets, as in "
     "model.ops[0].strategy"),
    ("model.ops[-1].strategy=1", "model.ops[-1].strategy",
     "found [-1]; a list index is a whole number >= 0 in brackets, as in "
     "model.ops[0].strategy"),
    ("model.dtype[0]=1", "model.dtype[0]", "model.dtype is not a list, so [0] selects nothing"),
    ("model.ops[0][1]=1", "model.ops[0][1]",
     "model.ops[0] is not a list, so [1] selects nothing"),
    ("parallel.pipeline_layers[0]=5", "parallel.pipeline_layers[0]",
     "parallel.pipeline_layers is not set, so it has no item [0]; set the whole list "
     "(parallel.pipeline_layers=[...])"),
    ("model.ops]0[=1", "model.ops]0[", "the key must be a dotted path like parallel.tensor "
     "(list items as model.ops[0].strategy)"),
])
def test_bad_list_index(item, key, message):
    with pytest.raises(InputError) as err:
        load_scenario("seed-a-weight-ops", [item])
    assert (err.value.source, err.value.key, err.value.message) == ("--set", key, message)


def test_bad_index_on_the_command_line(invoke_cli):
    res = invoke_cli("run", "seed-a-weight-ops", "--set", "model.ops[12].name=x")
    assert res.exit_code == 2
    assert res.stderr.strip() == ("error: --set: model.ops[12].name: model.ops has 9 items "
                                  "(index 0..8); found [12]")
