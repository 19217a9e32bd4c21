"""The H/W split of a convolution (spatial parallelism): the split Conv2D with its halo
exchange equals one device forward and backward on every split of y and x, a missing halo
breaks it (kernel and `verify`), the halo bytes per device follow the closed form and are
priced as point-to-point messages on the axes that split the image, and sharding
propagation sees the split and its price."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import yaml

from simulator.config.hardware import load_profile
from simulator.config.resources import resolve_yaml
from simulator.config.scenario import parse_scenario
from simulator.graph.graph import Graph, GraphBuilder
from simulator.graph.ops import halo
from simulator.models.cases import build_case
from simulator.numeric.rulecheck import check_signature
from simulator.numeric.verify import verify_case
from simulator.sharding.mesh import Mesh
from simulator.sharding.notation import from_axis_choices, from_mindspore
from simulator.sharding.plan import Strategy, build_plan
from simulator.sharding.propagate.search import build_problem
from simulator.simulation.simulate import simulate
from simulator.simulation.verify import verify_scenario


def _bundled(name: str, overrides=()):
    path = resolve_yaml(name, "scenarios")
    return parse_scenario(yaml.safe_load(path.read_text()), str(path), list(overrides))


def _conv(x=(2, 3, 8, 12), w=(4, 3, 3, 5)) -> Graph:
    g = GraphBuilder()
    g.op("Conv2D", [g.tensor("x", x, "input"), g.tensor("w", w, "parameter")], "y")
    return g.build()


SPLITS = [({"a": 2}, {"a": "y"}), ({"a": 4}, {"a": "y"}), ({"a": 4}, {"a": "x"}),
          ({"a": 2, "b": 2}, {"a": "y", "b": "x"}), ({"a": 2, "b": 4}, {"a": "n", "b": "y"}),
          ({"a": 2, "b": 2}, {"a": "c", "b": "x"}), ({"a": 2, "b": 2}, {"a": "y", "b": "y"})]


@pytest.mark.parametrize("axes,choices", SPLITS)
def test_split_convolution_equals_one_device(axes, choices):
    """Rows, columns, both (corners through the two exchanges), the rows over two axes,
    and with the batch or the input channels split beside them: output, dx, dw."""
    graph = _conv()
    mesh = Mesh.of(**axes)
    sig = from_axis_choices(graph.labels(graph.ops[0]), mesh, choices)
    check = check_signature(graph, mesh, sig)
    assert check.worst < 1e-12, check


def test_a_missing_halo_breaks_the_split_convolution(monkeypatch):
    """No exchange: each device zero-pads its own tile, the naive split's error."""
    graph = _conv()
    mesh = Mesh.of(a=2)
    sig = from_axis_choices(graph.labels(graph.ops[0]), mesh, {"a": "y"})
    monkeypatch.setattr(halo, "halo_width", lambda k: 0)
    assert check_signature(graph, mesh, sig).worst > 1e-2


def _halo_steps(mesh: Mesh, strategy, x=(2, 6, 16, 24), w=(4, 6, 5, 3)):
    graph = _conv(x, w)
    op = graph.ops[0]
    sig, _ = from_mindspore(graph.labels(op), mesh, strategy)
    planned = dataclasses.replace(op, strategy=Strategy(signature=sig))
    plan = build_plan(Graph(graph.tensors, (planned,)), mesh, 4)
    p = plan.ops[0]
    return {phase: [(mesh.names[s.axis], s.kind, s.bytes) for s in plan.internal_steps(p, phase)]
            for phase in ("fwd", "bwd")}


def test_halo_bytes_of_a_row_split_follow_the_closed_form():
    """H over 4 devices: an interior device sends kh//2 rows of its W x C x N tile to each
    of its two neighbours, 2 (kh//2) W C N e bytes, forward and backward alike."""
    steps = _halo_steps(Mesh.of(h=4), [[1, 1, 4, 1], [1, 1, 1, 1]])
    n, c, w, kh, e = 2, 6, 24, 5, 4
    want = 2 * (kh // 2) * w * c * n * e
    assert steps["fwd"] == steps["bwd"] == [("h", "send_recv", want)]


def test_two_devices_have_one_neighbour_and_columns_carry_the_corners():
    """H over 2 (one neighbour each) and W over 2: the column halo spans the tile's rows
    plus the two row halos received first (the corners)."""
    steps = _halo_steps(Mesh.of(h=2, w=2), [[1, 1, 2, 2], [1, 1, 1, 1]])
    n, c, kh, kw, e = 2, 6, 5, 3, 4
    h_local, w_local = 16 // 2, 24 // 2
    rows = 1 * (kh // 2) * w_local * c * n * e
    cols = 1 * (kw // 2) * (h_local + 2 * (kh // 2)) * c * n * e
    assert steps["fwd"] == [("h", "send_recv", rows), ("w", "send_recv", cols)]


def test_an_unsplit_image_exchanges_nothing():
    steps = _halo_steps(Mesh.of(dp=2), [[2, 1, 1, 1], [1, 1, 1, 1]])
    assert steps == {"fwd": [], "bwd": []}


def _closed_form_halo(graph: Graph, split: dict[str, int], e: int) -> float:
    """Both passes of every convolution of a graph split n ways over the batch and n_y x n_x
    over rows and columns."""
    total = 0.0
    for op in graph.ops:
        if op.type != "Conv2D":
            continue
        (nb, c, h, w), (_, _, kh, kw) = graph.shapes(op)
        nb, hl, wl = nb // split["n"], h // split["y"], w // split["x"]
        rows = min(2, split["y"] - 1) * (kh // 2) * wl * c * nb * e
        cols = min(2, split["x"] - 1) * (kw // 2) * (hl + 2 * (kh // 2)) * c * nb * e
        total += 2 * (rows + cols)
    return total


def test_run_prices_the_halo_as_send_recv_on_the_image_axes():
    """The bundled verify scenario (batch 2 x rows 2 x columns 2): `run` reports the halo
    bytes of both convolutions, both passes, under `send_recv`."""
    s = _bundled("hw-split-tiny-verify")
    result = simulate(s, load_profile(s.hardware))
    graph = build_case(s).sharded
    want = _closed_form_halo(graph, {"n": 2, "y": 2, "x": 2}, 4)
    assert dict(result.comm_bytes)["send_recv"] == pytest.approx(want)


def test_large_image_scenario_keeps_the_split_and_prices_every_halo():
    """2 images of 4096 x 4096 on 4 x 2 H100s: propagation keeps every convolution on its
    tiles (the halo is far cheaper than gathering the image), so the halo bytes are those of
    the three convolutions in closed form."""
    s = _bundled("seed-hw-split-large-images")
    result = simulate(s, load_profile(s.hardware))
    from simulator.models.model_graph import planned_graph

    graph, _ = planned_graph(s)
    assert dict(result.comm_bytes)["send_recv"] == pytest.approx(
        _closed_form_halo(graph, {"n": 1, "y": 4, "x": 2}, 2))


def test_verify_passes_with_the_halo_and_fails_without_it(monkeypatch):
    s = _bundled("hw-split-tiny-verify")
    good = verify_scenario(s)
    assert good.ok, [c for c in good.checks if not c.ok]
    assert good.collectives["send_recv"] == 8  # 2 convolutions x 2 axes x 2 passes
    case = build_case(s)
    monkeypatch.setattr(halo, "halo_width", lambda k: 0)
    bad = verify_case(case)
    assert not bad.ok
    failed = {c.tensor for c in bad.checks if not c.ok}
    assert "c1" in failed and "conv1.w.grad" in failed


def test_propagation_sees_the_spatial_split_and_its_halo():
    """An unconfigured convolution may split y and x; each such candidate costs its halo
    bytes (both passes) on top of its inputs, a batch split only its inputs."""
    x, w = (4, 6, 16, 24), (4, 6, 5, 3)
    graph = _conv(x, w)
    mesh = Mesh.of(h=2, w=2)
    problem = build_problem(graph, mesh, 4)
    view = graph.labels(graph.ops[0])
    cands = problem.candidates[0]
    tile = from_axis_choices(view, mesh, {"h": "y", "w": "x"})
    batch = from_axis_choices(view, mesh, {"h": "n", "w": "n"})
    inputs = 4 * (math.prod(x) // 4 + math.prod(w))
    halo_fb = 2 * 4 * 6 * 4 * (1 * 2 * 12 + 1 * 1 * (8 + 4))  # e C N (rows + cols), 2 passes
    assert problem.node[0][cands.index(tile)] == pytest.approx(inputs + halo_fb)
    assert problem.node[0][cands.index(batch)] == pytest.approx(inputs)
    steps = _halo_steps(mesh, [[1, 1, 2, 2], [1, 1, 1, 1]], x, w)
    assert math.isclose(halo_fb, sum(s[2] for phase in steps.values() for s in phase))


def test_halo_of_one_neighbour_side():
    assert [halo.neighbours(n) for n in (1, 2, 3, 8)] == [0, 1, 2, 2]
    assert np.array_equal([halo.halo_width(k) for k in (1, 3, 5, 7)], [0, 1, 2, 3])
