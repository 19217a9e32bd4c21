"""What a torchtitan layer keeps for its backward, against the tensors a GPU run kept.

benchmarks/device/saved_tensors.py recorded, with a saved_tensors_hooks pack hook, every
tensor autograd kept in the forward of one Llama-3-8B-shaped layer (hidden 4096, 32 / 8 heads,
FFN 14336, 8192 tokens, bf16) written as torchtitan wrote it in December 2024 (fp32 RMSNorm,
complex rotary, repeat_kv, SDPA, eager SwiGLU): 52.03 bytes per token x hidden
(benchmarks/data/measured/h200-saved-tensors-2026-11-28.json). The torchtitan profile's fused
layer keeps 34.03 of them; its unfused passes state the rest (`saved_bytes`)."""

import json
from pathlib import Path

import pytest

from simulator.api import load_scenario as load_cli
from simulator.config.framework.load import load_framework
from simulator.program.model_program import transformer_program
from simulator.program.unfused import unfused_saved_bytes

ROOT = Path(__file__).resolve().parent.parent
MEASURED = ROOT / "benchmarks" / "data" / "measured" / "h200-saved-tensors-2026-11-28.json"
CASE = str(ROOT / "benchmarks" / "data" / "memory" / "h200-eager-llama3-8b-8l.yaml")
SBH = 8192 * 4096


def _layer_saved(sets: list[str]) -> float:
    sc = load_cli(CASE, sets).scenario
    prog = transformer_program(sc, load_framework("torchtitan").software)
    return next(b.saved_bytes for b in prog.blocks if b.name.startswith("layer"))


def _measured() -> float:
    rows = json.loads(MEASURED.read_text())["rows"]
    row = next(r for r in rows if r["norm"] == "fp32 RMSNorm" and r["backend"] == "cudnn")
    return row["saved_bytes"]


def test_a_torchtitan_layer_keeps_what_the_measured_layer_kept():
    assert _layer_saved([]) == pytest.approx(_measured(), rel=2e-3)


def test_the_unfused_passes_are_the_difference_in_closed_form():
    # fp32 RMSNorm: +4 per element of each of two norms; SiLU's output: +2 per FFN element;
    # repeated keys and values (+2 x 2 heads) instead of the key/value heads (-2 x 2)
    sc = load_cli(CASE, []).scenario
    extra = unfused_saved_bytes(sc, load_framework("torchtitan").software.unfused_passes)
    assert extra == 2 * 4 * SBH + 2 * 8192 * 14336 + 2 * 2 * SBH - 2 * 2 * SBH / 4


def test_a_full_recompute_keeps_none_of_it():
    full = _layer_saved(["parallel.recompute=full"])
    assert full == pytest.approx(2 * SBH, rel=1e-9)  # the layer's bf16 input only
