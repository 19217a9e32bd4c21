"""Issue 21's golden file: every command's output is unchanged by a reorganisation.

Each entry of tests/golden/*.json is the exit code and `--json` stdout (wall-time fields
removed) of one `run`, `verify`, `plan` or `explain`, produced by `python -m benchmarks.golden
--write`. A change that moves a figure rewrites the file and says which figure and why in its
commit message.
"""

from __future__ import annotations

import pytest

from benchmarks import golden

CASES = list(golden.cases())
STORED = {command: golden.load(command) for command in golden.COMMANDS}


def test_golden_covers_every_case():
    names = {(c, n) for c, n, _ in CASES}
    stored = {(c, n) for c in golden.COMMANDS for n in STORED[c]}
    assert names == stored, "run `python -m benchmarks.golden --write` and say why in the commit"


@pytest.mark.parametrize(("command", "name", "args"), CASES,
                         ids=[f"{c}:{n}" for c, n, _ in CASES])
def test_golden_entry(command, name, args):
    assert golden.produce(args) == STORED[command][name]


def test_golden_strip_removes_wall_time_only():
    raw = {"simulation": {"events": 3, "wall_s": 0.1}, "rows": [{"wall_s": 1, "t": 2}]}
    assert golden._strip(raw) == {"simulation": {"events": 3}, "rows": [{"t": 2}]}


def test_golden_pins_rounding_level_errors_as_zero():
    raw = {"max_abs_error": 5.38, "max_rel_error": 2.7e-7,
           "checks": [{"max_abs_error": 0.5, "max_rel_error": 0.012345, "ok": False}]}
    assert golden._strip(raw) == {"max_abs_error": 0.0, "max_rel_error": 0.0, "checks": [
        {"max_abs_error": 0.5, "max_rel_error": 0.012, "ok": False}]}
