"""The Python API: the example of docs/api.md runs as written, and the API returns what the CLI
prints; `shardsim schema` is pydantic's JSON Schema of the scenario."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

import simulator
from simulator.cli import app
from simulator.config.scenario.schema import Scenario
from simulator.report import summary

API_PAGE = Path(__file__).resolve().parents[1] / "docs" / "api.md"


def test_docs_api_example_runs(capsys):
    code = re.search(r"```python\n(.*?)```", API_PAGE.read_text(), re.S).group(1)
    exec(compile(code, "docs/api.md", "exec"), {})
    lines = capsys.readouterr().out.splitlines()
    assert re.fullmatch(r"[0-9.]+ ms per iteration, peak [0-9.]+ MB", lines[0])
    assert [ln.split()[:2] for ln in lines[1:]] == [["1", "ok"], ["2", "ok"], ["4", "ok"]]


def test_api_simulate_equals_run_json():
    sc = simulator.load_scenario("tiny-cpu", ["parallel.tensor=4", "parallel.data=1"])
    res = CliRunner().invoke(app, ["run", "tiny-cpu", "--json", "--set", "parallel.tensor=4",
                                   "--set", "parallel.data=1"])
    cli = json.loads(res.stdout)
    api = summary(simulator.simulate(sc))
    assert api["iteration_time_s"] == cli["iteration_time_s"]
    assert api["memory"] == cli["memory"]
    assert simulator.simulate("tiny-cpu").iteration_time_s == \
        simulator.simulate(simulator.load_scenario("tiny-cpu").scenario).iteration_time_s


def test_schema_command_prints_the_scenario_json_schema():
    res = CliRunner().invoke(app, ["schema"])
    assert res.exit_code == 0
    doc = json.loads(res.stdout)
    want = Scenario.model_json_schema(mode="validation")
    assert doc["$defs"] == want["$defs"]
    assert {k: v for k, v in doc["properties"].items() if k not in ("model", "from")} == {
        k: v for k, v in want["properties"].items() if k != "model"}
    # `from: {megatron_args | torchtitan_toml | deepspeed_config: FILE}` (config/imports/
    # key.py) stands for the model and the rest
    assert doc["properties"]["from"]["oneOf"] == [{"required": ["megatron_args"]},
                                                  {"required": ["torchtitan_toml"]},
                                                  {"required": ["deepspeed_config"]},
                                                  {"required": ["mindformers_yaml"]},
                                                  {"required": ["nemo_yaml"]},
                                                  {"required": ["bridge_config"]}]
    assert doc["anyOf"] == [{"required": ["model"]}, {"required": ["from"]}]
    model = dict(want["properties"]["model"])
    assert doc["properties"]["model"]["description"] == model.pop("description")
    assert doc["properties"]["model"]["anyOf"][0] == model
    assert doc["title"] == "shardsim scenario" and "model" in want["required"]
    hw = json.loads(CliRunner().invoke(app, ["schema", "--hardware"]).stdout)
    assert hw["title"] == "shardsim hardware profile"


def test_api_plan_returns_the_search_the_cli_prints():
    from simulator.planner.search import SearchOptions, SearchResult
    from simulator.planner.space import SpaceLimits

    opts = SearchOptions(top_k=3, limits=SpaceLimits(1, 1, 0))
    res = simulator.plan("tiny-cpu", options=opts)
    assert isinstance(res, SearchResult) and res.devices == 4
    cli = CliRunner().invoke(app, ["plan", "tiny-cpu", "--json", "--top", "3",
                                   "--max-micro-batch", "1", "--max-virtual-stages", "1",
                                   "--max-optimizer-shard", "0"])
    best = json.loads(cli.stdout)["best"]
    assert best["label"] == str(res.best.config)
    assert best["iteration_time_s"] == res.best.ev.iteration_time_s


def test_api_plan_refuses_what_the_cli_refuses():
    import pytest

    from simulator.errors import InputError

    with pytest.raises(InputError, match="cannot be combined with --devices"):
        simulator.plan("tiny-cpu", devices=4, nodes=1)


def test_api_takes_a_plain_dict_scenario():
    """A mapping of the YAML's keys is the same scenario as the file it was read from."""
    import yaml

    from simulator.api import load_scenario

    data = yaml.safe_load((Path(__file__).parents[1] / "scenarios" / "tiny-cpu.yaml").read_text())
    from_dict = simulator.simulate(data)
    assert from_dict.iteration_time_s == simulator.simulate("tiny-cpu").iteration_time_s
    assert load_scenario(data).scenario.source == "<dict>"
    with pytest.raises(simulator.api.InputError, match=r"^<dict>: model\.layers"):
        load_scenario({**data, "model": {**data["model"], "layers": 0}})


def test_every_bundled_scenario_validates_against_the_schema():
    """`from_hf` scenarios included (an editor flagged them); a misspelled key is caught."""
    import jsonschema
    import yaml

    from simulator.config.resources import bundled_dir

    doc = json.loads(CliRunner().invoke(app, ["schema"]).stdout)
    files = sorted(bundled_dir("scenarios").rglob("*.yaml"))
    hf = [f for f in files if "from_hf" in f.read_text()]
    assert hf, "a bundled from_hf scenario"
    cls = jsonschema.validators.validator_for(doc)
    cls.check_schema(doc)
    validator = cls(doc)  # one validator: jsonschema.validate re-checks the schema per call
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    for path in files:
        validator.validate(yaml.load(path.read_text(), Loader=loader))
    bad = yaml.safe_load(hf[0].read_text())
    bad["parallel"] = {**bad.get("parallel", {}), "tensr": 2}
    with pytest.raises(jsonschema.ValidationError):
        validator.validate(bad)
