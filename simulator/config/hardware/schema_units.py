"""The hardware profile's value types: physical bounds per unit, every float finite, and the
closed frozen base model of every section (`schema`, `schema_network`)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt

PosFloat = Annotated[StrictFloat, Field(gt=0)]  # strict floats accept integers, not booleans
PosInt = Annotated[StrictInt, Field(ge=1)]
Fraction = Annotated[StrictFloat, Field(gt=0, le=1, allow_inf_nan=False)]


# Physical bounds, wide enough for any device built or announced (B200: 4.5 PFLOP/s fp8, 8 TB/s
# HBM, 900 GB/s NVLink; a 1 Gb/s NIC; a laptop CPU) and narrow enough that a slipped exponent
# is refused instead of simulated (`bandwidth_GBps: 1e-300` would make one iteration 1e303 s).
# Every float is finite.
GBps = Annotated[StrictFloat, Field(ge=1e-3, le=1e5, allow_inf_nan=False)]
Gbps = Annotated[StrictFloat, Field(ge=1e-3, le=8e5, allow_inf_nan=False)]
Tflops = Annotated[StrictFloat, Field(ge=1e-6, le=1e6, allow_inf_nan=False)]
MemoryGB = Annotated[StrictFloat, Field(ge=1e-3, le=1e5, allow_inf_nan=False)]
HostGB = Annotated[StrictFloat, Field(ge=1e-3, le=1e7, allow_inf_nan=False)]
LatencyUs = Annotated[StrictFloat, Field(ge=1e-3, le=1e6, allow_inf_nan=False)]
LaunchUs = Annotated[StrictFloat, Field(ge=0, le=1e3, allow_inf_nan=False)]
MessageBytes = Annotated[StrictFloat, Field(ge=1, le=1e15, allow_inf_nan=False)]
Units = Annotated[StrictInt, Field(ge=1, le=1_000_000)]
Links = Annotated[StrictInt, Field(ge=1, le=1024)]
Tile = Annotated[StrictInt, Field(ge=1, le=65_536)]
KHalf = Annotated[StrictFloat, Field(ge=0, le=1e9, allow_inf_nan=False)]


class Closed(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
