"""Sharding propagation on the bundled propagation scenarios: the seconds to build the cost
tables (cold: every redistribution planned once) and to solve them with each search, the
plan's cost in bus + compute bytes, and whether each exact search agrees with the ILP.
It measures and never asserts: the exit status is always 0.

    python -m benchmarks.propagate_speed            (from the repo root)
"""

from __future__ import annotations

import time

import yaml

from simulator.config.resources import resolve_yaml
from simulator.config.scenario import parse_scenario
from simulator.config.scenario.schema import DTYPE_BYTES
from simulator.models.model_graph import written_graph
from simulator.sharding.propagate.search import build_problem
from simulator.sharding.propagate.solvers import NotATree, solve_dp, solve_greedy, solve_ilp

# (scenario, overrides): the last is issue 13's case, 16 devices as a 2x2x2x2 mesh
CASES = (("seed-a-propagate", []), ("seed-b-propagate", []), ("seed-c-propagate", []),
         ("seed-c-resnet-boundary", ["cluster.nodes=2", "parallel.mode=auto",
                                     "parallel.dataset_strategy=[[4,1,1,1],[4]]"]))
SEARCHES = {"ilp": solve_ilp, "ilp (no elimination)": lambda p: solve_ilp(p, reduce=False),
            "dynamic_programming": solve_dp, "sharding_propagation": solve_greedy}


def _timed(fn, *args):
    start = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - start


def main() -> None:
    print(f"{'scenario':<20} {'search':<22} {'seconds':>8} {'cost B':>10}  same as ilp")
    for name, overrides in CASES:
        path = resolve_yaml(name, "scenarios")
        s = parse_scenario(yaml.safe_load(path.read_text()), str(path), overrides)
        graph, mesh = written_graph(s)
        problem, build_s = _timed(build_problem, graph, mesh, DTYPE_BYTES[s.model.dtype])
        label = "seed-c 2x2x2x2 (#13)" if overrides else name
        print(f"{label:<20} {'(build tables)':<22} {build_s:8.3f}")
        best = problem.objective(solve_ilp(problem))
        for label, solver in SEARCHES.items():
            try:
                choice, secs = _timed(solver, problem)
            except NotATree:
                print(f"{'':<20} {label:<22} {'-':>8} {'-':>10}  (not chains or trees)")
                continue
            same = "yes" if problem.objective(choice) == best else "no"
            print(f"{'':<20} {label:<22} {secs:8.3f} {problem.cost(choice):10.0f}  {same}")


if __name__ == "__main__":
    main()
