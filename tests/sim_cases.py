"""A small GPT scenario over two or more nodes (its pipeline sends and gradient buckets
cross NICs) and a field-by-field comparison of two `run --json` results, for the tests that
check extended or collapsed simulations against the full one."""

from __future__ import annotations

from typing import Any

import pytest

from simulator.config.scenario import parse_scenario
from simulator.report import summary


def small_gpt(micro: int, *, name: str = "small", pipeline: int = 4, data: int = 2,
              tensor: int = 2, layers: int = 8, **parallel: Any):
    """`micro` micro-batches of one sequence per data-parallel replica, on a100-80gb."""
    devices = tensor * data * pipeline
    return parse_scenario({
        "name": name, "hardware": "a100-80gb",
        "cluster": {"nodes": max(1, devices // 8), "devices_per_node": min(devices, 8)},
        "model": {"type": "transformer", "layers": layers, "hidden_size": 1024,
                  "num_heads": 16, "seq_length": 1024, "vocab_size": 8192, "dtype": "bf16"},
        "training": {"global_batch_size": micro * data, "micro_batch_size": 1},
        "parallel": {"tensor": tensor, "data": data, "pipeline": pipeline, **parallel},
    }, "test")


def assert_same(full: Any, ext: Any, path: str = "") -> None:
    """Every field equal (floats and byte counts to a relative 1e-9)."""
    if isinstance(full, dict):
        assert full.keys() == ext.keys(), path
        for key in full:
            assert_same(full[key], ext[key], f"{path}.{key}")
    elif isinstance(full, (int, float)) and not isinstance(full, bool):
        assert ext == pytest.approx(full, rel=1e-9, abs=1e-12), path
    else:
        assert ext == full, path


def assert_same_summary(full: Any, ext: Any) -> None:
    """`run --json` of a fully simulated and an extended result field by field, but for the
    simulation's own figures and the note that says the steady state was extended."""
    a, b = summary(full), summary(ext)
    a.pop("simulation"), b.pop("simulation")
    if ext.steady is not None:
        assert b["notes"][-1].startswith("steady state extended: simulated ")
        b["notes"] = b["notes"][:-1]
    assert_same(a, b)
