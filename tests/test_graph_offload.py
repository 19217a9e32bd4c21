"""Offloading parameters and activations of mlp, resnet and graph models to the host
(issue 10 item 4; `schedule.offload` on the units of `schedule.graph_stages`): the bytes
over the host link per step in closed form, device memory down and the copies priced,
`verify` computing with the copies that came back (and failing on a lost or corrupted
copy), and the refusals of what is not modelled."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from simulator.config.hardware import load_profile
from simulator.config.resources import resolve_yaml
from simulator.config.scenario import parse_scenario
from simulator.errors import InputError
from simulator.numeric.execution import Faults
from simulator.simulation.simulate import simulate
from simulator.simulation.verify import verify_scenario

F32 = 4


def _bundled(name: str, *overrides: str):
    path = resolve_yaml(name, "scenarios")
    return parse_scenario(yaml.safe_load(path.read_text()), str(path), list(overrides))


def _mlp(layers: int, hidden: int, classes: int, mbs: int, micro: int, data: int = 4,
         pipeline: int = 1, hardware: str = "a100-80gb", split: list | None = None,
         **offload: Any):
    return parse_scenario({
        "name": "off", "hardware": hardware,
        "cluster": {"nodes": 1, "devices_per_node": data * pipeline},
        "model": {"type": "mlp", "layers": layers, "hidden_size": hidden,
                  "input_size": hidden, "num_classes": classes, "dtype": "fp32"},
        "training": {"global_batch_size": mbs * data * micro, "micro_batch_size": mbs},
        "parallel": {"data": data, "pipeline": pipeline, "offload": offload,
                     **({"pipeline_layers": split} if split else {})},
    }, "off.yaml")


def _run(s):
    return simulate(s, load_profile(s.hardware))


def _copied(result) -> dict:
    return dict(result.plan.extras)["offload_bytes_per_device"]


@pytest.mark.parametrize("layers, micro", [(3, 1), (4, 3)])
def test_bytes_over_the_host_link_closed_form(layers, micro):
    """An mlp of L layers (hidden h, classes c, b rows per device, fp32 e = 4 bytes, M
    micro-batches, data parallel). Its units are its layers (the classifier and the loss
    join the last); a unit's saved activations are its MatMul output and the ReLU output
    of the layer before (the first: its MatMul output only), and the last unit's stay on
    the device. Per micro-batch activation offload moves A = (2L - 3) b h e each way;
    parameter offload brings the P = L h^2 + h c weights up before every unit's forward
    and backward (2 P e) and takes the updated weights down after the step (P e)."""
    h, c, b = 16, 8, 8
    acts = (2 * layers - 3) * b * h * F32
    params = (layers * h * h + h * c) * F32
    got = {what: _copied(_run(_mlp(layers, h, c, b, micro, **{what: True})))
           for what in ("activations", "parameters")}
    assert got["activations"] == {"h2d": micro * acts, "d2h": micro * acts}
    assert got["parameters"] == {"h2d": micro * 2 * params, "d2h": params}
    both = _copied(_run(_mlp(layers, h, c, b, micro, activations=True, parameters=True)))
    assert both == {"h2d": micro * (acts + 2 * params), "d2h": micro * acts + params}


def test_pipelined_stage_moves_its_own_units():
    """Two stages of 2 layers each: the first stage offloads both its units' activations
    (b h + 2 b h per micro-batch; the second keeps its last unit's), the busiest device's
    parameter traffic is the later stage's 2 h^2 + h c weights (the classifier's with
    it)."""
    h, c, b, micro = 16, 8, 8, 4
    acts = _copied(_run(_mlp(4, h, c, b, micro, data=1, pipeline=2, split=[2, 2],
                             activations=True)))
    assert acts == {"h2d": micro * 3 * b * h * F32, "d2h": micro * 3 * b * h * F32}
    params = _copied(_run(_mlp(4, h, c, b, micro, data=1, pipeline=2, split=[2, 2],
                               parameters=True)))
    p = (2 * h * h + h * c) * F32
    assert params == {"h2d": micro * 2 * p, "d2h": p}


def _figures(s) -> tuple[float, float, float]:
    r = _run(s)
    return r.iteration_time_s, r.memory.peak_bytes, dict(r.breakdown_s)["offload_exposed"]


@pytest.mark.parametrize("off", ["parallel.offload.activations=false",
                                 "parallel.offload.parameters=false"])
def test_resnet_offload_lowers_the_peak_and_costs_time(off):
    """The bundled ResNet: each offload against the run without it, on A100's PCIe."""
    t0, m0, x0 = _figures(_bundled("offload-resnet-8-a100", off, "parallel.offload."
                                   + ("parameters" if "activations" in off else "activations")
                                   + "=false"))
    t1, m1, x1 = _figures(_bundled("offload-resnet-8-a100", off))
    assert m1 < m0 and t1 > t0 and x0 == 0 < x1


def test_mlp_parameter_offload_lowers_the_peak_and_costs_time():
    base = _mlp(8, 1024, 16, 32, 2)
    moved = _mlp(8, 1024, 16, 32, 2, parameters=True)
    (t0, m0, _), (t1, m1, x1) = _figures(base), _figures(moved)
    assert m1 < m0 and t1 > t0 and x1 > 0


@pytest.mark.parametrize("name", ["seed-a-weight-ops", "pipeline-graph-seed-c-8-cpu"])
def test_graph_offload_lowers_the_peak(name):
    """The seed graphs on CPU devices: their small copies hide under the compute (time
    not lower), the device holds less."""
    t0, m0, _ = _figures(_bundled(name))
    for what in ("activations", "parameters"):
        t1, m1, _ = _figures(_bundled(name, f"parallel.offload.{what}=true"))
        assert m1 < m0 and t1 >= t0


@pytest.mark.parametrize("sets, message", [
    (("parallel.recompute=full",), "parallel.offload.activations: true with "
     "parallel.recompute full is not simulated yet (allowed: recompute none)"),
    (("model.ops[3].attrs.recompute=true",), "parallel.offload.activations: true with "
     "model.ops[3].attrs.recompute true is not simulated yet (allowed: false, or no "
     "operator recomputed)"),
])
def test_offload_with_recompute_is_refused_by_name(sets, message):
    name = "recompute-graph-seed-a-ops" if "attrs" in sets[0] else "seed-a-weight-ops"
    with pytest.raises(InputError) as err:
        _bundled(name, "parallel.offload.activations=true",
                 *(s for s in sets if "attrs" not in s))
    assert str(err.value).endswith(message)


# ---- verify: the same tensors after their trips to the host ---------------------------------

def _moved(result) -> int:
    note = next(n for n in result.notes if n.startswith("offload ("))
    return int(note.split(": ")[1].split()[0])


def test_verify_moves_the_tensors_run_prices():
    """On 4 data-parallel ranks, of which verify runs 2 of the 4 micro-batches: the
    activations that go to the host are the (2L - 3) b h e bytes per rank and micro-batch
    `run` copies; the parameters make one trip per rank and micro-batch (`run` brings them
    up twice, for the forward and again for the backward)."""
    h, c, b = 16, 8, 8
    acts = verify_scenario(_mlp(3, h, c, b, 4, hardware="cpu-x86", activations=True))
    params = verify_scenario(_mlp(3, h, c, b, 4, hardware="cpu-x86", parameters=True))
    assert acts.ok and params.ok
    assert "2 of 4 micro-batches run" in acts.notes
    assert _moved(acts) == 4 * 2 * 3 * b * h * F32
    assert _moved(params) == 4 * 2 * (3 * h * h + h * c) * F32


@pytest.mark.parametrize("name, sets", [
    ("offload-resnet-8-a100", ("model.channels=8", "model.image_size=8",
                               "training.micro_batch_size=2",
                               "training.global_batch_size=64")),
    ("seed-a-weight-ops", ("parallel.offload.activations=true",
                           "parallel.offload.parameters=true")),
    ("pipeline-graph-seed-c-8-cpu", ("parallel.offload.activations=true",)),
])
def test_verify_offload_of_every_model_type_and_its_mutations(name, sets):
    s = _bundled(name, *sets)
    good = verify_scenario(s)
    assert good.ok and _moved(good) > 0
    for fault in ("drop", "corrupt"):
        assert not verify_scenario(s, Faults(offload_fault=fault)).ok
