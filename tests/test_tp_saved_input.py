"""torch's tensor parallelism keeps the output layer's all-gathered input (framework
`sharding.tp_saved_input: gathered`, torchtitan): ColwiseParallel redistributes the
sequence-parallel shard to Replicate() before F.linear, whose autograd saves it, where
Megatron-Core keeps the shard and gathers it again in the backward."""

from pathlib import Path

import pytest

from simulator.api import load_scenario
from simulator.config.framework.load import load_framework
from simulator.program.model_program import transformer_program

ROOT = Path(__file__).resolve().parent.parent
CASE = str(ROOT / "benchmarks" / "data" / "memory" / "h200-eager-llama3-8b-8l.yaml")
TOKENS, HIDDEN = 8192, 4096


def _head(tp: int, sp: bool, layout: str):
    sets = [f"cluster.devices_per_node={tp}", f"parallel.tensor={tp}",
            f"parallel.sequence_parallel={str(sp).lower()}"]
    sc = load_scenario(CASE, sets).scenario
    sw = load_framework("torchtitan").software.model_copy(update={"tp_saved_input": layout})
    return transformer_program(sc, sw).block("head")


@pytest.mark.parametrize("tp", [2, 4])
def test_the_output_layer_keeps_the_whole_sequence_of_its_input(tp):
    gathered, shard = _head(tp, True, "gathered"), _head(tp, True, "shard")
    # the bf16 input of every token (m x k of the GEMM) instead of 1 / tp of it
    assert gathered.saved_bytes - shard.saved_bytes == TOKENS * HIDDEN * 2 * (1 - 1 / tp)
    lm = [op for op in gathered.fwd if op.name == "lm_head"]
    lm_shard = [op for op in shard.fwd if op.name == "lm_head"]
    assert lm[0].saved_bytes - lm_shard[0].saved_bytes == TOKENS * HIDDEN * 2 * (1 - 1 / tp)


def test_nothing_changes_without_sequence_parallel_or_tensor_parallel():
    assert _head(2, False, "gathered").saved_bytes == _head(2, False, "shard").saved_bytes
    assert _head(1, True, "gathered").saved_bytes == _head(1, True, "shard").saved_bytes
