"""`shardsim plan --emit megatron` (issue 27 item 4): the chosen plan as a Megatron-LM launch,
tested by importing what was emitted and getting the same scenario back; a plan key the
arguments cannot say is refused by name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from simulator import api
from simulator.cli import app
from simulator.config.imports.megatron_emit import resolved

ROOT = Path(__file__).parent.parent
R023 = str(ROOT / "scenarios/validation/r023-megatron-readme-table-gpt-1.7b-48g.yaml")
R005 = str(ROOT / "scenarios/validation/r005-narayanan2021-t1-gpt-39.1b-512g.yaml")


def _same(a: object, b: object) -> None:
    """The same sections, a transformer's head, positions and norm as resolved (a default
    left by architecture and the same value stated are the same)."""
    for section in ("model", "training", "parallel", "cluster"):
        assert resolved(getattr(a, section)) == resolved(getattr(b, section)), section


def _round_trip(tmp_path: Path, ref: str, overrides: list[str]) -> None:
    loaded = api.load_scenario(ref)
    text = api.emit_config("megatron", loaded, overrides)
    (tmp_path / "launch.sh").write_text(text)
    plan = api.load_scenario(ref, overrides)
    back = api.import_config("megatron", str(tmp_path / "launch.sh"), plan.scenario.hardware)
    got = api.load_scenario(back["scenario"])
    _same(plan.scenario, got.scenario)
    assert got.scenario.framework == (plan.scenario.framework or back["scenario"]["framework"])


@pytest.mark.parametrize(("ref", "overrides"), [
    (R023, []),
    (R023, ["parallel.tensor=2", "parallel.data=24", "parallel.sequence_parallel=true",
            "parallel.recompute=full", "training.micro_batch_size=2"]),
    (R005, []),  # fp16, interleaved, 2021's stack
    (R023, ["model.ffn_activation=relu2"]),  # --squared-relu
    ("llama2-70b-64-h100", ["parallel.data=4", "parallel.tensor=4", "parallel.pipeline=4",
                            "parallel.schedule=interleaved_1f1b", "parallel.virtual_stages=5",
                            "parallel.recompute=selective"]),
    ("moe-mixtral-8x7b-64-h100", []),
])
def test_emitted_arguments_import_back_to_the_plan(tmp_path: Path, ref: str,
                                                   overrides: list[str]) -> None:
    _round_trip(tmp_path, ref, overrides)


@pytest.mark.parametrize(("override", "key"), [
    ("parallel.offload.optimizer_states=true", "parallel.offload"),
    ("parallel.schedule=gpipe", "parallel.schedule"),
    ("parallel.optimizer_shard=3", "parallel.optimizer_shard"),
])
def test_a_key_megatron_cannot_say_is_refused(override: str, key: str) -> None:
    loaded = api.load_scenario(R023)
    with pytest.raises(api.InputError) as err:
        api.emit_config("megatron", loaded, [override])
    assert err.value.key == key and "no Megatron-LM argument says it" in err.value.message


def test_plan_emit_megatron(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["plan", R023, "--devices", "8", "--top", "1", "--emit",
                                   "megatron", "--json"])
    assert res.exit_code == 0, res.stderr
    report = json.loads(res.stdout)
    (tmp_path / "launch.sh").write_text(report["emit"]["text"])
    back = api.import_config("megatron", str(tmp_path / "launch.sh"), "h100-sxm")
    sets = [*report["best"]["overrides"], "cluster.nodes=1", "cluster.devices_per_node=8"]
    _same(api.load_scenario(R023, sets).scenario,
          api.load_scenario(back["scenario"]).scenario)
