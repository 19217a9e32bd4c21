"""The stack's own passes over the gradient buffer each iteration (framework profile
`grad_reduction.buffer_passes` / `.buffer_passes_dp`, lower.step): Megatron-Core zeroes its
fp32 buffer every step, and before each bucket's collective takes its NaN-check norm and,
with more than one data-parallel rank, scales it by 1/dp: 2 + 2 element passes."""

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


def _passes_s(result: Any, passes: int) -> float:
    params = sum(b.params * b.repeat for b in result.program.blocks)
    # the fp32 buffer of a bf16 model (grad_reduction.fp32_for_bf16)
    spec = ComputeSpec("x", "elementwise", 0.0, passes * params * 4.0, "bf16", "optimizer")
    return compute_time_s(spec, load_profile("h100-sxm"))


def _profile(write_file, **grad_reduction: Any) -> str:
    data = yaml.safe_load((bundled_dir("framework_profiles") / "megatron-core.yaml").read_text())
    data["grad_reduction"].update(grad_reduction)
    return str(write_file("mine.yaml", data))


@pytest.mark.parametrize("data,passes", [(4, 4), (1, 2)])
def test_megatron_core_makes_its_passes_on_the_compute_stream_before_the_step(data, passes):
    result = simulate(_scenario(data))
    (task,) = _tasks(result, "grad_buffer")
    assert task.stream == "compute" and task.phase == "optimizer"
    # zero_ and the NaN-check norm always, the 1/dp pre-scale only with dp > 1
    assert task.duration_s == pytest.approx(_passes_s(result, passes), rel=1e-12)
    (step,) = _tasks(result, "opt")
    assert task.tid in step.deps


def test_without_the_figures_there_is_no_pass_and_the_step_is_sooner(write_file):
    base = simulate(_scenario(4))
    none = simulate(_scenario(4, _profile(write_file, buffer_passes=0, buffer_passes_dp=0)))
    assert _tasks(none, "grad_buffer") == []
    assert none.iteration_time_s < base.iteration_time_s


def test_a_stack_without_them_prices_none():
    assert _tasks(simulate(_scenario(4, "megatron-lm-2021")), "grad_buffer") == []


def test_a_negative_figure_names_its_key(write_file):
    path = _profile(write_file, buffer_passes=-1)
    with pytest.raises(InputError) as info:
        load_framework(path)
    assert str(info.value) == (f"{path}: grad_reduction.buffer_passes: found -1; expected a "
                               "value from 0 to 10000 (a range a real system could have)")
