"""FP8 operand layouts by device (issue 24, program/fp8.py): Hopper's FP8 GEMMs take only the
TN layout, so Transformer Engine writes every FP8 tensor with its transpose; Blackwell's take
any layout, so with one scale per tensor it writes none; MXFP8 scales rows and columns apart
and keeps two copies with their E8M0 block scales."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

from simulator.cli import app
from simulator.config.framework.load import framework_for
from simulator.config.hardware import load_profile
from simulator.config.scenario import parse_scenario
from simulator.cost.specs import ComputeSpec
from simulator.lower.framework_apply import fp8_recipe
from simulator.program.fp8 import apply_fp8

M, N, K = 64, 32, 16


def fp8_doc(hardware: str, scaling: str = "tensor") -> dict[str, Any]:
    """A two-layer FP8 transformer on 8 devices of `hardware`, data parallel, as a scenario
    mapping (callers add training and parallel keys before parsing it)."""
    return {
        "name": "fp8", "hardware": hardware, "framework": "megatron-core",
        "cluster": {"nodes": 1, "devices_per_node": 8},
        "model": {"type": "transformer", "layers": 2, "hidden_size": 1024, "num_heads": 8,
                  "seq_length": 1024, "vocab_size": 8192, "dtype": "fp8"},
        "training": {"global_batch_size": 32, "micro_batch_size": 1,
                     "fp8_scaling": scaling},
        "parallel": {"data": 8}}


def _scenario(hardware: str, scaling: str = "tensor") -> Any:
    return parse_scenario(fp8_doc(hardware, scaling), "fp8.yaml")


def _casts(hardware: str, scaling: str = "tensor") -> dict[str, ComputeSpec]:
    sc = _scenario(hardware, scaling)
    hw = load_profile(hardware)
    recipe = fp8_recipe(sc, framework_for(sc, hw), hw)
    assert recipe is not None
    gemm = ComputeSpec("fc1", "gemm", 2.0 * M * N * K, 0.0, "bf16", "fwd", (M, N, K))
    return {op.name: op for op in apply_fp8((gemm,), recipe)}


@pytest.mark.parametrize("hardware, scaling, per_element", [
    ("h100-sxm", "tensor", 2.0 + 1.0 + 1.0),            # read bf16, write e4m3 and its transpose
    ("b200-sxm", "tensor", 2.0 + 1.0),                  # read bf16, write e4m3 only
    ("gb300-nvl72", "tensor", 2.0 + 1.0),
    ("b200-sxm", "mxfp8", 2.0 + 2 * (1.0 + 1 / 32))])   # two copies, an E8M0 scale a 32
def test_an_input_cast_moves_the_bytes_of_the_copies_the_device_needs(
        hardware: str, scaling: str, per_element: float) -> None:
    casts = _casts(hardware, scaling)
    assert casts["fc1.fp8_cast_input"].bytes_accessed == pytest.approx(M * K * per_element)


def test_the_device_property_follows_transformer_engines_rule() -> None:
    """nvte_is_non_tn_fp8_gemm_supported: compute capability 10.x (Blackwell data centre)."""
    any_layout = {n: load_profile(n).fp8_gemm_any_layout
                  for n in ("a100-80gb", "h100-sxm", "h200-sxm", "h800-sxm", "b200-sxm",
                            "gb200-nvl72", "b300-sxm", "gb300-nvl72")}
    assert any_layout == {"a100-80gb": False, "h100-sxm": False, "h200-sxm": False,
                          "h800-sxm": False, "b200-sxm": True, "gb200-nvl72": True,
                          "b300-sxm": True, "gb300-nvl72": True}


def _run(*sets: str) -> Any:
    args = ["run", "llama2-70b-64-h100", "--json", "--set", "model.dtype=fp8"]
    for s in sets:
        args += ["--set", s]
    return CliRunner().invoke(app, args)


def test_the_weight_copies_halve_on_blackwell_with_one_scale_per_tensor() -> None:
    """The cached FP8 weight is its e4m3 data (1 byte a parameter) without the transpose
    Hopper keeps (2): on the same model the parameter bytes differ by the FP8 GEMMs'
    parameters once; MXFP8's two copies with their scales cost 2 x (1 + 1/32)."""
    got = {s: json.loads(_run("hardware=b200-sxm", f"training.fp8_scaling={s}").stdout)
           for s in ("tensor", "mxfp8")}
    par = {s: g["memory"]["by_category_bytes"]["parameters"] for s, g in got.items()}
    hopper = json.loads(_run().stdout)["memory"]["by_category_bytes"]["parameters"]
    p8 = hopper - par["tensor"]  # (2 - 1) bytes a parameter of the FP8 GEMMs
    assert p8 > 0
    assert par["mxfp8"] - par["tensor"] == pytest.approx(p8 * (2 * (1 + 1 / 32) - 1), rel=1e-9)


def test_mxfp8_is_refused_by_name_off_blackwell_and_without_fp8() -> None:
    res = _run("training.fp8_scaling=mxfp8")
    assert res.exit_code == 2
    assert ("training.fp8_scaling: mxfp8 is Blackwell's block-scaled FP8; 'h100-sxm' has no "
            "MXFP8 GEMMs") in res.stderr
    res = CliRunner().invoke(app, ["run", "llama2-70b-64-h100", "--set",
                                   "training.fp8_scaling=mxfp8"])
    assert res.exit_code == 2
    assert "training.fp8_scaling: mxfp8 scales the operands of FP8 GEMMs; it needs " \
           "model.dtype fp8 (found bf16)" in res.stderr
    assert "Traceback" not in res.output
