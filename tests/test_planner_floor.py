"""The planner's closed-form memory floor never exceeds what `run` simulates (issue 21,
"one source of each quantity"): `plan` prunes a configuration whose floor exceeds the
device, so a floor above the simulated peak would drop configurations that fit.

For every bundled scenario and published run that `plan` searches (dense transformers), the
floor of its own configuration (`planner.memory.estimate_memory(...).floor_bytes`, whose
parameter counts and block activations come from the program `run` simulates) is held at
or below the simulated peak of the golden file (`tests/golden/run.json`, which
`tests/test_golden.py` holds equal to `run --json` of today's code). Every other scenario
is searched by simulation alone (`planner.search.estimated` is false for it:
`planner.generic_search`), so no floor of it is used.
"""

from __future__ import annotations

import pytest

from benchmarks.golden import load
from simulator.api import load_scenario
from simulator.config.hardware.load import load_profile
from simulator.models.params import transformer_params
from simulator.planner.memory import estimate_memory, workload_of
from simulator.planner.search import estimated
from simulator.planner.space import config_of
from simulator.program.model_program import transformer_program

RUNS = load("run")
PATHS = sorted(p for p, entry in RUNS.items() if entry["exit"] == 0)


def _scenario(path: str):
    loaded = load_scenario(path)
    return getattr(loaded, "scenario", loaded)


def _searched(s) -> bool:
    """Whether `plan` prunes this scenario's space with the closed-form floor."""
    return estimated(s)


@pytest.mark.parametrize("path", PATHS)
def test_the_floor_is_at_most_the_simulated_peak(path):
    s = _scenario(path)
    if not _searched(s):
        pytest.skip("`plan` searches this model by simulation; no floor of it is used")
    hw = load_profile(s.hardware)
    floor = estimate_memory(workload_of(s, hw), config_of(s)).floor_bytes
    assert floor <= RUNS[path]["stdout"]["memory"]["peak_bytes"]


def test_most_bundled_runs_are_searched():
    """The floor test above covers the bulk of the bundled runs, not a handful."""
    assert sum(_searched(_scenario(p)) for p in PATHS) >= 80


@pytest.mark.parametrize("name", ["tiny-cpu", "gpt3-175b-1024-a100", "llama2-7b-8-ascend910b"])
def test_the_planner_counts_the_programs_parameters(name):
    """One source: the planner's counts (`models.params`) are the program's."""
    s = _scenario(name)
    prog = transformer_program(s)
    counts = transformer_params(s.model, s.parallel.tensor, s.parallel.sequence_parallel)
    assert (counts.embedding, counts.layer, counts.head, counts.output) == (
        prog.block("embed").params, prog.block("layer").params, prog.block("head").params,
        prog.block("head").tied_params)


def test_gpt_layer_count_is_the_closed_form():
    """12h^2 + 13h per GPT layer at t = 1 (Narayanan et al. 2021, Sec. 5.1, Eq. 2), h/t
    shards of the matrices and column-parallel biases at t = 4, 12h^2/t + 7h/t + 6h (the
    norms and the row-parallel biases whole)."""
    s = _scenario("gpt3-175b-1024-a100")
    h = s.model.hidden_size
    assert transformer_params(s.model).layer == 12 * h * h + 13 * h
    assert transformer_params(s.model, 4).layer == 12 * h * h // 4 + 7 * h // 4 + 6 * h
