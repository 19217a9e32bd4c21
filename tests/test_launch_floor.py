"""The host's launch cost per kernel (framework profiles' `launch`): a run of ops takes at
least its kernel count times the stack's host time per kernel, and no longer where the
kernels outlast their launches."""

from __future__ import annotations

import pytest

from simulator.config.framework.load import load_framework
from simulator.cost.specs import CommSpec, ComputeSpec, GroupSpec
from simulator.lower.costs import CostModel, price_ops

GROUPS = {"tp": GroupSpec(2, 1, 8)}


def _costs(kernel_s: float, comm_s: float, host_s: float) -> CostModel:
    return CostModel(compute_s=lambda spec: kernel_s,
                     collective_s=lambda coll, nbytes, group: comm_s,
                     send_recv_s=lambda nbytes, intra: 0.0, host_kernel_s=host_s)


def _ops(n: int) -> tuple:
    kernels = tuple(ComputeSpec(f"k{i}", "elementwise", 1.0, 1.0, "bf16") for i in range(n))
    return kernels + (CommSpec("x", "all_reduce", 1e6, "tp"),)


def test_small_kernels_run_at_the_host_launch_rate():
    """10 kernels of 2 us and a 5 us collective, 8 us of host time per launch: the host
    issues 11 launches in 88 us, the device would need 25: the run takes 88 us, the
    collective's 5 us as communication, the rest as compute."""
    priced = price_ops(_ops(10), _costs(2e-6, 5e-6, 8e-6), GROUPS)
    assert priced.comm_s == pytest.approx(5e-6)
    assert priced.compute_s + priced.comm_s == pytest.approx(11 * 8e-6)


def test_kernels_longer_than_their_launch_are_unchanged():
    """The host runs ahead of the device: 10 kernels of 1 ms cost 10 ms whatever the launch."""
    slow = price_ops(_ops(10), _costs(1e-3, 5e-6, 8e-6), GROUPS)
    free = price_ops(_ops(10), _costs(1e-3, 5e-6, 0.0), GROUPS)
    assert (slow.compute_s, slow.comm_s) == (free.compute_s, free.comm_s)
    assert slow.compute_s == pytest.approx(10e-3)


def test_an_empty_op_is_not_launched():
    """A kernel with no FLOPs and no bytes costs nothing, not even a launch."""
    ops = (ComputeSpec("none", "elementwise", 0.0, 0.0, "bf16"),) * 5
    assert price_ops(ops, _costs(0.0, 0.0, 8e-6), GROUPS).compute_s == 0.0


@pytest.mark.parametrize("name", ["megatron-core", "nemo", "megatron-lm-2021", "llm-foundry",
                                  "torchtitan", "pytorch-fsdp", "deepspeed-zero",
                                  "megatron-deepspeed"])
def test_eager_pytorch_stacks_pay_the_measured_dispatch(name):
    """Eager PyTorch on CUDA: 8 us of host time per operator (flagos-ai/Torch-FL #27, A100
    host, add 512x512 launched back to back); the stacks without a figure pay nothing."""
    fw = load_framework(name)
    assert fw.launch is not None and fw.launch.mode == "eager"
    assert fw.software.host_us_per_kernel == 8.0
    assert "Torch-FL" in (fw.launch.source or "")
    assert load_framework("mindspore").software.host_us_per_kernel == 0.0


def test_run_charges_the_stack_its_launches(invoke_cli, tmp_path):
    """`run` prices with the scenario's stack's launch cost: megatron-core with 10 ms per
    launch makes tiny-cpu's iteration at least its kernels x 10 ms, and zero leaves the
    iteration as the stack without a figure (the device's own kernel times)."""
    import json
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "framework_profiles"
            / "megatron-core.yaml").read_text()

    def seconds(host_us: str) -> float:
        path = tmp_path / f"mc-{host_us}.yaml"
        path.write_text(text.replace("host_us_per_kernel: 8.0", f"host_us_per_kernel: {host_us}"))
        res = invoke_cli("run", "tiny-cpu", "--json", "--set", f"framework={path}")
        assert res.exit_code == 0, res.output
        return json.loads(res.stdout)["iteration_time_s"]

    free, slow = seconds("0.0"), seconds("10000.0")
    assert slow > free + 0.01
