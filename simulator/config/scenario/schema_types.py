"""Field types of the scenario schema: the bounded numbers every key is checked against
(each a range a real system could have) and the closed, frozen base model."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt

Dtype = Literal["fp32", "fp16", "bf16", "fp8"]
DTYPE_BYTES: dict[str, int] = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1}

PosInt = Annotated[StrictInt, Field(ge=1)]
NonNegInt = Annotated[StrictInt, Field(ge=0)]
PosFloat = Annotated[StrictFloat, Field(gt=0)]  # strict floats accept integers, not booleans

# Physical bounds: the range a real system could have, with margin (largest published model
# sizes are ~10^2 layers, ~10^4-10^5 hidden, ~10^6 vocabulary; clusters ~10^5 devices), so a
# typo such as a missing decimal point or an extra three zeros is an input error rather than
# hours of simulation. Floats are finite (NaN and inf are refused) and strict (no booleans).
Count = Annotated[StrictInt, Field(ge=1, le=1_000_000)]  # widths, classes, channels
Layers = Annotated[StrictInt, Field(ge=1, le=10_000)]
Vocab = Annotated[StrictInt, Field(ge=1, le=10_000_000)]
SeqLength = Annotated[StrictInt, Field(ge=1, le=100_000_000)]
Degree = Annotated[StrictInt, Field(ge=1, le=100_000)]   # parallel degrees, nodes
PerNode = Annotated[StrictInt, Field(ge=1, le=1024)]     # devices in one node
GlobalBatch = Annotated[StrictInt, Field(ge=1, le=1 << 24)]
MicroBatch = Annotated[StrictInt, Field(ge=1, le=1 << 16)]
Dim = Annotated[StrictInt, Field(ge=1, le=1 << 31)]      # one dimension of a graph tensor
LearningRate = Annotated[StrictFloat, Field(ge=1e-10, le=10.0, allow_inf_nan=False)]
BucketMB = Annotated[StrictFloat, Field(ge=0.01, le=100_000.0, allow_inf_nan=False)]
Seed = Annotated[StrictInt, Field(ge=0, le=2**32 - 1)]   # numpy's legacy seed range
DropoutP = Annotated[StrictFloat, Field(ge=0.0, lt=1.0, allow_inf_nan=False)]
NicGbps = Annotated[StrictFloat, Field(ge=1e-3 * 8, le=1e5 * 8, allow_inf_nan=False)]


class _Closed(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# A straggler's share of its profile's speed: 1e-3 (each kernel or transfer 1000x slower) is
# slower than any degraded device that still trains; 1e-300 would make an iteration 1e300 s.
Speed = Annotated[StrictFloat, Field(ge=1e-3, le=1, allow_inf_nan=False)]
Rank = Annotated[StrictInt, Field(ge=0, le=100_000_000)]
