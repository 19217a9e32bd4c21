"""DTensor's own redistributions (tests/data/dtensor_redistributions.yaml: every case of
PyTorch's test/distributed/tensor/test_redistribute.py with left-to-right shard order, the
uneven ones included) through shardsim's redistribution planner (issue 26): none is
unsupported, and none moves more bytes than DTensor's own plan would send.

DTensor's plan is recomputed here from its documented algorithm, not its code
(torch/distributed/tensor/_redistribute.py, `_gen_transform_infos_non_cached`, the greedy
default): on a 1-D mesh one transform; on an N-D mesh, when the source shards anything,
first from the innermost mesh dim outwards, a target Shard(d) whose tensor dim d is not
sharded by the same outer mesh dims in the current and the target placements becomes
Replicate (nested sharding cleared first), then from the outermost dim inwards every mesh
dim still differing is transformed to its target. Each transform is one collective of the
mesh dim's n devices on the device's (largest, torch.chunk) block, padded as DTensor pads
uneven shards: Shard -> Replicate an all_gather of n padded chunks, Partial -> Replicate an
all_reduce, Partial -> Shard a reduce_scatter of the block padded to n chunks, Shard(d) ->
Shard(e) an all_to_all of the block padded to n chunks on e; Replicate -> Shard / Partial
local. Bytes are what one device sends with a ring (the nccl-tests bus factor times the
nccl-tests buffer: `simulator.sharding.redist_steps.moved_bytes`' measure)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from simulator.sharding.layout import Layout
from simulator.sharding.mesh import Mesh
from simulator.sharding.placement import B, Partial, Placement, Shard, parse_placement
from simulator.sharding.redist_steps import plan_cost
from simulator.sharding.redistribute import plan_redistribution

ROWS = yaml.safe_load((Path(__file__).parent / "data" /
                       "dtensor_redistributions.yaml").read_text())
ITEMSIZE = 4  # float32, as the tests' torch.randn


def _block(shape: tuple[int, ...], mesh: tuple[int, ...], placements: list[Placement]
           ) -> list[int]:
    """The largest local block (rank 0's): each mesh dim, outermost first, chunks the dim
    it shards into ceil(size / n) (torch.chunk)."""
    block = list(shape)
    for n, p in zip(mesh, placements, strict=True):
        if isinstance(p, Shard):
            block[p.dim] = -(-block[p.dim] // n)
    return block


def _padded(block: list[int], dim: int, n: int) -> list[int]:
    out = list(block)
    out[dim] = n * -(-out[dim] // n)
    return out


def dtensor_transforms(mesh: tuple[int, ...], src: list[Placement], dst: list[Placement]
                       ) -> list[tuple[int, Placement, Placement]]:
    """(mesh dim, current, target) of each transform of DTensor's default plan."""
    cur = list(src)
    out: list[tuple[int, Placement, Placement]] = []

    def move(i: int, target: Placement) -> None:
        if cur[i] != target:
            out.append((i, cur[i], target))
            cur[i] = target

    if len(mesh) > 1 and math.prod(n for n, p in zip(mesh, src)
                                   if isinstance(p, Shard)) > 1:
        for i in reversed(range(len(mesh))):
            target = dst[i]
            if isinstance(target, Shard):
                now = [j for j in range(i) if cur[j] == target]
                want = [j for j in range(i) if dst[j] == target]
                if now != want:
                    target = B
            move(i, target)
    for i in range(len(mesh)):
        move(i, dst[i])
    return out


def dtensor_bytes(mesh: tuple[int, ...], shape: tuple[int, ...], src: list[Placement],
                  dst: list[Placement]) -> float:
    """Bytes one device sends in DTensor's plan (module docstring)."""
    cur, total = list(src), 0.0
    for i, a, b in dtensor_transforms(mesh, src, dst):
        n, block = mesh[i], _block(shape, mesh, cur)
        size = math.prod(block) * ITEMSIZE
        if isinstance(a, Shard) and b == B:
            total += (n - 1) * size  # (n-1)/n of the n padded chunks gathered
        elif isinstance(a, Partial) and b == B:
            total += 2 * (n - 1) / n * size
        elif isinstance(b, Shard) and a != B:  # reduce_scatter or all_to_all
            total += (n - 1) / n * math.prod(_padded(block, b.dim, n)) * ITEMSIZE
        cur[i] = b
    return total


def _case(row: dict) -> tuple[Mesh, tuple[int, ...], Layout, Layout, tuple[int, ...],
                              list[Placement], list[Placement]]:
    sizes = tuple(row["mesh"])
    mesh = Mesh.of(**{f"m{i}": n for i, n in enumerate(sizes)})
    src = [parse_placement(p) for p in row["src"]]
    dst = [parse_placement(p) for p in row["dst"]]
    return mesh, tuple(row["shape"]), Layout(tuple(src)), Layout(tuple(dst)), sizes, src, dst


def _uneven(row: dict) -> bool:
    _, shape, src, dst, sizes, _, _ = _case(row)
    return any(isinstance(p, Shard) and b[p.dim] % n
               for layout in (src, dst) for n, p, b in
               zip(sizes, layout.placements,
                   [_block(shape, sizes[:k], list(layout.placements[:k]))
                    for k in range(len(sizes))]))


def test_the_table_holds_dtensor_s_cases_uneven_ones_included():
    assert len(ROWS) == 221
    assert sum(r["test"] == "test_multi_dim_mesh" for r in ROWS) == 16 * 9
    assert sum(_uneven(r) for r in ROWS) == 35  # a dim its mesh axes do not divide


def test_the_reference_is_dtensor_s_documented_plan():
    """The comment counts of DTensor's test_redistribute_shard_dim_multi_dim_mesh: e.g.
    (S0, S1, S2) -> (S2, S1, S0) is "2: S2 -> R, 0: S1 -> S2" in its own words: mesh dim 2
    gathers, mesh dim 0 moves its shard, and mesh dim 2 slices locally."""
    s = [Shard(0), Shard(1), Shard(2)]
    d = [Shard(2), Shard(1), Shard(0)]
    assert dtensor_transforms((2, 2, 2), s, d) == [(2, Shard(2), B), (0, Shard(0), Shard(2)),
                                                   (2, B, Shard(0))]
    # (S0, S0) -> (R, S0): the nested shard cleared from the inside out, then re-sliced
    assert dtensor_transforms((2, 2), [Shard(0), Shard(0)], [B, Shard(0)]) == [
        (1, Shard(0), B), (0, Shard(0), B), (1, B, Shard(0))]


@pytest.mark.parametrize("row", ROWS, ids=[f"{i}-{r['test']}" for i, r in enumerate(ROWS)])
def test_every_dtensor_redistribution_is_planned_with_no_more_bytes(row):
    mesh, shape, src, dst, sizes, s, d = _case(row)
    steps = plan_redistribution(src, dst, shape, mesh, ITEMSIZE)  # (raises if unsupported)
    ours = plan_cost(steps, mesh)
    theirs = dtensor_bytes(sizes, shape, s, d)
    assert ours <= theirs * (1 + 1e-12) + 1e-9, (row, [str(x) for x in steps], theirs)
