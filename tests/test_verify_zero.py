"""`verify` executes each optimizer-sharding level as the lowering times it (issue 10 item
2): ZeRO-1 reduce-scatters the accumulated gradients once and all-gathers the updated
parameters; ZeRO-2 reduce-scatters every micro-batch's gradients; ZeRO-3 keeps only shards
and all-gathers the parameters before every micro-batch, with no gather after the step. A
skipped gather fails it."""

from __future__ import annotations

import pytest

from simulator.api import load_scenario
from simulator.models.cases import build_case
from simulator.numeric.execution import Faults
from simulator.numeric.verify import verify_case
from simulator.simulation.verify import verify_scenario


@pytest.fixture(scope="module", params=["verify-tiny-dp8", "verify-tiny-dp2-tp4-sp"])
def runs(request):
    out = {}
    for level in range(4):
        sc = load_scenario(request.param, [f"parallel.optimizer_shard={level}"]).scenario
        out[level] = verify_scenario(sc)
    return out


def test_every_level_computes_what_one_device_does(runs):
    assert all(r.ok for r in runs.values()), {k: r.notes for k, r in runs.items()}


def test_the_levels_run_their_own_collectives(runs):
    c = {level: r.collectives for level, r in runs.items()}
    assert len({tuple(sorted(v.items())) for v in c.values()}) == 4  # four distinct runs
    if "all_gather" in c[0]:  # tensor and sequence parallel add their own; counted below
        return  # on the pure data-parallel case
    m = 2  # micro-batches verify runs per replica
    assert c[0] == {"all_reduce": c[0]["all_reduce"]}
    params = c[0]["all_reduce"]  # one data-parallel reduction per parameter
    assert c[1] == {"reduce_scatter": params, "all_gather": params}
    assert c[2] == {"reduce_scatter": m * params, "all_gather": params}
    assert c[3] == {"reduce_scatter": m * params, "all_gather": m * params}


def test_a_skipped_parameter_gather_fails_zero3():
    sc = load_scenario("verify-tiny-dp8", ["parallel.optimizer_shard=3"]).scenario
    case = build_case(sc)
    good = verify_case(case, shard_optimizer=3)
    bad = verify_case(case, shard_optimizer=3, faults=Faults(skip_param_gather=True))
    assert good.ok and not bad.ok
