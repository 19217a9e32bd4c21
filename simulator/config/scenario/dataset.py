"""MindSpore's `dataset_strategy` / `full_batch` (set_auto_parallel_context,
mindspore/python/mindspore/context.py; seeds mindspore-other-features.md "Dataset
Splitting"): how each device loads the dataset's columns (the model's inputs and labels).

    parallel.dataset_strategy: data_parallel   MindSpore dataset_strategy="data_parallel",
                                                full_batch=False: dim 0 split over every device
    parallel.dataset_strategy: full_batch      dataset_strategy="full_batch", full_batch=True:
                                                every device loads the whole batch
    parallel.dataset_strategy: [[1,1,2,2],[1]]  dataset_strategy=((1,1,2,2),(1,)): per column
                                                the slices of each dim (a large image split
                                                along H/W, each device reading one tile)
    parallel.full_batch: true | false           full_batch=True | False (the older key)

Without either key each input is loaded as its first operator reads it (what MindSpore asks
the user to configure for model-parallel inputs: a dataset strategy equal to the first
operator's in_strategy), so no redistribution runs at the input. A loaded layout other than
the one the operators read is redistributed by the planner like any tensor; the loaded batch
stays in device memory for the step. Operator graphs only (mlp, resnet, graph): a
transformer's data loader is Megatron's (each data-parallel rank reads its own samples and
the tensor-parallel ranks the same ones), and its token ids are kilobytes.
"""

from __future__ import annotations

from collections.abc import Iterator

from simulator.config.scenario.schema import ParallelSpec, Scenario

__all__ = ["dataset_choice", "dataset_problems"]

Problem = tuple[str, str]
Strategy = str | list[list[int]]


def dataset_choice(p: ParallelSpec) -> tuple[str, Strategy] | None:
    """(the key the scenario gave, the dataset strategy it means), None when neither key is
    given."""
    if p.dataset_strategy is not None:
        return "parallel.dataset_strategy", p.dataset_strategy
    if p.full_batch is not None:
        return "parallel.full_batch", "full_batch" if p.full_batch else "data_parallel"
    return None


def dataset_problems(s: Scenario) -> Iterator[Problem]:
    """The two keys disagreeing, or either on a model that loads its data otherwise (a
    transformer)."""
    p = s.parallel
    if p.dataset_strategy is not None and p.full_batch is not None:
        implied = "full_batch" if p.full_batch else "data_parallel"
        if p.dataset_strategy != implied:
            yield "parallel.full_batch", (
                f"{str(p.full_batch).lower()} means dataset_strategy {implied}, but "
                f"parallel.dataset_strategy is {p.dataset_strategy} (give one of the two)")
    choice = dataset_choice(p)
    if choice is not None and not s.model.loads_dataset_strategy:
        yield choice[0], (
            "applies to operator graphs (mlp, resnet, graph); a transformer loads its data "
            "as Megatron's data loader does (each data-parallel rank its own samples, the "
            "tensor-parallel ranks the same ones): remove the key")
