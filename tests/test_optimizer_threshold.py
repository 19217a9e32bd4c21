"""`parallel.optimizer_threshold_kb` (MindSpore's parallel_optimizer_threshold): parameters
whose local size is at most the threshold keep whole optimizer states and are all-reduced,
in run's memory and in verify's execution alike."""

from __future__ import annotations

import pytest

from simulator.api import load_hardware, load_scenario
from simulator.errors import InputError
from simulator.models.optimizer_threshold import unsharded_roles
from simulator.simulation.simulate import simulate
from simulator.simulation.verify import verify_scenario

# tiny-cpu: fp32 Adam (8 bytes of states per parameter), data 2 x tensor 2
BASE = ["parallel.optimizer_shard=1"]


def _states(threshold_kb: float) -> float:
    loaded = load_scenario("tiny-cpu", BASE + [f"parallel.optimizer_threshold_kb={threshold_kb}"])
    result = simulate(loaded.scenario, load_hardware(loaded))
    return dict(result.plan.static_memory[0])["optimizer_states"]


def test_small_parameters_keep_whole_states():
    sharded, whole = _states(0), _states(1e6)  # every tensor is below 1 GB
    assert whole == pytest.approx(2 * sharded)  # sharded over data 2
    # 1 KB: only the norms and biases (64 fp32 elements = 256 B; halves under tensor 2)
    sc = load_scenario("tiny-cpu", BASE + ["parallel.optimizer_threshold_kb=1"]).scenario
    roles = unsharded_roles(sc)
    assert "ln1.g" in roles and "q.bias" in roles and "wq" not in roles and "wte" not in roles
    assert sharded < _states(1) < whole


def test_verify_reduces_the_unsharded_parameters_whole():
    def run(kb: float):
        return verify_scenario(load_scenario(
            "tiny-cpu", ["parallel.optimizer_shard=2", f"parallel.optimizer_threshold_kb={kb}"]
        ).scenario)

    sharded, whole = run(0), run(1e6)
    assert sharded.ok and whole.ok
    assert "reduce_scatter" in sharded.collectives
    # all kept whole: the data-parallel reductions are all-reduces again
    assert set(whole.collectives) == {"all_reduce"}


def test_the_threshold_needs_a_sharded_optimizer():
    with pytest.raises(InputError) as err:
        load_scenario("tiny-cpu", ["parallel.optimizer_threshold_kb=64"])
    assert err.value.key == "parallel.optimizer_threshold_kb"
    assert "applies to a sharded optimizer (parallel.optimizer_shard 1, 2 or 3; found 0)" \
        in err.value.message
