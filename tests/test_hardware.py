"""Hardware profiles: every bundled one loads with sane figures; bad input -> exact messages."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from simulator.config.hardware import list_profiles, load_profile, profile_summary
from simulator.config.resources import bundled_dir, list_bundled
from simulator.errors import InputError

REQUIRED = ("ascend-910a", "ascend-910b", "a100-40gb", "a100-80gb", "h100-sxm", "h200-sxm",
            "b200-sxm", "gb200-nvl72", "cpu-x86")


@pytest.fixture
def a100_yaml(tmp_path: Path):
    """A writer of a copy of the a100-80gb profile with one edit, returning its path."""
    base = yaml.safe_load((bundled_dir("hardware_profiles") / "a100-80gb.yaml").read_text())

    def write(edit) -> Path:
        data = yaml.safe_load(yaml.safe_dump(base))
        edit(data)
        path = tmp_path / "hw.yaml"
        path.write_text(yaml.safe_dump(data))
        return path

    return write


def test_required_profiles_are_bundled():
    missing = set(REQUIRED) - set(list_bundled("hardware_profiles"))
    assert not missing


@pytest.mark.parametrize("name", list_bundled("hardware_profiles"))
def test_every_bundled_profile_loads_with_positive_figures(name):
    hw = load_profile(name)
    assert hw.name == name
    model_dtypes = ("fp32",) if hw.device_type == "cpu" else ("fp16", "bf16")
    if name == "ascend-910a":
        model_dtypes = ("fp16",)  # the 910A has no bf16 (see its profile)
    for dtype in model_dtypes:
        assert hw.peak_flops_per_s(dtype) > 1e12
    assert hw.memory_capacity_bytes >= 16e9
    assert hw.memory_bandwidth_bytes_per_s > 1e11
    assert hw.intra_link_bandwidth_bytes_per_s > 0 and 0 < hw.intra_link_latency_s < 1e-3
    assert hw.inter_link_bandwidth_bytes_per_s() > 0 and 0 < hw.inter_link_latency_s < 1e-3
    assert hw.host_memory_bytes > hw.memory_capacity_bytes
    assert 0 < hw.kernel_launch_s < 1e-4
    # the GEMM ceiling never beats the datasheet
    assert 0 < hw.efficiency.gemm_peak_fraction <= 1


def test_si_conversions_of_a100():
    hw = load_profile("a100-80gb")
    assert hw.peak_flops_per_s("bf16") == 312e12
    # 81920 MiB as nvidia-smi reports it: the datasheet's 80 GB are GiB
    assert hw.memory_capacity_bytes == pytest.approx(81920 * 2**20, rel=1e-3)
    assert hw.memory_bandwidth_bytes_per_s == 2039e9
    assert hw.intra_link_bandwidth_bytes_per_s == 300e9
    assert hw.nic_bandwidth_bytes_per_s == 25e9          # 200 Gb/s
    assert hw.inter_link_bandwidth_bytes_per_s(8) == 25e9  # 8 NICs shared by 8 GPUs
    assert hw.kernel_launch_s == pytest.approx(hw.kernel_launch_us * 1e-6)


def test_list_profiles_and_summary():
    profiles = list_profiles()
    assert [p.name for p in profiles] == list_bundled("hardware_profiles")
    row = profile_summary(load_profile("h100-sxm"))
    assert row["bf16_tflops"] == pytest.approx(989.4, rel=1e-3)
    assert row["nic_Gbps_per_node"] == 3200


def test_override_changes_the_figure():
    hw = load_profile("a100-80gb", ["memory_GB=40", "intra_node.bandwidth_GBps=450"])
    assert hw.memory_capacity_bytes == 40e9
    assert hw.intra_link_bandwidth_bytes_per_s == 450e9
    assert load_profile("a100-80gb").memory_capacity_bytes == 85.90e9


def test_load_by_path(a100_yaml):
    path = a100_yaml(lambda d: d.update(name="custom"))
    assert load_profile(str(path)).name == "custom"


def test_unknown_profile_name_lists_bundled_with_hint():
    with pytest.raises(InputError) as err:
        load_profile("a100-80g")
    names = ", ".join(list_bundled("hardware_profiles"))
    assert str(err.value) == (f"hardware: unknown hardware profile 'a100-80g' (did you mean "
                              f"'a100-80gb'?); bundled: {names} (or give a path to a YAML file)")


def test_unknown_key_has_did_you_mean(a100_yaml):
    path = a100_yaml(lambda d: d["intra_node"].update(bandwith_GBps=1))
    with pytest.raises(InputError) as err:
        load_profile(str(path))
    assert str(err.value) == (f"{path}: intra_node.bandwith_GBps: unknown key (did you mean "
                              "'bandwidth_GBps'?); allowed: allreduce_busbw_GBps, bandwidth_GBps, "
                              "latency_us, mesh_links, nvls, topology")


def test_boolean_where_a_number_belongs(a100_yaml):
    path = a100_yaml(lambda d: d.update(memory_bandwidth_GBps=True))
    with pytest.raises(InputError) as err:
        load_profile(str(path))
    assert str(err.value) == (f"{path}: memory_bandwidth_GBps: found a boolean (true); "
                              "expected a number")


def test_boolean_override_is_rejected():
    with pytest.raises(InputError) as err:
        load_profile("a100-80gb", ["memory_GB=yes"])
    assert err.value.key == "memory_GB"
    assert "found a boolean (true); expected a number" in err.value.message


def test_missing_dtype_names_file_and_dtype():
    hw = load_profile("a100-80gb")
    with pytest.raises(InputError) as err:
        hw.peak_flops_per_s("fp8")
    assert str(err.value) == ("hardware_profiles/a100-80gb.yaml: peak_tflops.fp8: device "
                              "'a100-80gb' has no peak for dtype 'fp8'; it has: fp32, tf32, "
                              "bf16, fp16")


def test_missing_required_field(a100_yaml):
    path = a100_yaml(lambda d: d.pop("memory_GB"))
    with pytest.raises(InputError) as err:
        load_profile(str(path))
    assert str(err.value) == f"{path}: memory_GB: is required but missing"


def test_fraction_above_one_is_rejected(a100_yaml):
    path = a100_yaml(lambda d: d["efficiency"].update(gemm_peak_fraction=1.2))
    with pytest.raises(InputError) as err:
        load_profile(str(path))
    assert err.value.key == "efficiency.gemm_peak_fraction"
    assert err.value.message == ("found 1.2; expected a value above 0, up to 1 "
                                 "(a range a real system could have)")


def test_bad_topology_lists_choices(a100_yaml):
    path = a100_yaml(lambda d: d["intra_node"].update(topology="swich"))
    with pytest.raises(InputError) as err:
        load_profile(str(path))
    assert err.value.message == ("found 'swich'; allowed: switch, ring, mesh "
                                 "(did you mean 'switch'?)")


def test_nvlink_sharp_only_on_nvswitch_generations_that_have_it():
    """NVSwitch gen 3 (H100/H200) and gen 4 (B200/GB200) reduce in the switch; A100's does not."""
    with_nvls = {hw.name for hw in list_profiles() if hw.intra_node.nvls is not None}
    assert with_nvls == {"h100-sxm", "h200-sxm", "h800-sxm", "b200-sxm", "gb200-nvl72", "b300-sxm",
                         "gb300-nvl72"}
    assert load_profile("h200-sxm").intra_node.nvls.latency_s == pytest.approx(25e-6)


def test_nvls_efficiency_above_one_is_rejected(a100_yaml):
    path = a100_yaml(lambda d: d["intra_node"].update(nvls={"efficiency": 1.5,
                                                            "latency_us": 25.0}))
    with pytest.raises(InputError) as err:
        load_profile(str(path))
    assert str(err.value).startswith(f"{path}: intra_node.nvls.efficiency: ")


def test_blackwell_ultra_profiles_carry_the_datasheet_figures():
    """B300 / GB300 (issue 22): 288 GB HBM3e at 8 TB/s and 160 SMs (NVIDIA's Blackwell Ultra
    blog; a GB300 takes nvidia-smi's 284208 MiB instead, as GB200 and the Hopper parts),
    NVLink 5 at 900 GB/s per direction, an 800 Gb/s ConnectX-8 per GPU, dense NVFP4 15 PF
    on GB300 (the blog) and 13.125 PF on HGX B300 (105 PF / 8), FP8 twice BF16 twice TF32."""
    b300, gb300 = load_profile("b300-sxm"), load_profile("gb300-nvl72")
    assert b300.memory_GB == 288
    assert gb300.memory_GB == pytest.approx(284208 * 2**20 / 1e9, abs=1e-3)
    for hw in (b300, gb300):
        assert (hw.memory_bandwidth_GBps, hw.compute_units) == (8000, 160)
        assert hw.intra_node.bandwidth_GBps == 900 and hw.nic_bandwidth_bytes_per_s == 100e9
        assert hw.inter_node.nics_per_node == hw.devices_per_node_default
        p = hw.peak_tflops
        assert p.fp8 == 2 * p.bf16 == 4 * p.tf32
        assert hw.nccl is not None and hw.nccl.generation == "blackwell"
    assert gb300.peak_flops_per_s("fp4") == 15000e12 and b300.peak_tflops.fp4 == 105000 / 8
    assert gb300.devices_per_node_default == 72 and b300.devices_per_node_default == 8


_CUDNN_BLACKWELL = Path(__file__).parent.parent / "benchmarks/data/kernels/cudnn_sdpa_blackwell.csv"


def _cudnn_fit(chip: str, peak: float) -> tuple[float, float, float]:
    """(forward, backward fraction at 2048 keys, half) of rate = a s / (s + half) fitted in log
    to cuDNN's measured causal rates on `chip` from 1k to 32k keys, forward and backward
    sharing the half (benchmarks/data/kernels/cudnn_sdpa_blackwell.csv)."""
    rows = [line.split(",") for line in _CUDNN_BLACKWELL.read_text().splitlines()
            if line.startswith(chip + ",")]
    s = np.array([float(r[1]) for r in rows])
    keep = (s >= 1024) & (s <= 32768)
    s = s[keep]
    ys = [np.log(np.array([float(r[i]) for r in rows])[keep] / peak) for i in (2, 3)]
    best = (np.inf, 0.0, [0.0, 0.0])
    for half in np.arange(500.0, 4000.0, 1.0):
        lx = np.log(s / (s + half))
        logs_a = [float(np.mean(y - lx)) for y in ys]
        err = sum(float(np.sum((y - lx - a) ** 2)) for y, a in zip(ys, logs_a))
        if err < best[0]:
            best = (err, half, logs_a)
    _, half, logs_a = best
    at_2048 = 2048 / (2048 + half)
    return math.exp(logs_a[0]) * at_2048, math.exp(logs_a[1]) * at_2048, half


@pytest.mark.parametrize("chip,profiles", [("GB200", ("gb200-nvl72", "b200-sxm")),
                                           ("GB300", ("gb300-nvl72", "b300-sxm"))])
def test_blackwell_attention_is_the_measured_cudnn_rate(chip, profiles):
    """cuDNN 9.17 on GB200 and GB300 (NVIDIA/cudnn-frontend's published training-SDPA
    benchmark): the profiles' cudnn / te fractions and attention_seq_half are the fit of
    a s / (s + half) to the measured curve, B200 and B300 taking their rack part's figures;
    the fit reproduces the measured 8k-key rate within 7%."""
    peak = load_profile(profiles[0]).peak_tflops.bf16
    fwd, bwd, half = _cudnn_fit(chip, peak)
    for name in profiles:
        eff = load_profile(name).efficiency
        assert eff.attention_seq_half == pytest.approx(half, abs=1)
        for kernel in (eff.attention_kernels.cudnn, eff.attention_kernels.te):
            assert (kernel.fwd, kernel.bwd) == (pytest.approx(fwd, abs=5e-4),
                                                pytest.approx(bwd, abs=5e-4))
    at_8k = (8192 / (8192 + half)) / (2048 / (2048 + half))
    measured = {int(r.split(",")[1]): r.split(",")[2:] for r in
                _CUDNN_BLACKWELL.read_text().splitlines() if r.startswith(chip + ",")}[8192]
    assert fwd * at_8k * peak == pytest.approx(float(measured[0]), rel=0.07)
    assert bwd * at_8k * peak == pytest.approx(float(measured[1]), rel=0.07)


def test_b200_memory_fraction_is_the_driver_peak():
    """0.84 of the driver-reported 7.672 TB/s, over the datasheet's 8 TB/s."""
    hw = load_profile("b200-sxm")
    assert hw.efficiency.memory_bandwidth_fraction == pytest.approx(0.84 * 7672 / 8000,
                                                                    abs=5e-4)
