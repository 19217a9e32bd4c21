"""`shardsim import torchtitan` and `plan --emit torchtitan` (issue 27): what the keys of a
torchtitan job config become, torchtitan's defaults, its pipeline split, and bad input as one
error naming the file, line and key (exit 2), with a fuzz over the keys that never ends in an
internal error; the emitted job config imports back to the planned scenario."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from typer.testing import CliRunner

from simulator import api
from simulator.cli import app
from simulator.config.imports.megatron_emit import resolved
from simulator.config.imports.torchtitan_keys import KEYS
from simulator.config.imports.torchtitan_model import FLAVORS, ffn_width
from simulator.config.imports.torchtitan_names import KEY_NAMES
from simulator.config.imports.torchtitan_pipeline import stage_layers

ROOT = Path(__file__).parent.parent
BASE = ('[model]\nname = "llama3"\nflavor = "8B"\n\n[training]\nlocal_batch_size = 2\n'
        'seq_len = 4096\n\n[activation_checkpoint]\nmode = "none"\n')
TT8B = str(ROOT / "scenarios/validation/tt-a100-l3-8b-fsdp-sacop-64g.yaml")


def _run(tmp_path: Path, text: str, *extra: str, world: tuple[int, int] = (1, 8)
         ) -> tuple[int, str, str]:
    src = tmp_path / "job.toml"
    src.write_text(text)
    res = CliRunner().invoke(app, ["import", "torchtitan", str(src), "--nodes", str(world[0]),
                                   "--devices-per-node", str(world[1]), *extra])
    return res.exit_code, res.stdout, res.stderr


def _scenario(tmp_path: Path, text: str, *extra: str, world: tuple[int, int] = (1, 8)) -> dict:
    code, out, err = _run(tmp_path, text, "--json", *extra, world=world)
    assert code == 0, err
    return json.loads(out)["scenario"]


def _error(tmp_path: Path, text: str, *extra: str) -> str:
    code, _, err = _run(tmp_path, text, *extra)
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    return err[len("error: "):-1]


def test_every_key_of_the_table_is_a_torchtitan_key() -> None:
    assert set(KEYS) <= KEY_NAMES and len(KEY_NAMES) == 187


def test_flavour_shapes_are_torchtitans() -> None:
    # FeedForward: int(2 * 4 * dim / 3) x ffn_dim_multiplier, rounded up to multiple_of
    assert ffn_width(FLAVORS["llama3"]["8B"]) == 14336
    assert ffn_width(FLAVORS["llama3"]["70B"]) == 28672
    assert ffn_width(FLAVORS["llama3"]["405B"]) == 53248
    assert ffn_width(FLAVORS["llama2"]["13B"]) == 13824


def test_torchtitan_defaults_where_a_key_is_absent(tmp_path: Path) -> None:
    s = _scenario(tmp_path, BASE, world=(2, 8))
    assert s["parallel"]["data"] == 16 and s["parallel"]["optimizer_shard"] == 3  # shard -1
    assert s["training"] == {"global_batch_size": 32, "micro_batch_size": 2,
                             "optimizer": "adam"}
    m = s["model"]
    assert (m["dtype"], m["dropout"], m["norm"], m["tie_embeddings"]) == ("bf16", 0.0,
                                                                           "rmsnorm", False)
    assert (m["num_kv_heads"], m["rope_theta"], m["vocab_size"]) == (8, 500000.0, 128256)
    assert s["parallel"]["recompute"] == "none" and "overlap" not in s["parallel"]


def test_keys_map_to_their_scenario_keys(tmp_path: Path) -> None:
    text = BASE.replace('mode = "none"', 'mode = "selective"\nselective_ac_option = "op"') + (
        "\n[parallelism]\ndata_parallel_replicate_degree = 2\ndata_parallel_shard_degree = 1\n"
        "tensor_parallel_degree = 2\nenable_async_tensor_parallel = true\n"
        "pipeline_parallel_degree = 2\npipeline_parallel_schedule = \"Interleaved1F1B\"\n"
        "\n[model]\n") .replace("\n[model]\n", "", 1)
    s = _scenario(tmp_path, text.replace("[training]", 'converters = ["float8"]\n\n[training]'))
    p = s["parallel"]
    assert (p["data"], p["tensor"], p["pipeline"], p["optimizer_shard"]) == (2, 2, 2, 0)
    assert p["sequence_parallel"] is True and p["overlap"] == {"tp_comm": True}
    assert p["schedule"] == "interleaved_1f1b" and p["virtual_stages"] == 2
    # 32 layers + embedding + output counted as a layer each over 4 stages: 34 = 9+9+8+8,
    # less the embedding on the first and the output on the last
    assert p["pipeline_layers"] == [8, 9, 8, 7] and p["recompute"] == "selective"
    assert s["model"]["dtype"] == "fp8" and s["training"]["micro_batch_size"] == 1


def test_pipeline_split_closed_form() -> None:
    assert stage_layers(2, 32, 1, 1) == [16, 16]
    assert stage_layers(4, 32, 0, 0) == [8, 8, 8, 8]
    assert stage_layers(3, 10, 1, 1) == [3, 4, 3]
    for stages, layers in ((2, 7), (8, 126), (5, 80)):
        assert sum(stage_layers(stages, layers, 1, 1)) == layers


@pytest.mark.parametrize(("edit", "message"), [
    (("local_batch_size", "local_batch_sise"), "job.toml:6: training.local_batch_sise: not a "
     "key of torchtitan's job config (did you mean 'training.local_batch_size'?) "
     "(torchtitan/config/job_config.py)"),
    (("[training]", "[trainng]"), "job.toml:6: trainng.local_batch_size: [trainng] is not a "
     "section of torchtitan's job config (did you mean 'training'?) "
     "(torchtitan/config/job_config.py JobConfig)"),
    (('flavor = "8B"', 'flavor = "8b"'), "job.toml:3: model.flavor: found '8b'; llama3's "
     "flavours: 8B, 70B, 405B (did you mean '8B'?)"),
    (('name = "llama3"', 'name = "deepseek_v3"'), "job.toml:2: model.name: found "
     "'deepseek_v3'; the flavours read here: llama2, llama3 (another model: write its "
     "scenario's model section, or model.from_hf)"),
    (("seq_len = 4096", "seq_len = 0"), "job.toml:7: training.seq_len: found 0; expected a "
     "whole number from 1 to 10,000,000"),
    (('mode = "none"', 'mode = "selective"'), "job.toml:10: activation_checkpoint."
     "mode: one layer in every 2 recomputed whole (selective_ac_option '2', torchtitan's "
     "default): "
     "recompute of part of the layers is not simulated (allowed: 'op', or 1: every layer); "
     "--lenient imports it as full"),
    (('mode = "none"', 'mode = "none"\n\n[compile]\nenable = true'), "job.toml:13: "
     "compile.enable: True changes what torchtitan runs and has no scenario key "
     "(torch.compile's fusion is not modelled: the torchtitan profile prices the eager "
     "kernels); --lenient imports without it"),
    (('mode = "none"', 'mode = "none"\n\n[parallelism]\ntensor_parallel_degree = 3'),
     "job.toml:13: parallelism.tensor_parallel_degree: the data shard degree -1 (the rest): "
     "the world size 8 is not divisible by replicate x TP x PP x CP = 3"),
    (('mode = "none"', 'mode = "none"\n\n[parallelism]\ndata_parallel_shard_degree = 4'),
     "job.toml:13: parallelism.data_parallel_shard_degree: replicate 1 x shard 4 x TP 1 x PP 1 "
     "x CP 1 = 4, not the world size 8 (torchtitan ParallelDims refuses it)"),
    (('mode = "none"', 'mode = "none"\n\n[training]\nglobal_batch_size = 20'), "job.toml:13: "
     "training.global_batch_size: 20 is not a multiple of the local batch 2 x data-parallel "
     "degree 8 (torchtitan train.py refuses it)"),
    (("[training]", "[training]\nenable_cpu_offload = true"), "job.toml:6: training."
     "enable_cpu_offload: changes what torchtitan runs and has no scenario key (FSDP's CPU "
     "offload of parameters, gradients and optimizer states has no scenario key); --lenient "
     "imports without it"),
])
def test_bad_input_is_one_error_naming_the_line_and_key(tmp_path: Path, edit: tuple[str, str],
                                                         message: str) -> None:
    text = BASE.replace(*edit)
    if "global_batch_size = 20" in text:  # a second [training] table: merge it into the first
        text = BASE.replace("seq_len = 4096", "seq_len = 4096\nglobal_batch_size = 20")
    assert _error(tmp_path, text).endswith(message.replace("job.toml:13: training.global",
                                                           "job.toml:8: training.global"))


def test_not_toml_and_no_world_size(tmp_path: Path) -> None:
    assert _error(tmp_path, "[model\n").endswith("job.toml: not a TOML file (Expected ']' at "
                                                  "the end of a table declaration (at line 1, "
                                                  "column 7))")
    (tmp_path / "job.toml").write_text(BASE)
    with pytest.raises(api.InputError, match="the world size is not in a torchtitan job "
                       "config .*; give --nodes and --devices-per-node"):
        api.import_config("torchtitan", str(tmp_path / "job.toml"))


def test_lenient_notes_what_it_left_out(tmp_path: Path) -> None:
    text = BASE.replace('mode = "none"', 'mode = "none"\n\n[compile]\nenable = true')
    code, out, err = _run(tmp_path, text, "--lenient")
    assert code == 0 and "compile.enable = True (line 13) left out: torch.compile" in err
    assert "# note: compile.enable = True (line 13) left out" in out


_FUZZ = (0, 1, 2, 3, 8, -1, 1.5, "x", "op", "full", "selective", "none", "1F1B",
         "Interleaved1F1B", "GPipe", "float32", "bfloat16", True, False, ["float8"], [])


def _toml_value(value: object) -> str:
    return json.dumps(value) if not isinstance(value, bool) else str(value).lower()


def test_fuzz_never_ends_in_an_internal_error(tmp_path: Path) -> None:
    """Random subsets of the table's keys with random values: exit 0 or 2, never 3."""
    rng = random.Random(27)
    keys = sorted(KEYS)
    codes = []
    for i in range(120):
        sections: dict[str, list[str]] = {"model": ['name = "llama3"', 'flavor = "8B"']}
        for key in rng.sample(keys, rng.randint(1, 10)):
            section, name = key.rsplit(".", 1)
            sections.setdefault(section, []).append(f"{name} = "
                                                    f"{_toml_value(rng.choice(_FUZZ))}")
        text = "\n".join(f"[{s}]\n" + "\n".join(dict.fromkeys(v)) for s, v in sections.items())
        code, _, err = _run(tmp_path, text, *(["--lenient"] if i % 2 else []),
                            world=(rng.randint(1, 4), 8))
        assert code in (0, 2), (text, err)
        assert code == 0 or (err.startswith("error: ") and err.count("\n") == 1), err
        codes.append(code)
    assert 0 in codes and 2 in codes


def test_scenario_key_from_torchtitan_toml(tmp_path: Path) -> None:
    """`from: {torchtitan_toml: FILE}` is the import, the keys written beside it winning;
    the world size is the scenario's cluster."""
    (tmp_path / "job.toml").write_text(BASE)
    (tmp_path / "s.yaml").write_text(
        "name: from toml\nhardware: a100-80gb\ncluster: {nodes: 1, devices_per_node: 8}\n"
        "from: {torchtitan_toml: job.toml}\nparallel: {recompute: full}\n")
    s = api.load_scenario(str(tmp_path / "s.yaml")).scenario
    imported = api.import_config("torchtitan", str(tmp_path / "job.toml"), "a100-80gb", 1, 8)
    want = api.load_scenario(imported["scenario"], ["parallel.recompute=full"]).scenario
    assert s.parallel == want.parallel and s.model == want.model
    assert s.framework == "torchtitan" and s.parallel.recompute == "full"
    (tmp_path / "s.yaml").write_text("name: x\nhardware: a100-80gb\nfrom: {torchtitan_toml: "
                                     "job.toml}\n")
    with pytest.raises(api.InputError, match="the world size is not in a torchtitan job"):
        api.load_scenario(str(tmp_path / "s.yaml"))
    (tmp_path / "s.yaml").write_text("name: x\nfrom: {torchtitan_toml: job.toml, "
                                     "megatron_args: a.sh}\n")
    with pytest.raises(api.InputError, match="expected a mapping with one of megatron_args, "
                       "torchtitan_toml"):
        api.load_scenario(str(tmp_path / "s.yaml"))


@pytest.mark.parametrize("overrides", [
    [], ["parallel.recompute=full", "training.global_batch_size=128"],
    ["parallel.tensor=8", "parallel.data=8", "parallel.sequence_parallel=true",
     "parallel.overlap.tp_comm=true", "parallel.recompute=none"],
    ["parallel.optimizer_shard=0", "model.dtype=fp32"],
])
def test_emitted_job_config_imports_back_to_the_plan(tmp_path: Path,
                                                     overrides: list[str]) -> None:
    loaded = api.load_scenario(TT8B)
    text = api.emit_config("torchtitan", loaded, overrides)
    (tmp_path / "job.toml").write_text(text)
    plan = api.load_scenario(TT8B, overrides)
    c = plan.scenario.cluster
    back = api.import_config("torchtitan", str(tmp_path / "job.toml"), plan.scenario.hardware,
                             c.nodes, c.devices_per_node)
    got = api.load_scenario(back["scenario"]).scenario
    for section in ("model", "training", "parallel", "cluster"):
        assert resolved(getattr(plan.scenario, section)) == resolved(getattr(got, section))


@pytest.mark.parametrize(("overrides", "key"), [
    (["parallel.optimizer_shard=1"], "parallel.optimizer_shard"),
    (["model.layers=30"], "model"),
    (["model.dropout=0.1"], "model.dropout"),
])
def test_emit_refuses_what_torchtitan_cannot_say(overrides: list[str], key: str) -> None:
    loaded = api.load_scenario(TT8B)
    with pytest.raises(api.InputError) as err:
        api.emit_config("torchtitan", loaded, overrides)
    assert err.value.key == key
