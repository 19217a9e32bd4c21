"""parallel.dataset_strategy / parallel.full_batch (MindSpore's dataset_strategy and
full_batch): the layout each input is loaded in, the bytes each device loads and keeps, the
redistributions a load other than the operators' layout costs (priced and verified), and
refusals by name where the keys cannot apply."""

from __future__ import annotations

import json

import pytest
import yaml
from model_kinds import run_kind, stderr_of

from simulator.config.resources import resolve_yaml
from simulator.config.scenario import parse_scenario
from simulator.sharding.layout import Layout
from simulator.sharding.mesh import Mesh
from simulator.sharding.notation import dataset_layout
from simulator.sharding.placement import B, Shard
from simulator.sharding.rules import SignatureError
from simulator.simulation.verify import verify_scenario

TINY = "hw-split-tiny-verify"  # image [4, 3, 16, 16] on dp=2 x h=2 x w=2, labels [4]
IMAGE_BYTES = 4 * 3 * 16 * 16 * 4


def _bundled(name: str, overrides=()):
    path = resolve_yaml(name, "scenarios")
    return parse_scenario(yaml.safe_load(path.read_text()), str(path), list(overrides))


def _run(invoke_cli, *sets: str) -> dict:
    args = ["run", TINY, "--json"]
    for item in sets:
        args += ["--set", item]
    result = invoke_cli(*args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_dataset_layouts():
    mesh = Mesh.of(dp=2, h=2, w=2)
    shape = (4, 3, 16, 16)
    assert dataset_layout("full_batch", shape, mesh) == Layout((B, B, B))
    assert dataset_layout("data_parallel", (8, 3), mesh) == Layout((Shard(0),) * 3)
    # MindSpore numbers take the mesh axes outermost first after the repeat count
    assert dataset_layout((1, 1, 2, 2), shape, mesh) == Layout((B, Shard(2), Shard(3)))
    assert dataset_layout((2, 1, 2, 2), shape, mesh) == Layout((Shard(0), Shard(2), Shard(3)))
    assert dataset_layout(None, shape, mesh) is None
    assert dataset_layout("full_batch", shape, Mesh.of(a=1)) is None  # nothing to split
    with pytest.raises(SignatureError, match="data_parallel splits dim 0 over all 8 devices"):
        dataset_layout("data_parallel", shape, mesh)


def test_full_batch_loads_and_keeps_the_whole_batch_and_slices_for_free(invoke_cli):
    """Every device loads the whole image batch: the activation memory grows by the 7/8 of
    it the tile load leaves out; the operators take their tiles by a local slice, so no byte
    more is sent."""
    tiles = _run(invoke_cli, "parallel.dataset_strategy=[[2,1,2,2],[1]]")
    whole = _run(invoke_cli, "parallel.dataset_strategy=full_batch")
    acts = lambda d: d["memory"]["by_category_bytes"]["activations"]  # noqa: E731
    assert acts(whole) - acts(tiles) == IMAGE_BYTES - IMAGE_BYTES // 8
    assert whole["communication"] == tiles["communication"]
    assert whole["dataset"] == {"strategy": "full_batch",
                                "loaded_bytes_per_device": IMAGE_BYTES + 4 * 4}
    assert tiles["dataset"]["loaded_bytes_per_device"] == IMAGE_BYTES // 8 + 4 * 4
    older = _run(invoke_cli, "parallel.full_batch=true")  # MindSpore's older key, same
    assert {k: v for k, v in older.items() if k != "simulation"} == \
        {k: v for k, v in whole.items() if k != "simulation"}


def test_a_batch_split_load_is_moved_to_the_tiles_and_verifies(invoke_cli):
    """Loading the images split 4 ways on the batch (MindSpore ((4,1,1,1),(1,))) while the
    convolutions want 2 x 2 tiles: the planner moves them with all-to-alls, which `run`
    prices and `verify` executes, and the result still equals one device."""
    tiles = _run(invoke_cli)
    batch = _run(invoke_cli, "parallel.dataset_strategy=[[4,1,1,1],[1]]")
    assert "all_to_all" not in tiles["communication"]["by_collective"]
    assert batch["communication"]["by_collective"]["all_to_all"] > 0
    s = _bundled(TINY, ["parallel.dataset_strategy=[[4,1,1,1],[1]]"])
    result = verify_scenario(s)
    assert result.ok and result.collectives["all_to_all"] == 2  # image forward, both axes


def test_full_batch_verifies_with_no_collective_at_the_input():
    plain = verify_scenario(_bundled(TINY))
    whole = verify_scenario(_bundled(TINY, ["parallel.full_batch=true"]))
    assert whole.ok and whole.collectives == plain.collectives


def test_data_parallel_on_a_model_parallel_mlp_gathers_the_batch(invoke_cli):
    """MindSpore's default (full_batch=False) splits the batch over every device; the
    MLP's first layer wants it whole on the tensor-parallel axis, so it is all-gathered
    there: more bytes moved than loading it as the layer reads it."""
    plain = json.loads(run_kind(invoke_cli, "mlp").stdout)
    dp = json.loads(run_kind(invoke_cli, "mlp", "parallel.dataset_strategy=data_parallel").stdout)
    gathered = lambda d: d["communication"]["by_collective"].get("all_gather", 0)  # noqa: E731
    assert gathered(dp) > gathered(plain)
    assert dp["communication"]["bytes_per_device"] > plain["communication"]["bytes_per_device"]


@pytest.mark.parametrize("knob,key", [("parallel.dataset_strategy=full_batch",
                                       "parallel.dataset_strategy"),
                                      ("parallel.full_batch=false", "parallel.full_batch")])
def test_refused_on_a_transformer_by_name(invoke_cli, knob, key):
    result = run_kind(invoke_cli, "transformer", knob)
    assert result.exit_code == 2
    assert f"{key}: applies to operator graphs (mlp, resnet, graph)" in stderr_of(result)


@pytest.mark.parametrize("sets,message", [
    (["parallel.dataset_strategy=data_parallel", "parallel.full_batch=true"],
     "parallel.full_batch: true means dataset_strategy full_batch, but "
     "parallel.dataset_strategy is data_parallel (give one of the two)"),
    (["parallel.dataset_strategy=[[2,1,2,2]]"],
     "parallel.dataset_strategy: 1 tuples for the 2 inputs and labels (image, labels); "
     "expected one per input and label, in the model's order"),
    (["parallel.dataset_strategy=data_parallel"],
     "parallel.dataset_strategy: image [4, 3, 16, 16] on mesh (dp=2, h=2, w=2): "
     "data_parallel splits dim 0 over all 8 devices; the shape is [4, 3, 16, 16]"),
    (["parallel.dataset_strategy=[[1,1,3,1],[1]]"],
     "parallel.dataset_strategy[0]: image [4, 3, 16, 16] on mesh (dp=2, h=2, w=2): "),
])
def test_bad_dataset_strategies_are_refused_by_name(invoke_cli, sets, message):
    args = ["run", TINY]
    for item in sets:
        args += ["--set", item]
    result = invoke_cli(*args)
    assert result.exit_code == 2, result.output
    assert message in stderr_of(result)


RESNET = "model={type: resnet, conv_layers: 2, in_channels: 4, channels: 4, image_size: 8, " \
         "kernel_size: 3, fc_layers: 2, hidden_size: 32, num_classes: 8, dtype: fp32}"


def test_a_resnet_loaded_in_tiles_runs_its_conv_half_on_them():
    """tiny-cpu as a ResNet on (dp=2, tp=2): the images loaded with rows over dp and
    columns over tp ((1,1,2,2)) put every convolution on those tiles with its halo
    exchange (send_recv in both passes); the tiles move to the batch split before the FC
    half (all-to-alls); the whole step still equals one device's."""
    plain = verify_scenario(_bundled("tiny-cpu", [RESNET]))
    tiles = verify_scenario(_bundled("tiny-cpu", [RESNET,
                                                  "parallel.dataset_strategy=[[1,1,2,2],[1]]"]))
    assert plain.ok and "send_recv" not in plain.collectives
    assert tiles.ok, [c for c in tiles.checks if not c.ok]
    assert tiles.collectives["send_recv"] == 2 * 2 * 2 * 2  # micro-batches x convs x axes x passes
    assert tiles.collectives["all_to_all"] > 0
