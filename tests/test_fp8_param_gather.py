"""The distributed optimizer's parameter all-gather with FP8 weights (issue 24,
`lower.framework_apply.fp8_gather_bytes`): with `training.fp8_params` under a per-tensor
recipe an FP8 GEMM's weight travels as its 1-byte FP8 data (Megatron-Core core_v0.15.0
distributed_data_parallel.py: a Float8Tensor's param buffer is torch.uint8), the other
parameters at the model dtype; under MXFP8 the gather runs in bf16 (a bf16 view of the
gradient buffer, reuse_grad_buf_for_mxfp8_param_ag) and each rank casts afterwards."""

from __future__ import annotations

from typing import Any

import pytest

from simulator.config.framework.load import framework_for
from simulator.config.hardware import load_profile
from simulator.config.scenario import parse_scenario
from simulator.planner.memory import gather_bytes, layer_params, workload_of
from simulator.planner.space import config_of
from simulator.simulation.simulate import run_program, simulate
from tests.test_fp8_layouts import fp8_doc


def _scenario(fp8_params: bool, overlap: bool = False, hardware: str = "h100-sxm",
              scaling: str = "tensor", pipeline: int = 1) -> Any:
    doc = fp8_doc(hardware, scaling)
    doc["training"]["fp8_params"] = fp8_params
    doc["parallel"] = {"data": 8 // pipeline, "pipeline": pipeline, "optimizer_shard": 1,
                       "overlap": {"param_gather": overlap}}
    return parse_scenario(doc, "fp8.yaml")


def _gathered(sc: Any) -> tuple[int, float, float]:
    """(tasks, bytes, seconds) of the parameter all-gathers of the simulated iteration."""
    tasks = [t for t in simulate(sc, load_profile(sc.hardware)).plan.tasks
             if t.name == "param_gather"]
    return (len(tasks), sum(n for t in tasks for _, n in t.comm),
            sum(t.duration_s for t in tasks))


@pytest.mark.parametrize("overlap", [False, True])
def test_fp8_weights_are_gathered_in_one_byte(overlap):
    # the two layers' QKV, projection and FFN weights (and their biases and norms, which
    # this model counts with its layers: framework_apply._fp8_share) travel in 1 byte
    # instead of 2; the embedding, positions and final norm stay bf16
    bf16 = _gathered(_scenario(False, overlap))
    fp8 = _gathered(_scenario(True, overlap))
    layers = 2 * layer_params(_scenario(True).model, 1)
    assert fp8[0] == bf16[0] >= 1
    assert fp8[1] == pytest.approx(bf16[1] - layers, rel=1e-12)
    assert fp8[2] < bf16[2]


def test_mxfp8_weights_are_gathered_in_bf16():
    # reuse_grad_buf_for_mxfp8_param_ag: the gather runs in a bf16 view of the gradient
    # buffer (param_and_grad_buffer.py L695-712), as without fp8_params
    assert _gathered(_scenario(True, hardware="b200-sxm", scaling="mxfp8")) == _gathered(
        _scenario(False, hardware="b200-sxm", scaling="mxfp8"))


def test_a_tied_table_held_again_by_the_last_stage():
    # two stages: the last holds GPT's tied table again (lower.stages.stage_work), in bf16
    # like the embedding's; over both devices the FP8 gather is still short exactly one
    # byte per layer parameter (the share counts the table twice here, once without a
    # pipeline: test_fp8_weights_are_gathered_in_one_byte)
    bf16 = _gathered(_scenario(False, pipeline=2))
    fp8 = _gathered(_scenario(True, pipeline=2))
    one = _gathered(_scenario(False))
    m = _scenario(True).model
    assert bf16[1] == pytest.approx(one[1] + 2 * m.vocab_size * m.hidden_size, rel=1e-12)
    assert fp8[1] == pytest.approx(bf16[1] - 2 * layer_params(m, 1), rel=1e-12)


@pytest.mark.parametrize("fp8_params, hardware, scaling", [
    (True, "h100-sxm", "tensor"), (False, "h100-sxm", "tensor"),
    (True, "b200-sxm", "mxfp8")])
def test_the_planner_prices_the_gather_as_the_lowering(fp8_params, hardware, scaling):
    # planner.estimate's ZeRO-1/2 gather: the same bytes per element as the Program's
    # (an FP8 model's weights are bf16: 2 bytes without fp8_params, not the dtype's 1)
    sc = _scenario(fp8_params, hardware=hardware, scaling=scaling)
    hw = load_profile(hardware)
    program = run_program(sc, hw, framework_for(sc, hw)).program
    planned = gather_bytes(workload_of(sc, hw), config_of(sc))
    assert planned == pytest.approx(program.gather_bytes, rel=1e-12)
    params = _gathered(_scenario(False))[1] / 2  # the device gathers the whole model
    fp8 = 2 * layer_params(sc.model, 1) if fp8_params and scaling == "tensor" else 0
    assert planned == pytest.approx(2.0 - fp8 / params, rel=1e-12)
