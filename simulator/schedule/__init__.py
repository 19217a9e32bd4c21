"""Lowering a scenario into per-device task streams (see docs/design.md, `schedule`).

transformer_program(scenario) -> TransformerProgram   one device, one micro-batch
lower(scenario, program, costs, fidelity) -> Plan     task streams with dependencies
"""

from simulator.schedule.costs import CostModel
from simulator.schedule.lowering import FIDELITIES, lower
from simulator.schedule.model_program import transformer_program
from simulator.schedule.pipeline import SCHEDULES, schedule_steps
from simulator.schedule.program import TransformerProgram
from simulator.schedule.tasks import CATEGORIES, STREAMS, Plan, Task

__all__ = ["transformer_program", "TransformerProgram", "lower", "FIDELITIES", "CostModel",
           "Plan", "Task", "STREAMS", "CATEGORIES", "SCHEDULES", "schedule_steps"]
