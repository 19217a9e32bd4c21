"""Memory-bound kernels priced at their kind's measured bandwidth (issue 24 item 2)."""

import pytest

from simulator.config.hardware import load_profile
from simulator.config.hardware.schema import Efficiency
from simulator.cost.compute import bandwidth_fraction, compute_time_s
from simulator.cost.specs import ComputeSpec

GB = 1e9


def _time(kind: str, hw) -> float:
    return compute_time_s(ComputeSpec("k", kind, 0.0, 28 * GB, "bf16"), hw)  # type: ignore[arg-type]


def test_an_optimizer_step_runs_at_its_measured_fraction():
    # h200-sxm: fused AdamW moved 3405 GB/s of 4800 on a lent H200 (0.706), a plain
    # elementwise kernel keeps the profile's memory_bandwidth_fraction (0.84)
    h200 = load_profile("h200-sxm")
    assert _time("optimizer", h200) == pytest.approx(
        28 * GB / (4800 * GB * 0.706) + h200.kernel_launch_s, rel=1e-12)
    assert _time("elementwise", h200) == pytest.approx(
        28 * GB / (4800 * GB * 0.84) + h200.kernel_launch_s, rel=1e-12)
    assert bandwidth_fraction("softmax", h200) == 0.268
    assert bandwidth_fraction("copy", h200) == 0.84  # no figure of its own


def test_a_profile_without_measured_kinds_prices_every_kind_alike():
    h100 = load_profile("h100-sxm")
    assert h100.efficiency.kernel_bandwidth_fractions is None
    assert _time("optimizer", h100) == _time("elementwise", h100)


def test_an_unknown_kind_is_refused():
    eff = load_profile("h200-sxm").efficiency.model_dump()
    eff["kernel_bandwidth_fractions"] = {"optimiser": 0.7}
    with pytest.raises(ValueError, match="optimiser"):
        Efficiency.model_validate(eff)
