"""FSDP2's state layout (`sharding.state_layout: fsdp2`, lower.state): fp32 shards that are
the optimizer's master copy, the Adam moments, and each unit's sharded gradient made by its
reduce-scatter and freed by the step (zero_grad set_to_none); the allocator replay
(report.alloc_sequence) allocates the same states, so allocated and reserved agree."""

from pathlib import Path

import pytest

from simulator import load_scenario, simulate
from simulator.lower.state import model_state_bytes
from simulator.report.alloc_sequence import fsdp2_sequence

ROOT = Path(__file__).resolve().parent.parent
CASE = str(ROOT / "benchmarks" / "data" / "memory" / "tt-h100-llama31-8b.yaml")
P, N = 8_000_000, 8


def test_zero_layout_is_2_plus_4_plus_12_over_n():
    got = dict(model_state_bytes(P, "bf16", "adam", 3, N, grad_bytes=4.0))
    assert got == {"parameters": 2 * P / N, "gradients": 4 * P / N,
                   "optimizer_states": 12 * P / N}


def test_fsdp2_layout_is_4_plus_8_over_n_and_no_gradient_before_the_backward():
    got = dict(model_state_bytes(P, "bf16", "adam", 3, N, grad_bytes=4.0, layout="fsdp2"))
    assert got == {"parameters": 4 * P / N, "gradients": 0.0,
                   "optimizer_states": 8 * P / N}
    # an fp32 model: no separate master either way, the same 4 + 8
    fp32 = dict(model_state_bytes(P, "fp32", "adam", 3, N, layout="fsdp2"))
    assert fp32["parameters"] == 4 * P / N and fp32["optimizer_states"] == 8 * P / N


@pytest.mark.parametrize("shard,offload", [(2, False), (1, False), (3, True)])
def test_fsdp2_layout_only_where_parameters_are_sharded_on_the_device(shard, offload):
    zero = model_state_bytes(P, "bf16", "adam", shard, N, offload, 4.0)
    assert model_state_bytes(P, "bf16", "adam", shard, N, offload, 4.0,
                             layout="fsdp2") == zero


@pytest.fixture(scope="module")
def run():
    # torchtitan (state_layout fsdp2), 4 layers, FSDP over 8, two micro-batches
    sc = load_scenario(CASE, ["model.layers=4", "training.global_batch_size=32"])
    return simulate(sc)


def _params(result) -> float:
    return sum(b.params * b.repeat for b in result.program.blocks)


def test_the_static_states_are_fp32_shards_and_moments(run):
    static = dict(run.plan.static_memory[0])
    assert static["parameters"] == pytest.approx(4 * _params(run) / N, rel=1e-12)
    assert static["optimizer_states"] == pytest.approx(8 * _params(run) / N, rel=1e-12)
    assert static["gradients"] == 0


def test_each_units_first_reduce_scatter_makes_its_sharded_gradient_and_the_step_frees_all(
        run):
    dev = run.plan.devices[0]
    tasks = [t for t in run.plan.tasks if t.device == dev]
    reduces = [t for t in tasks if t.name == "grad_reduce"]
    made = [n for t in reduces for c, n in t.alloc if c == "gradients"]
    # one per unit (head, 4 layers, embedding) and micro-batch; a gradient per unit only
    assert len(reduces) == 2 * 6 and len(made) == 6
    for t in reduces:  # each unit's fp32 input whole, its shard 1 / N of it
        grads = dict(t.alloc).get("gradients")
        if grads:
            assert grads == pytest.approx(dict(t.alloc)["communication_buffers"] / N)
    assert sum(made) == pytest.approx(4 * _params(run) / N, rel=1e-12)
    (step,) = [t for t in tasks if t.name == "opt"]
    assert step.free == (("gradients", sum(made)),)


def test_the_peak_of_the_second_micro_batch_holds_the_first_ones_gradients(run):
    peak = dict(run.memory.by_category)
    assert peak["gradients"] == pytest.approx(4 * _params(run) / N, rel=1e-12)


def test_the_replay_allocates_the_same_states(run):
    static = dict(run.plan.static_memory[0])
    events = fsdp2_sequence(run.program, static, 1, 2, shard=1 / N)

    def total(prefix: str) -> float:
        return sum(n for kind, key, n, _ in events if kind == "alloc" and key.startswith(prefix))

    assert total("parameters:") == pytest.approx(static["parameters"], rel=1e-12)
    assert total("moments:") == pytest.approx(static["optimizer_states"], rel=1e-12)
    # the first micro-batch's reduce-scatter outputs become .grad; the second's are added
    # into them and freed (".acc")
    made = sum(n for kind, key, n, stream in events if kind == "alloc"
               and stream == "reduce_scatter" and not key.endswith(".acc"))
    assert made == pytest.approx(4 * _params(run) / N, rel=1e-12)
