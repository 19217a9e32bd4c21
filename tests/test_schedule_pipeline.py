"""Pipeline schedule orders, gradient buckets, model-state bytes (ZeRO)."""

from __future__ import annotations

import pytest

from simulator.errors import InputError
from simulator.lower.buckets import grad_buckets
from simulator.lower.pipeline import SCHEDULES, schedule_steps
from simulator.lower.state import model_state_bytes


def test_1f1b_warms_up_with_p_minus_i_minus_1_forwards():
    steps = schedule_steps("1f1b", 0, 4, 6, 1)
    assert steps[:4] == [("F", 0, 0), ("F", 1, 0), ("F", 2, 0), ("F", 3, 0)]
    assert steps[4] == ("B", 0, 0)
    assert schedule_steps("1f1b", 3, 4, 3, 1) == [("F", 0, 3), ("B", 0, 3), ("F", 1, 3),
                                                   ("B", 1, 3), ("F", 2, 3), ("B", 2, 3)]


def test_gpipe_runs_all_forwards_then_all_backwards():
    assert schedule_steps("gpipe", 1, 2, 2, 1) == [("F", 0, 1), ("F", 1, 1), ("B", 0, 1),
                                                    ("B", 1, 1)]


@pytest.mark.parametrize("name,chunks", [("gpipe", 1), ("1f1b", 1), ("interleaved_1f1b", 2),
                                         ("interleaved_1f1b", 3)])
@pytest.mark.parametrize("stage", [0, 1, 3])
def test_every_schedule_runs_each_pass_once_forward_first(name: str, chunks: int, stage: int):
    p, m = 4, 8
    steps = schedule_steps(name, stage, p, m, chunks)
    expected = {(k, j, c * p + stage) for k in "FB" for j in range(m) for c in range(chunks)}
    assert sorted(steps) == sorted(expected)
    for _, j, vs in steps:
        assert steps.index(("F", j, vs)) < steps.index(("B", j, vs))


def test_unknown_schedule_lists_the_known_ones():
    with pytest.raises(InputError, match="known: " + ", ".join(SCHEDULES)):
        schedule_steps("zero_bubble", 0, 2, 2, 1)


def test_interleaving_needs_micro_batches_multiple_of_stages():
    with pytest.raises(InputError, match="multiple of parallel.pipeline"):
        schedule_steps("interleaved_1f1b", 0, 4, 6, 2)


def test_size_buckets_cover_every_gradient_in_order():
    buckets = grad_buckets((3, 10, 10, 2), 2.0, "size", 8e-6)  # 8-byte buckets
    assert sum(b for _, b in buckets) == pytest.approx(50.0)
    assert [i for i, _ in buckets] == [1, 1, 1, 2, 2, 3, 3]
    assert all(b == 8.0 for _, b in buckets[:-1])


def test_index_and_none_fusion_modes():
    assert grad_buckets((3, 4), 1.0, "index", 25) == ((0, 3.0), (1, 4.0))
    assert grad_buckets((4,), 1.0, "none", 25, tensors=4) == ((0, 1.0),) * 4


@pytest.mark.parametrize("shard,expected", [(0, 16.0), (1, 4 + 12 / 8), (2, 2 + 14 / 8),
                                            (3, 16 / 8)])
def test_zero_model_states_per_parameter(shard: int, expected: float):
    """Rajbhandari et al. 2020, Fig. 1: 16, 4 + 12/N, 2 + 14/N, 16/N bytes per parameter."""
    psi = 1000
    states = dict(model_state_bytes(psi, "bf16", "adam", shard, 8))
    assert sum(states.values()) == pytest.approx(expected * psi)


def test_offloaded_optimizer_states_leave_the_device():
    states = dict(model_state_bytes(1000, "bf16", "adam", 0, 8, offload_states=True))
    assert states["optimizer_states"] == 0.0
