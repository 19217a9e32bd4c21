"""planner layer (see docs/design.md)."""
