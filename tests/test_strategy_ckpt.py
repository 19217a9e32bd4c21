"""Strategy checkpoints (MindSpore's strategy_ckpt_save_file / strategy_ckpt_load_file,
issue 26 item 4): `explain` writes the plan it shows, and a scenario that loads it runs
and verifies that very plan; bad files and models are refused by key."""

from __future__ import annotations

import json

import pytest
from model_kinds import refused_flat, stderr_of


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
    text = stderr_of(result)
    assert result.exit_code == 2, text
    assert message.replace("CKPT", str(ckpt)) in " ".join(text.split()), text


SHARED = "manual-split-shared-table-4-cpu"  # the seed's (10, 20, 30, 4) read by two Gathers


def _save(invoke_cli, name, ckpt, *sets):
    args = [a for kv in (*sets, f"parallel.strategy_ckpt_save_file={ckpt}")
            for a in ("--set", kv)]
    assert invoke_cli("explain", name, *args).exit_code == 0
    return json.loads(ckpt.read_text())


def _checks(out: dict) -> list:
    return [(c["tensor"], c["ok"], c["max_abs_error"]) for c in out["checks"]]


def test_explicit_blocks_round_trip_through_a_checkpoint(invoke_cli, tmp_path):
    """Each Gather's uneven blocks are saved beside its placements and loaded back: the
    loaded run holds the 30-row block, its run and verify are the searched plan's, and
    saving again from the loaded run writes the same checkpoint."""
    first = _save(invoke_cli, SHARED, tmp_path / "a.json")
    for gather, ids in (("embedding", "ids"), ("context_embedding", "context_ids")):
        # MindSpore's ManualImpl (gather_info.cc): the ids' last dim on the axes of the
        # table's rows, the output keeping it (no Partial)
        assert first["ops"][gather] == {"embedding_table": ["S(0)", "S(0)"],
                                        ids: ["S(1)", "S(1)"], "out": ["S(1)", "S(1)"],
                                        "manual_split": [10, 20, 30, 4]}
    assert "manual_split" not in first["ops"]["combine"]
    load = f"parallel.strategy_ckpt_load_file={tmp_path / 'a.json'}"
    again = _save(invoke_cli, SHARED, tmp_path / "b.json", load)
    assert again == first  # the same plan, operator by operator
    auto = _run(invoke_cli, "run", SHARED, "--json", "--set", "parallel.mode=auto")
    loaded = _run(invoke_cli, "run", SHARED, "--json", "--set", load)
    assert _figures(loaded) == _figures(auto)
    # the largest block, as configured; the search halves head.w's rows (S(0) on m1, its
    # choice after the Gathers' outputs keep the ids' split, MindSpore's ManualImpl)
    assert loaded["memory"]["by_category_bytes"]["parameters"] == 4 * (
        30 * 16 + 16 * 16 + 16 * 16 + 8 * 10)
    proof = _run(invoke_cli, "verify", SHARED, "--json", "--set", load)
    assert proof["ok"]
    assert _checks(proof) == _checks(_run(invoke_cli, "verify", SHARED, "--json",
                                          "--set", "parallel.mode=auto"))


def test_the_checkpoint_s_blocks_replace_the_scenario_s(invoke_cli, tmp_path):
    """Blocks in the file win over the operator's own attribute (here the even pieces the
    strategy alone makes): the loaded run is the uneven plan's."""
    ckpt = tmp_path / "a.json"
    _save(invoke_cli, SHARED, ckpt)
    even = ("model.ops[0].attrs={}", "model.ops[1].attrs={}")
    loaded = _run(invoke_cli, "run", SHARED, "--json", *[a for kv in even for a in (
        "--set", kv)], "--set", f"parallel.strategy_ckpt_load_file={ckpt}")
    auto = _run(invoke_cli, "run", SHARED, "--json", "--set", "parallel.mode=auto")
    assert _figures(loaded) == _figures(auto)


@pytest.mark.parametrize("blocks, message", [
    ([10, 20, 30, 3], "[10, 20, 30, 3] sums to 63, not the 64 rows of 'embedding_table' "
                      "(dim 0)"),
    ([10, 20, 34, 0], "[10, 20, 34, 0]: expected a list of positive row counts, one per "
                      "slice of 'embedding_table''s dim 0"),
    ("10,20,30,4", "'10,20,30,4': expected a list of positive row counts, one per slice "
                   "of 'embedding_table''s dim 0"),
])
def test_blocks_that_do_not_cut_the_rows_are_refused_at_their_key(invoke_cli, tmp_path,
                                                                  blocks, message):
    ckpt = tmp_path / "a.json"
    doc = _save(invoke_cli, SHARED, ckpt)
    doc["ops"]["context_embedding"]["manual_split"] = blocks
    ckpt.write_text(json.dumps(doc))
    result = invoke_cli("run", SHARED, "--set", f"parallel.strategy_ckpt_load_file={ckpt}")
    text = refused_flat(result)
    assert (f"{ckpt}: ops.context_embedding.manual_split: {message} (loaded by "
            f"parallel.strategy_ckpt_load_file of ") in text, text


def test_blocks_on_the_wrong_count_of_slices_are_refused(invoke_cli, tmp_path):
    """Three blocks where the placements cut the rows four ways: the plan refuses it at
    the operator's placements."""
    ckpt = tmp_path / "a.json"
    doc = _save(invoke_cli, SHARED, ckpt)
    doc["ops"]["embedding"]["manual_split"] = [10, 20, 34]
    ckpt.write_text(json.dumps(doc))
    result = invoke_cli("run", SHARED, "--set", f"parallel.strategy_ckpt_load_file={ckpt}")
    text = refused_flat(result)
    assert "model.ops[0]" in text and "explicit blocks [10, 20, 34] of dim 0 (size 64) " \
        "are not 4 positive sizes summing to 64" in text, text


def test_a_checkpoint_gather_with_the_ids_whole_is_refused(invoke_cli, tmp_path):
    """Blocks with placements that keep the ids whole (the Partial row split) are not
    what MindSpore runs for a manual_split Gather (ManualImpl::InferTensorMap): refused at
    the operator's placements."""
    ckpt = tmp_path / "a.json"
    doc = _save(invoke_cli, SHARED, ckpt)
    doc["ops"]["embedding"].update(ids=["B", "B"], out=["P", "P"])
    ckpt.write_text(json.dumps(doc))
    result = invoke_cli("run", SHARED, "--set", f"parallel.strategy_ckpt_load_file={ckpt}")
    text = refused_flat(result)
    assert ("model.ops[0].placements: op 'embedding' (Gather): a manual_split Gather takes "
            "the ids and gives its output split on the ids' last dim, S(1), on every mesh "
            "axis that splits the table's rows (MindSpore's ManualImpl::InferTensorMap, "
            "mindspore/ccsrc/frontend/parallel/ops_info/gather_info.cc); mesh axis 0 has "
            "embedding_table S(0), ids B, out P") in text, text
