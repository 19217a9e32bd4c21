"""Round trip of `shardsim import megatron` (issue 27 item 3): each bundled published run whose
source states its launch configuration (Narayanan et al. 2021 Table 1: r001-r010; the
Megatron-LM README table: r023-r031) has its Megatron-LM launch script in scenarios/megatron/,
written from what the case's header states; importing it gives the hand-written scenario's
model, training, cluster, stack and parallel sections exactly, so `run` predicts the same time.
(The hand-written files took shardsim's 25 MB buckets, and for 2021 a gradient reduction
overlapped with the backward, until this test found it: they now state the stack's own
buckets, `comm_fusion: {mode: auto}`, and Megatron-LM v2's reduction after the backward.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from benchmarks import golden
from simulator import api
from simulator.config.framework.load import framework_for
from simulator.config.imports.load import import_file
from simulator.config.imports.megatron_emit import resolved

DATA = Path(__file__).parent.parent / "scenarios" / "megatron"
ROOT = Path(__file__).parent.parent
CASES = sorted(p.stem for p in DATA.glob("r0*.sh"))
RUNS = golden.load("run")

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


def test_every_megatron_validation_run_has_a_launch_script() -> None:
    runs = sorted(p.stem for p in (ROOT / "scenarios" / "validation").glob("r0*.yaml")
                  if "narayanan2021" in p.stem or "megatron-readme" in p.stem)
    assert runs == CASES and len(CASES) == 19


@pytest.mark.parametrize("case", CASES)
def test_import_gives_the_hand_written_scenario(case: str) -> None:
    hand = api.load_scenario(str(ROOT / "scenarios" / "validation" / f"{case}.yaml"))
    hw = api.load_hardware(hand)
    imported, scenario = import_file("megatron", str(DATA / f"{case}.sh"),
                                     hand.scenario.hardware)
    stack = framework_for(hand.scenario, hw).name
    assert scenario.framework == stack
    want, got = _sections(hand.scenario), _sections(scenario)
    differ = {k: (want[k], got[k]) for k in want if want[k] != got[k]}
    assert not differ, differ
    # `run` of the hand-written file, as the golden file holds it (tests/test_golden.py
    # keeps that entry current): one simulation per case instead of two
    ran = RUNS[f"scenarios/validation/{case}.yaml"]
    assert ran["exit"] == 0
    assert ran["stdout"]["iteration_time_s"] == api.simulate(scenario).iteration_time_s
