"""`verify` shows its progress on stderr once it has run 2 s (SHARDSIM_PROGRESS_AFTER_S
forces the threshold): what it is doing and done/total, never on stdout; nothing before.
The API's `verify(..., progress=)` gets every operator step of the sharded run and of the
single-device reference, through pipeline stages too, and none from a forked child."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from simulator import api
from simulator.cli import progress as cli_progress
from simulator.cli.progress import AFTER_ENV, LateProgress

REPO = Path(__file__).resolve().parent.parent
LINE = re.compile(r"^verify: (?P<what>.+): (?P<done>\d+)/(?P<total>\d+) \[\d+\.\d s\]$")


def _verify_cli(scenario: str, after_s: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, AFTER_ENV: after_s, "PYTHONPATH": os.pathsep.join(
        [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])}
    return subprocess.run([sys.executable, "-m", "simulator", "verify", scenario, "--json"],
                          capture_output=True, text=True, env=env, timeout=300, cwd=REPO)


def test_verify_past_the_threshold_prints_steps_on_stderr_only():
    proc = _verify_cli("verify-tiny-dp8", "0")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)  # stdout: the one JSON object, nothing else
    assert report["ok"]
    lines = proc.stderr.splitlines()
    parsed = [LINE.match(line) for line in lines]
    assert lines and all(parsed), lines
    steps = [(m["what"], int(m["done"]), int(m["total"])) for m in parsed if m]
    assert all(0 <= done <= total for _, done, total in steps)
    whats = [w for w, _, _ in steps]
    assert "planning the sharded case" in whats
    sharded = [s for s in steps if s[0].startswith(
        f"sharded run on {report['devices']} numpy devices, micro-batch ")]
    assert sharded and sharded[-1][1] == sharded[-1][2]  # the sharded run reached its total
    assert steps[-1] == ("comparing with the single-device run", 1, 1)


def test_a_fast_verify_prints_nothing_on_stderr():
    proc = _verify_cli("tiny-cpu", "60")
    assert proc.returncode == 0 and json.loads(proc.stdout)["ok"]
    assert proc.stderr == ""


def test_the_default_threshold_is_two_seconds(monkeypatch):
    monkeypatch.delenv(AFTER_ENV, raising=False)
    assert LateProgress("verify").after_s == cli_progress.AFTER_S == 2.0
    monkeypatch.setenv(AFTER_ENV, "0.5")
    assert LateProgress("verify").after_s == 0.5


def test_nothing_before_the_threshold_then_the_latest_state(capsys):
    with LateProgress("verify", after_s=0.3) as progress:
        progress("planning the sharded case", 0, 1)
        assert capsys.readouterr().err == ""
        time.sleep(0.6)  # a long step with no call: the timer shows where the work is
        shown = capsys.readouterr().err
        progress("sharded run on 2 numpy devices, micro-batch 1/1", 4, 4)
    assert shown.startswith("verify: planning the sharded case: 0/1 [")
    assert capsys.readouterr().err.startswith(
        "verify: sharded run on 2 numpy devices, micro-batch 1/1: 4/4 [")
    progress("after the work", 1, 1)  # nothing once the work is over
    assert capsys.readouterr().err == ""


def _calls(scenario: str, **kw) -> list[tuple[str, int, int]]:
    from simulator.config.framework.load import framework_for
    from simulator.simulation.stage_split import stage_split
    from simulator.simulation.verify import verify_scenario

    loaded = api.load_scenario(scenario)
    hw = api.load_hardware(loaded)
    calls: list[tuple[str, int, int]] = []
    software = framework_for(loaded.scenario, hw).software
    res = verify_scenario(loaded.scenario, fused_attention=software.fused_attention,
                          split=stage_split(loaded.scenario, hw),
                          selective=software.selective_recompute,
                          progress=lambda *c: calls.append(c), **kw)
    assert res.ok
    return calls


@pytest.mark.parametrize("scenario", ["tiny-cpu", "pipeline-mlp-8-a100"])
def test_every_operator_step_is_reported(scenario):
    calls = _calls(scenario, fork=False)
    for part in ("sharded run on", "single-device reference"):
        mine = [c for c in calls if c[0].startswith(part)]
        total = mine[0][2]
        # one call per operator forward and backward per micro-batch, counted 1..total
        assert [done for _, done, _ in mine] == list(range(1, total + 1))
        batches = int(mine[-1][0].rsplit("/", 1)[1])
        assert total % (2 * batches) == 0 and mine[-1][0].endswith(f"{batches}/{batches}")


def test_a_forked_reference_reports_nothing_from_the_child():
    calls = _calls("tiny-cpu", fork=True)
    whats = [w for w, _, _ in calls]
    assert not any(w.startswith("single-device reference") for w in whats)
    assert "waiting for the single-device reference (forked beside)" in whats
