"""The SimPy model (see docs/design.md, `engine`): `run(plan) -> Trace`. Only this package
imports simpy; a Trace holds plain tuples."""

from simulator.engine.core import run, simpy_event_rate
from simulator.engine.trace import Trace

__all__ = ["run", "simpy_event_rate", "Trace"]
