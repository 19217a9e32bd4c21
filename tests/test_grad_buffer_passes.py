"""The stack's own passes over the gradient buffer each iteration (framework profile
`grad_reduction.buffer_passes` / `.buffer_passes_dp`, lower.step.grad_buffer_s): Megatron-Core
zeroes its fp32 buffer every step, and before each bucket's collective takes its NaN-check
norm and, with more than one data-parallel rank, scales it by 1/dp: 2 + 2 element passes,
priced in the last micro-batch's backward pieces (the fp32 buffer of a bf16 model: 4 bytes
an element)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from simulator import simulate
from simulator.config.framework import load_framework
from simulator.config.hardware.load import load_profile
from simulator.config.resources import bundled_dir
from simulator.config.scenario import parse_scenario
from simulator.cost import compute_time_s
from simulator.cost.specs import ComputeSpec
from simulator.errors import InputError


def _scenario(data: int = 4, framework: str = "megatron-core"):
    return parse_scenario({
        "name": "gb", "hardware": "h100-sxm", "framework": framework,
        "cluster": {"nodes": 1, "devices_per_node": max(data, 1)},
        "model": {"type": "transformer", "layers": 2, "hidden_size": 1024, "num_heads": 16,
                  "seq_length": 1024, "vocab_size": 8192, "dtype": "bf16"},
        "training": {"global_batch_size": 2 * data, "micro_batch_size": 1},
        "parallel": {"data": data, "optimizer_shard": 1}}, "gb.yaml")


def _tasks(result: Any, name: str) -> list:
    dev = result.plan.devices[0]
    return [t for t in result.plan.tasks if t.device == dev and t.name == name]


def _profile(write_file, **grad_reduction: Any) -> str:
    data = yaml.safe_load((bundled_dir("framework_profiles") / "megatron-core.yaml").read_text())
    data["grad_reduction"].update(grad_reduction)
    return str(write_file("mine.yaml", data))


def _last_backward(result: Any) -> list:
    last = max(t.micro for t in _tasks(result, "B"))
    return sorted((t for t in _tasks(result, "B") if t.micro == last), key=lambda t: t.tid)


@pytest.mark.parametrize("data,passes", [(4, 4), (1, 2)])
def test_each_piece_of_the_last_backward_makes_its_share_of_the_passes(data, passes,
                                                                       write_file):
    base = simulate(_scenario(data))
    none = simulate(_scenario(data, _profile(write_file, buffer_passes=0, buffer_passes_dp=0)))
    with_, without = _last_backward(base), _last_backward(none)
    assert len(with_) == len(without)
    hw = load_profile("h100-sxm")
    # zero_ and the NaN-check norm always, the 1/dp pre-scale only with dp > 1; a piece's
    # share as its parameters (the work's piece_params), one kernel each
    blocks = {b.name: b for b in base.program.blocks}  # backward: head, layers, embedding
    params = [blocks["head"].params] + [blocks["layer"].params] * blocks["layer"].repeat \
        + [blocks["embed"].params]
    params = params if len(with_) > 1 else [sum(params)]
    for a, b, n in zip(with_, without, params, strict=True):
        spec = ComputeSpec("x", "elementwise", 0.0, passes * n * 4.0, "bf16", "bwd")
        want = compute_time_s(spec, hw) if n > 0 else 0.0
        assert a.duration_s - b.duration_s == pytest.approx(want, rel=1e-9)
    # the other micro-batches make none
    first = [t for t in _tasks(base, "B") if t.micro == 0]
    assert [t.duration_s for t in first] == [
        t.duration_s for t in _tasks(none, "B") if t.micro == 0]
    assert none.iteration_time_s < base.iteration_time_s


def test_a_stack_without_them_prices_none(write_file):
    # megatron-lm-2021 states none: its runs equal megatron-core's with none
    a = simulate(_scenario(4, "megatron-lm-2021"))
    assert a.program.grad_buffer_passes == (0.0, 0.0)


def test_a_negative_figure_names_its_key(write_file):
    path = _profile(write_file, buffer_passes=-1)
    with pytest.raises(InputError) as info:
        load_framework(path)
    assert str(info.value) == (f"{path}: grad_reduction.buffer_passes: found -1; expected a "
                               "value from 0 to 10000 (a range a real system could have)")
