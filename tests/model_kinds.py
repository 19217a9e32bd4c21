"""Scenarios of every model type for tests that run one key on each (a bundled scenario and
the `--set` overrides that turn it into that type), and running one with more overrides."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

MODEL_KINDS: dict[str, tuple[str, list[str]]] = {
    "transformer": ("tiny-cpu", []),
    "mlp": ("tiny-cpu", ["model={type: mlp, layers: 2, hidden_size: 64, input_size: 32, "
                         "num_classes: 16, dtype: fp32}"]),
    "resnet": ("tiny-cpu", ["model={type: resnet, conv_layers: 2, in_channels: 4, "
                            "channels: 4, image_size: 8, kernel_size: 3, fc_layers: 2, "
                            "hidden_size: 32, num_classes: 8, dtype: fp32}"]),
    "graph": ("seed-a-weight-ops", []),
    "graph-sbp": ("seed-sbp-partial-chain", []),
}


def run_kind(invoke_cli: Callable[..., Any], kind: str, *sets: str) -> Any:
    """`shardsim run --json` on the scenario of `kind` with `sets` applied after its own."""
    name, base = MODEL_KINDS[kind]
    args = ["run", name, "--json"]
    for item in (*base, *sets):
        args += ["--set", item]
    return invoke_cli(*args)


def stderr_of(result: Any) -> str:
    """What a CLI result printed on stderr (its whole output where not kept apart)."""
    return result.stderr if hasattr(result, "stderr") else result.output


def refused_flat(result: Any) -> str:
    """A CLI result that must be a refusal (exit 2): its stderr with every run of whitespace
    one space, so a message wrapped to the terminal's width reads as one line."""
    text = " ".join(stderr_of(result).split())
    assert result.exit_code == 2, text
    return text


def refusal(invoke_cli: Callable[..., Any], kind: str, *sets: str) -> str:
    """The error message `run_kind` prints for `sets` it must refuse (exit 2, an `error: `
    line, never a traceback)."""
    result = run_kind(invoke_cli, kind, *sets)
    assert result.exit_code == 2, result.output
    message = stderr_of(result)
    assert message.startswith("error: ")
    return message
