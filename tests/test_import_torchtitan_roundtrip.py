"""Round trip of `shardsim import torchtitan` (issue 27): the bundled torchtitan job configs
whose published run is in the validation set import to the hand-written scenario exactly, so
`run` predicts the same time. torchtitan's Llama 3 8B preset of the 64-A100 performance table
(train_configs/llama3_8b.toml @0413364, 2024-04) and the same run in the last TOML schema
(torchtitan/models/llama3/train_configs/llama3_8b.toml @238fa99, 2026-02) both give
tt-a100-l3-8b-fsdp-sacop-64g. (This found the tt-* validation files simulating dropout 0.1,
Megatron's default, on torchtitan's Llama, which has no dropout: they now state 0.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from simulator import api
from simulator.config.imports.load import import_file
from simulator.config.imports.megatron_emit import resolved

ROOT = Path(__file__).parent.parent
DATA = ROOT / "scenarios" / "torchtitan"
# bundled job config -> (validation run, what --lenient lets through)
CASES = {"llama3-8b-2024-04": ("tt-a100-l3-8b-fsdp-sacop-64g", True),
         "llama3-8b-2026-02": ("tt-a100-l3-8b-fsdp-sacop-64g", False)}


def _leaves(value: Any, prefix: str) -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, sub in value.items():
            out.update(_leaves(sub, f"{prefix}.{key}"))
        return out
    return {prefix: value}


def _sections(scenario: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in ("model", "training", "parallel", "cluster"):
        out.update(_leaves(resolved(getattr(scenario, name)), name))
    return out


@pytest.mark.parametrize("case", sorted(CASES))
def test_import_gives_the_hand_written_scenario(case: str) -> None:
    run, lenient = CASES[case]
    hand = api.load_scenario(str(ROOT / "scenarios" / "validation" / f"{run}.yaml"))
    c = hand.scenario.cluster
    imported, scenario = import_file("torchtitan", str(DATA / f"{case}.toml"),
                                     hand.scenario.hardware, c.nodes, c.devices_per_node,
                                     lenient)
    assert scenario.framework == hand.scenario.framework == "torchtitan"
    want, got = _sections(hand.scenario), _sections(scenario)
    differ = {k: (want[k], got[k]) for k in want if want[k] != got[k]}
    assert not differ, differ
    assert api.simulate(hand).iteration_time_s == api.simulate(scenario).iteration_time_s


def test_the_2024_preset_names_its_fused_norm() -> None:
    """The 2024-04 preset runs torchtitan's fused_rmsnorm, which the torchtitan profile does
    not price (its eager RMSNorm passes): refused by name, imported with --lenient and a
    note."""
    with pytest.raises(api.InputError, match=r"llama3-8b-2024-04.toml:23: model.norm_type: "
                       r"changes what torchtitan runs"):
        import_file("torchtitan", str(DATA / "llama3-8b-2024-04.toml"), "a100-80gb", 8, 8)
    imported, _ = import_file("torchtitan", str(DATA / "llama3-8b-2024-04.toml"),
                              "a100-80gb", 8, 8, True)
    assert imported.notes[0].startswith("model.norm_type fused_rmsnorm (line 23) imported "
                                        "as rmsnorm")


def test_every_bundled_job_config_imports() -> None:
    names = sorted(p.stem for p in DATA.glob("*.toml"))
    assert set(CASES) < set(names)
    for name in names:
        import_file("torchtitan", name, "h100-sxm", 8, 8, True)
