"""FP4 GEMMs on Blackwell (issue 22 item 6): `training.fp4_recipe: nvfp4 | mxfp4` runs the
framework recipe's GEMMs at the device's FP4 peak and measured FP4 fraction, with the casts
the format needs; a device without FP4 tensor cores refuses it by name."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

from simulator.cli import app
from simulator.config.framework.load import framework_for
from simulator.config.hardware import load_profile
from simulator.config.scenario import parse_scenario
from simulator.cost.compute import compute_efficiency, compute_time_s
from simulator.cost.specs import ComputeSpec
from simulator.errors import InputError
from simulator.lower.framework_apply import fp8_recipe
from simulator.program.fp8 import Fp8Recipe, apply_fp8
from simulator.program.model_program import transformer_program

B200 = load_profile("b200-sxm")


def _scenario(recipe: str = "nvfp4", hardware: str = "b200-sxm", **model: Any):
    return parse_scenario({
        "name": "fp4", "hardware": hardware, "cluster": {"nodes": 1, "devices_per_node": 8},
        "model": {"type": "transformer", "layers": 2, "hidden_size": 4096, "num_heads": 32,
                  "seq_length": 4096, "vocab_size": 8192, "dtype": "bf16", **model},
        "training": {"global_batch_size": 8, "micro_batch_size": 1, "fp4_recipe": recipe},
        "parallel": {"data": 8}}, "fp4.yaml")


def _program(sc):
    fw = framework_for(sc, B200)
    return transformer_program(sc, fw.software, B200.compute_units, fp8_recipe(sc, fw))


def test_a_large_gemm_runs_at_the_fp4_peak_times_its_measured_fraction():
    """Closed form: a compute-bound GEMM's time is flops / (peak x fraction x tile factor x
    sustained); the tile factor is the same for both dtypes, so FP4 / BF16 time is
    (2250 x 0.776) / (9000 x 0.582) on B200 (its datasheet peaks, the MAMF bf16 fraction and
    cuBLASLt's MXFP4 8192^3 GEMM, deepseek-ai/DeepGEMM pull 348)."""
    shape = (8192, 8192, 8192)
    flops = 2.0 * 8192 ** 3
    t = {d: compute_time_s(ComputeSpec("g", "gemm", flops, 0.0, d, "fwd", shape), B200)
         - B200.kernel_launch_s for d in ("bf16", "fp4")}
    assert t["fp4"] / t["bf16"] == pytest.approx((2250 * 0.776) / (9000 * 0.582), rel=1e-12)
    rate = compute_efficiency(ComputeSpec("g", "gemm", flops, 0.0, "fp4", "fwd", shape), B200)
    assert rate[0] <= 9000e12 * 0.582


def test_the_recipe_gemms_run_in_fp4_and_the_rest_in_bf16():
    prog = _program(_scenario())
    ops = prog.block("layer").fwd + prog.block("layer").bwd + prog.block("head").fwd
    gemms = {op.name: op.dtype for op in ops if getattr(op, "kind", "") == "gemm"}
    assert {gemms[k] for k in ("qkv", "proj", "fc1", "fc2", "qkv.dgrad", "fc2.wgrad")} == {
        "fp4"}
    assert gemms["lm_head"] == "bf16"
    assert prog.dtype == "bf16"


@pytest.mark.parametrize("fmt, per_element", [
    ("nvfp4", 2.0 + 2 * (0.5 + 1 / 16) + 2.0),  # read, two copies with E4M3/16, amax pass
    ("mxfp4", 2.0 + 2 * (0.5 + 1 / 32))])        # read, two copies with E8M0/32
def test_casts_write_two_4_bit_copies_with_their_block_scales(fmt: str, per_element: float):
    m, n, k = 64, 32, 16
    gemm = ComputeSpec("fc1", "gemm", 2.0 * m * n * k, 0.0, "bf16", "fwd", (m, n, k))
    out = {op.name: op for op in apply_fp8((gemm,), Fp8Recipe.fp4(("fc1",), fmt, 4))}
    assert out["fc1"].dtype == "fp4"
    assert out["fc1.fp4_cast_input"].bytes_accessed == pytest.approx(m * k * per_element)
    # the weight is cast once per step, its share spread over the 4 micro-batches
    assert out["fc1.fp4_cast_weight"].bytes_accessed == pytest.approx(k * n * per_element / 4)


def test_fp4_is_faster_than_bf16_and_mxfp4_a_little_faster_than_nvfp4():
    """Same GEMM rate for both formats (E2M1 on the same tensor cores); NVFP4's casts move
    more bytes (finer scales, the per-tensor amax pass)."""
    def layer_s(recipe: str) -> float:
        prog = _program(_scenario(recipe))
        return sum(compute_time_s(op, B200) for op in prog.block("layer").fwd
                   + prog.block("layer").bwd if isinstance(op, ComputeSpec))
    bf16, nv, mx = layer_s("none"), layer_s("nvfp4"), layer_s("mxfp4")
    assert mx < nv < bf16


def _run(*sets: str) -> Any:
    args = ["run", "llama2-70b-64-h100", "--json"]
    for s in sets:
        args += ["--set", s]
    return CliRunner().invoke(app, args)


def test_refused_by_name_on_hardware_without_fp4_tensor_cores():
    res = _run("training.fp4_recipe=nvfp4")
    assert res.exit_code == 2
    assert ("training.fp4_recipe: nvfp4 runs GEMMs on FP4 tensor cores; 'h100-sxm' has none "
            "(its profile gives no peak_tflops.fp4)") in res.stderr
    assert "Traceback" not in res.output


def test_runs_on_b200_and_reports_mfu_against_the_bf16_peak():
    base, fp4 = (json.loads(_run("hardware=b200-sxm", f"training.fp4_recipe={r}").stdout)
                 for r in ("none", "nvfp4"))
    assert fp4["iteration_time_s"] < base["iteration_time_s"]
    assert fp4["config"]["fp4_recipe"] == "nvfp4" and "fp4_recipe" not in base["config"]
    assert fp4["model_flops_per_iteration"] == base["model_flops_per_iteration"]
    # the model dtype stays bf16: MFU over the bf16 peak, so it rises with the speed
    assert fp4["mfu"] / base["mfu"] == pytest.approx(
        base["iteration_time_s"] / fp4["iteration_time_s"], rel=1e-9)


def test_needs_a_bf16_model():
    with pytest.raises(InputError) as err:
        _scenario(dtype="fp8")
    assert err.value.key == "training.fp4_recipe"
    assert "needs model.dtype: bf16 (found fp8)" in err.value.message


def test_a_framework_without_a_low_precision_recipe_refuses_it():
    sc = _scenario()
    fw = framework_for(sc, B200).model_copy(update={"fp8": framework_for(
        sc, B200).fp8.model_copy(update={"supported": False})})
    with pytest.raises(InputError) as err:
        fp8_recipe(sc, fw)
    assert err.value.key == "training.fp4_recipe"


def test_a_mixed_cluster_refuses_it_on_the_node_type_without_fp4():
    res = _run_scenario("mixed-a100-h100-pp2", "hardware=b200-sxm",
                        "cluster.node_types=[{hardware: b200-sxm, nodes: 2}, "
                        "{hardware: h100-sxm, nodes: 2}]", "training.fp4_recipe=mxfp4")
    assert res.exit_code == 2
    assert ("cluster.node_types[1].hardware: training.fp4_recipe mxfp4 runs GEMMs on FP4 "
            "tensor cores; 'h100-sxm' has none") in res.stderr


def _run_scenario(name: str, *sets: str) -> Any:
    args = ["run", name, "--json"]
    for s in sets:
        args += ["--set", s]
    return CliRunner().invoke(app, args)
