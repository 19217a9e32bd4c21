"""`parallel.recompute_slice_activation` (MindSpore's recompute_slice_activation; Megatron-LM
--distribute-saved-activations, tensor_parallel/random.py CheckpointFunction): under a full
recompute each layer keeps 1/tensor of its input and all-gathers it over the tensor ranks
before re-running (closed forms below, b s h bytes of a bf16 GPT layer input)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from simulator.api import load_hardware, load_scenario
from simulator.cli import app
from simulator.config.framework.load import framework_for
from simulator.cost.specs import CommSpec
from simulator.errors import InputError
from simulator.simulation.simulate import run_program

B, S, H, T = 2, 128, 256, 4
GPT = {
    "name": "gpt-tiny", "hardware": "a100-80gb", "cluster": {"nodes": 1, "devices_per_node": T},
    "model": {"type": "transformer", "layers": 2, "hidden_size": H, "num_heads": 4,
              "seq_length": S, "vocab_size": 512, "dtype": "bf16"},
    "training": {"global_batch_size": B, "micro_batch_size": B},
    "parallel": {"tensor": T, "recompute": "full"},
}
SLICE = "parallel.recompute_slice_activation=true"


def _layer(*sets: str):
    loaded = load_scenario(GPT, list(sets))
    sc, hw = loaded.scenario, load_hardware(loaded)
    return run_program(sc, hw, framework_for(sc, hw)).program.block("layer")


def test_the_kept_input_is_split_over_the_tensor_ranks_and_gathered_back():
    whole, sliced = _layer(), _layer(SLICE)
    layer_input = 2 * B * S * H  # bf16, replicated over tp without sequence parallel
    assert whole.saved_bytes == layer_input
    assert sliced.saved_bytes == layer_input / T
    first = sliced.recompute[0]
    assert isinstance(first, CommSpec)
    assert (first.collective, first.bytes, first.axis, first.phase) == (
        "all_gather", layer_input, "tp", "recompute")
    assert sliced.recompute[1:] == whole.recompute


@pytest.mark.parametrize("sets, message", [
    (("parallel.recompute=selective",), "true slices the input a layer keeps under "
     "parallel.recompute full (found selective; allowed: false)"),
    (("parallel.tensor=1", "cluster.devices_per_node=1"), "true splits the kept input over "
     "parallel.tensor ranks, which is 1 here (allowed: false)"),
    (("parallel.sequence_parallel=true",), "true with parallel.sequence_parallel: the kept "
     "input is already split over the tensor ranks (allowed: false, as Megatron-Core "
     "requires)"),
])
def test_it_needs_full_recompute_tensor_parallel_and_no_sequence_parallel(sets, message):
    with pytest.raises(InputError) as err:
        load_scenario(GPT, [SLICE, *sets])
    assert err.value.key == "parallel.recompute_slice_activation"
    assert err.value.message == message


def test_megatron_s_distribute_saved_activations_imports_to_the_key(tmp_path):
    src = tmp_path / "args.txt"
    src.write_text("--num-layers 4 --hidden-size 256 --num-attention-heads 8 --seq-length 512 "
                   "--max-position-embeddings 512 --vocab-size 1000 --micro-batch-size 1 "
                   "--global-batch-size 16 --bf16 --tensor-model-parallel-size 2 "
                   "--recompute-granularity full --recompute-method uniform "
                   "--recompute-num-layers 1 "
                   "--distribute-saved-activations")
    res = CliRunner().invoke(app, ["import", "megatron", str(src), "--json", "--nodes", "1",
                                   "--devices-per-node", "2"])
    assert res.exit_code == 0, res.stderr
    p = json.loads(res.stdout)["scenario"]["parallel"]
    assert p["recompute"] == "full" and p["recompute_slice_activation"] is True
