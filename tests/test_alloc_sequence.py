"""The FSDP2 allocation sequence (`report.alloc_sequence`): closed forms of what it
allocates and frees, from a hand-made program."""

from __future__ import annotations

from simulator.cost.specs import ComputeSpec
from simulator.program.program import Block, Program
from simulator.report.alloc_sequence import fsdp2_sequence
from simulator.report.allocator_replay import replay

MIB = 1 << 20
W_A, W_B = 64 * 32, 16 * 32  # the layer's GEMM weights (n x k), elements
LAYER = W_A + W_B + 8  # and 8 more elements (a norm)
EMBED, HEAD = 1000, 2000
ELEMS = EMBED + 2 * LAYER + HEAD
SHARD = 1 / 4  # an FSDP degree of 4


def _program() -> Program:
    ops = (ComputeSpec("a", "gemm", 1.0, 1.0, "bf16", gemm_mnk=(128, 64, 32),
                       saved_bytes=7 * MIB),
           ComputeSpec("b", "gemm", 1.0, 1.0, "bf16", gemm_mnk=(128, 16, 32),
                       saved_bytes=11 * MIB))
    loss = (ComputeSpec("lm_head", "gemm", 1.0, 1.0, "bf16", gemm_mnk=(128, 500, 4)),
            ComputeSpec("ce", "softmax", 1.0, 1.0, "bf16", saved_bytes=40 * MIB))
    return Program((Block("embed", (), (), params=EMBED, pinned="first"),
                    Block("layer", ops, (), repeat=2, params=LAYER, saved_bytes=20 * MIB),
                    Block("head", loss, (), params=HEAD, pinned="last",
                          saved_bytes=40 * MIB, transient_bytes=80 * MIB)),
                   "bf16", grad_elem_bytes=4.0)


# FSDP2's layout (lower.state, state_layout fsdp2): the fp32 shards, the Adam moments, no
# gradient held before the backward makes it
STATIC = {"parameters": 4.0 * ELEMS * SHARD, "optimizer_states": 8.0 * ELEMS * SHARD,
          "framework_overhead": 999.0}
GRADS = 4.0 * ELEMS * SHARD  # the fp32 sharded gradients the reduce-scatters make


def _events(iterations: int = 2) -> list:
    return fsdp2_sequence(_program(), STATIC, iterations, shard=SHARD)


def _bytes(events: list, prefix: str) -> float:
    return sum(n for kind, key, n, _ in events if kind == "alloc" and key.startswith(prefix))


def test_states_are_the_fp32_shards_and_the_moments_come_with_the_first_step():
    ev = _events()
    assert _bytes(ev, "parameters:") == 4.0 * ELEMS * SHARD  # the fp32 shards, no bf16 one
    assert _bytes(ev, "optimizer_states:") == 0
    assert _bytes(ev, "moments:") == 8.0 * ELEMS * SHARD  # exp_avg + exp_avg_sq, once
    keys = [key for _, key, _, _ in ev]
    first_moment = next(i for i, k in enumerate(keys) if k.startswith("moments:"))
    assert first_moment > max(i for i, k in enumerate(keys[:first_moment])
                              if k.startswith("grad:"))


def test_each_step_makes_the_sharded_gradients_once_and_one_sqrt_list():
    for steps in (1, 2):
        ev = _events(steps)
        rs = [(key, n) for kind, key, n, stream in ev if kind == "alloc"
              and stream == "reduce_scatter"]
        assert sum(n for _, n in rs) == steps * GRADS
        assert _bytes(ev, "sqrt:") == steps * 4.0 * ELEMS * SHARD


def test_what_outlives_the_steps_is_the_optimizer_state():
    a = replay(_events())
    # every tensor but the fp32 shards and the moments is freed (12 B a sharded element,
    # each tensor rounded to 512 B)
    assert a.allocated == sum(-(-int(n) // 512) * 512 for kind, key, n, _ in _events()
                              if kind == "alloc" and key.startswith(
                                  ("parameters:", "moments:")))


def test_gathers_run_on_their_stream_and_the_root_is_gathered_whole_once_a_step():
    ev = _events(1)
    gathers = [(key, n, stream) for kind, key, n, stream in ev if kind == "alloc"
               and key.startswith("ag_out:")]
    assert all(stream == "all_gather" for _, _, stream in gathers)
    # the root (embedding and head) once, each layer in the forward and the backward
    assert [n for key, n, _ in gathers if key == "ag_out:root"] == [2.0 * (EMBED + HEAD)]
    assert len(gathers) == 1 + 2 * 2
    assert _bytes(ev, "loss:") == 80 * MIB and _bytes(ev, "saved:head") == 40 * MIB


def test_one_rank_gathers_nothing_and_the_logits_live_through_the_loss_forward():
    one = {k: v / SHARD for k, v in STATIC.items()}
    ev = fsdp2_sequence(_program(), one, 1, fp32_logits=True, shard=1.0)
    assert not [key for _, key, _, _ in ev if key.startswith(("ag_in:", "ag_out:"))]
    keys = [(kind, key) for kind, key, _, _ in ev]
    # the head's logits (its GEMM's m x n in bf16) and their fp32 copy around the loss's
    # kept tensor; the copy freed after it, the logits before the backward
    at = keys.index(("alloc", "saved:head3.1"))
    assert keys[at - 2:at + 3] == [("alloc", "logits"), ("alloc", "logits_fp32"),
                                   ("alloc", "saved:head3.1"), ("free", "logits_fp32"),
                                   ("free", "logits")]
    assert _bytes(ev, "logits_fp32") == 4.0 * 128 * 500
    assert _bytes(ev, "logits") == (2.0 + 4.0) * 128 * 500


def test_a_kept_last_block_stays_unsharded_from_its_forward_to_its_backward():
    ev = fsdp2_sequence(_program(), STATIC, 1, shard=SHARD, keep_last=True)
    keys = [(kind, key) for kind, key, _, _ in ev]
    # the second (last) layer, unit "layer2": gathered and copied out once, in the forward
    gathers = [key for kind, key in keys if kind == "alloc" and key.startswith("ag_out:")]
    assert gathers == ["ag_out:root", "ag_out:layer1", "ag_out:layer2", "ag_out:layer1"]
    made = keys.index(("alloc", "unsharded:layer2.0"))
    freed = keys.index(("free", "unsharded:layer2.0"))
    first_grad = keys.index(("alloc", "grad16:layer2.1"))
    assert made < keys.index(("alloc", "logits")) < first_grad < freed
    assert keys.count(("alloc", "unsharded:layer2.0")) == 1
    # its bytes: the layer's weights in bf16, alive the whole loss
    alive = sum(n for kind, key, n, _ in ev if kind == "alloc"
                and key.startswith("unsharded:layer2."))
    assert alive == 2.0 * (W_A + W_B + 8)
