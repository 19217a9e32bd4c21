"""Data-parallel gradient reduction and parameter gathering: one strategy per optimizer-
sharding level (ZeRO, Rajbhandari et al. 2020; MindSpore optimizer parallel), each emitting
its collectives on a device's `dp` stream.

- stage 0 (`Replicated`): the gradient buckets of the last micro-batch are all-reduced as
  its backward produces them (PyTorch DDP, Megatron-LM `--overlap-grad-reduce`);
- stage 1 (`ShardedStates`): the buckets are reduce-scattered; after the optimizer step the
  updated parameters are all-gathered, or with `overlap.param_gather` bucket by bucket under
  the next step's first forward, each forward piece waiting for the bucket holding its
  parameters (Megatron-Core's forward pre-hook);
- stage 2 (`ShardedGradients`): as stage 1, and the sharded gradients are reduce-scattered
  after every micro-batch;
- stage 3 (`ShardedParameters`, ZeRO-3 / PyTorch FSDP): parameters stay sharded; each unit
  (the embedding, each layer, the head: FSDP's wrap units, Zhao et al. 2023, Sec. 3) is
  all-gathered right before its forward and again before its backward, prefetched one unit
  ahead (the gather of unit k+1 waits for unit k-1's compute, so at most two units are
  whole at once: FSDP's forward/backward prefetch with limit_all_gathers), held in memory
  until its compute ends; each unit's gradient is reduce-scattered as soon as its backward
  ends, every micro-batch, under the backward of the units before it, on a stream of its
  own (FSDP's post-backward stream) that shares the device's link with the gathers. A
  recompute pass gathers its chunk again, unit by unit (two units whole at most, held until
  the backward ends); with
  `parallel.recompute_comm.optimizer: false` (MindSpore's parallel_optimizer_comm_recompute
  false) it gathers nothing and the forward's gathered units stay whole until the backward
  ends instead (one gather per micro-batch, held from forward to backward).
With one data-parallel rank nothing is emitted (`NoDataParallel`).

`parallel.mode: parameter_server` (`ParameterServer`) replaces the collectives: the last
micro-batch's gradient buckets are pushed to the servers as the backward produces them, the
servers sum and update (the workers run no optimizer and hold no optimizer states), and the
workers pull the updated parameters (closed forms: simulator/cost/parameter_server.py).

The strategies: stages 0-2 in `lower.data_parallel`, stage 3 in `lower.zero3`, the
parameter server in `lower.parameter_server`; `strategy_for` picks one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from simulator.lower.data_parallel import (
    DataParallel,
    NoDataParallel,
    ShardedGradients,
    ShardedStates,
)
from simulator.lower.parameter_server import ParameterServer
from simulator.lower.zero3 import ShardedParameters

if TYPE_CHECKING:
    from simulator.lower.lowering import Lowering

__all__ = ["STRATEGIES", "strategy_for"]


STRATEGIES: dict[int, type[DataParallel]] = {0: DataParallel, 1: ShardedStates,
                                             2: ShardedGradients, 3: ShardedParameters}


def strategy_for(low: Lowering) -> DataParallel:
    """The reduction strategy of the scenario's `parallel.optimizer_shard` level (or of
    its parameter servers)."""
    if low.par.mode == "parameter_server":
        return ParameterServer(low)
    if low.ranks.data == 1:
        return NoDataParallel(low)
    return STRATEGIES[low.par.optimizer_shard](low)
