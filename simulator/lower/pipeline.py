"""Pipeline schedules: the order in which one pipeline stage runs its forward and backward
passes. A schedule is a pure function `(stage, stages, micro_batches, chunks) -> steps`,
registered by name in SCHEDULES; each step is (kind 'F' | 'B' | 'W', micro-batch, virtual
stage), where virtual stage = chunk * stages + stage (Megatron-LM's model-chunk numbering).

- gpipe: all forwards, then all backwards (Huang et al. 2019, "GPipe", Fig. 2c).
- 1f1b: min(p - i - 1, m) warm-up forwards on stage i, then one forward / one backward,
  then the cool-down backwards (Narayanan et al. 2021, Sec. 2.2.1, Fig. 4 top; PipeDream-
  Flush). With uniform stages both take (m + p - 1)(t_f + t_b): bubble (p-1)/(m+p-1).
- interleaved_1f1b: v model chunks per device (Narayanan et al. 2021, Sec. 2.2.2, Fig. 4
  bottom), ordered as Megatron-LM's forward_backward_pipelining_with_interleaving.
- zb_h1: 1F1B's order of F and B, with each backward split into B (the input gradient: what
  the previous stage waits for) and W (the weight gradients, `ComputeSpec.weight_grad`);
  stage i runs each W i micro-batches after its B, the last i after its last B, where
  1F1B's cool-down leaves the stage idle (Qi et al. 2023, "Zero Bubble Pipeline
  Parallelism", arXiv 2401.10241, Sec. 3.1, Fig. 3 top: ZB-H1; the authors' hand schedule
  `get_hand_schedule(warmup_c=1)` in sail-sg/zero-bubble-pipeline-parallelism, branch
  arxiv, megatron/core/pipeline_parallel/efficiency.py). With uniform stages, free
  communication, m >= p and T_W <= min(T_F, T_B) it takes m(T_F + T_B + T_W) plus the
  bubble (p-1)(T_F + T_B - T_W), where 1F1B's is (p-1)(T_F + T_B + T_W) (Sec. 3.1).
  Stage i holds 1F1B's p - i micro-batches' activations plus what its i deferred W's keep
  (their GEMMs' inputs and output gradients, `lower.lowering`): 1F1B's peak as long as
  that is less than i micro-batches' activations (Sec. 3.1), more where it is not.
- zb_h2: the same with 2(p - i - 1) warm-up forwards (Sec. 3.1, Fig. 3 bottom: ZB-H2,
  `get_hand_schedule(warmup_c=2)`): stage i holds up to 2(p - i) - 1 micro-batches'
  activations, and the extra forwards fill 1F1B's warm-up bubble; with uniform stages,
  free communication and m >= 2p its bubble is (p-1)(T_F + T_B - 2 T_W) (the closed form
  their `arxiv_bubble_rates` asserts), half a W per stage less than ZB-H1's.
- dualpipe: DeepSeek-V3's bidirectional schedule (`lower.dualpipe`): each device holds two
  stages, one per direction, micro-batches enter from both ends, and forward / backward
  pairs of the two directions overlap their communication. Its steps use more kinds:
  `F>` (a forward whose send leaves after the next pass), `Fp` / `BWp` (an overlapped
  forward-backward pair) and `BW` (a full backward, input and weight gradients together).
"""

from __future__ import annotations

from collections.abc import Callable

from simulator.errors import InputError
from simulator.lower.dualpipe import dualpipe_steps

__all__ = ["Step", "SCHEDULES", "schedule_steps", "steady_window", "STEADY_PERIODS"]

Step = tuple[str, int, int]  # (kind 'F' | 'B' | 'W' | dualpipe's, micro-batch, virtual stage)
Schedule = Callable[[int, int, int, int], list[Step]]


def _gpipe(stage: int, stages: int, micro: int, chunks: int) -> list[Step]:
    return ([("F", j, stage) for j in range(micro)] + [("B", j, stage) for j in range(micro)])


def _one_f_one_b(stage: int, stages: int, micro: int, chunks: int) -> list[Step]:
    warmup = min(stages - stage - 1, micro)
    steps: list[Step] = [("F", j, stage) for j in range(warmup)]
    for j in range(micro - warmup):
        steps += [("F", warmup + j, stage), ("B", j, stage)]
    steps += [("B", j, stage) for j in range(micro - warmup, micro)]
    return steps


def _interleaved(stage: int, stages: int, micro: int, chunks: int) -> list[Step]:
    p, v = stages, chunks
    total = micro * v

    def step(kind: str, k: int) -> Step:
        chunk = (k % (p * v)) // p
        if kind == "B":
            chunk = v - 1 - chunk
        mb = (k // (p * v)) * p + k % p
        return kind, mb, chunk * p + stage

    warmup = total if micro == p else min((p - stage - 1) * 2 + (v - 1) * p, total)
    steps = [step("F", k) for k in range(warmup)]
    for j in range(total - warmup):
        steps += [step("F", warmup + j), step("B", j)]
    steps += [step("B", k) for k in range(total - warmup, total)]
    return steps


def _zero_bubble(warmup_c: int) -> Schedule:
    """The zero-bubble hand schedules of Qi et al. 2023 (Sec. 3.1, `get_hand_schedule` of
    their repository): stage i runs c(p - i - 1) warm-up forwards, then per micro-batch j
    its next forward (while any is left) and B_j, and a W after B_j once
    warm-up + j >= c(p - 1), in micro-batch order; the W's it deferred follow its last B.
    c = 1 is ZB-H1 (1F1B's order of F and B); c = 2 is ZB-H2."""

    def schedule(stage: int, stages: int, micro: int, chunks: int) -> list[Step]:
        warmup = min((stages - stage - 1) * warmup_c, micro)
        steps: list[Step] = [("F", j, stage) for j in range(warmup)]
        done = 0  # W passes emitted
        for j in range(micro):
            if warmup + j < micro:
                steps.append(("F", warmup + j, stage))
            steps.append(("B", j, stage))
            if warmup + j >= (stages - 1) * warmup_c:
                steps.append(("W", done, stage))
                done += 1
        return steps + [("W", j, stage) for j in range(done, micro)]

    return schedule


SCHEDULES: dict[str, Schedule] = {"gpipe": _gpipe, "1f1b": _one_f_one_b,
                                  "interleaved_1f1b": _interleaved, "zb_h1": _zero_bubble(1),
                                  "zb_h2": _zero_bubble(2), "dualpipe": dualpipe_steps}


def _warmup_1f1b(stages: int, chunks: int) -> tuple[int, int]:
    """(period in micro-batches, most warm-up steps of any stage) of 1F1B: every stage
    repeats (F, B) once per micro-batch after at most p - 1 warm-up forwards."""
    return 1, stages - 1


def _warmup_interleaved(stages: int, chunks: int) -> tuple[int, int]:
    """Interleaved 1F1B repeats its pattern every p micro-batches (p * v forward steps, as
    `_interleaved` numbers them) after at most 2(p - 1) + (v - 1)p warm-up forwards."""
    return stages, 2 * (stages - 1) + (chunks - 1) * stages


# schedules whose steps, past the warm-up and before the cool-down, repeat one period:
# adding `period` micro-batches inserts one more period on every stage and changes nothing
# else. GPipe has no such period: its backward phase starts after every forward, so each
# added micro-batch moves all of the backwards (two insertion points).
def _warmup_zb_h1(stages: int, chunks: int) -> tuple[int, int]:
    """ZB-H1 repeats (F, B, W) once per micro-batch after 1F1B's p - 1 warm-up forwards
    and up to p - 1 micro-batches more whose W's are still deferred (`_zb_h1`)."""
    return 1, 2 * (stages - 1)


STEADY_PERIODS: dict[str, Callable[[int, int], tuple[int, int]]] = {
    "1f1b": _warmup_1f1b, "interleaved_1f1b": _warmup_interleaved, "zb_h1": _warmup_zb_h1}
STEADY_PERIODS_KEPT = 4  # steady periods the shortened run keeps on every stage


def steady_window(name: str, stages: int, micro: int, chunks: int) -> tuple[int, int] | None:
    """(micro-batches of a shortened run, period in micro-batches) for a schedule whose
    steady state repeats: the shortened run keeps the warm-up, STEADY_PERIODS_KEPT periods
    on every stage and the cool-down, and `micro` differs from it by whole periods. None
    when the schedule has no steady period or `micro` is too small to gain anything (the
    shortened run and the one with a period more would not simulate fewer micro-batches
    than `micro`)."""
    rule = STEADY_PERIODS.get(name)
    if rule is None:
        return None
    period, warmup = rule(stages, chunks)
    need = -(-(warmup + STEADY_PERIODS_KEPT * period * chunks) // chunks)  # micro-batches
    reduced = need + (micro - need) % period
    return (reduced, period) if 2 * reduced + period < micro else None


def schedule_steps(name: str, stage: int, stages: int, micro: int, chunks: int,
                   source: str = "<scenario>") -> list[Step]:
    """The steps of pipeline stage `stage` under schedule `name`."""
    if name not in SCHEDULES:
        raise InputError(source, "parallel.schedule",
                         f"'{name}' is not a known schedule (known: {', '.join(SCHEDULES)})")
    if name == "interleaved_1f1b" and chunks > 1 and micro % stages:
        raise InputError(source, "training.global_batch_size",
                         f"interleaved_1f1b needs micro-batches ({micro}) to be a multiple of "
                         f"parallel.pipeline ({stages}), as in Megatron-LM")
    return SCHEDULES[name](stage, stages, micro, chunks)
