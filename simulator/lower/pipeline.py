"""Pipeline schedules: the order in which one pipeline stage runs its forward and backward
passes. A schedule is a pure function `(stage, stages, micro_batches, chunks) -> steps`,
registered by name in SCHEDULES; each step is (kind 'F' | 'B', micro-batch, virtual stage),
where virtual stage = chunk * stages + stage (Megatron-LM's model-chunk numbering).

- gpipe: all forwards, then all backwards (Huang et al. 2019, "GPipe", Fig. 2c).
- 1f1b: min(p - i - 1, m) warm-up forwards on stage i, then one forward / one backward,
  then the cool-down backwards (Narayanan et al. 2021, Sec. 2.2.1, Fig. 4 top; PipeDream-
  Flush). With uniform stages both take (m + p - 1)(t_f + t_b): bubble (p-1)/(m+p-1).
- interleaved_1f1b: v model chunks per device (Narayanan et al. 2021, Sec. 2.2.2, Fig. 4
  bottom), ordered as Megatron-LM's forward_backward_pipelining_with_interleaving.
"""

from __future__ import annotations

from collections.abc import Callable

from simulator.errors import InputError

__all__ = ["Step", "SCHEDULES", "schedule_steps", "steady_window", "STEADY_PERIODS"]

Step = tuple[str, int, int]  # (kind 'F' | 'B', micro-batch, virtual stage)
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


SCHEDULES: dict[str, Schedule] = {"gpipe": _gpipe, "1f1b": _one_f_one_b,
                                  "interleaved_1f1b": _interleaved}


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
STEADY_PERIODS: dict[str, Callable[[int, int], tuple[int, int]]] = {
    "1f1b": _warmup_1f1b, "interleaved_1f1b": _warmup_interleaved}
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
