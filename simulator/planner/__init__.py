"""planner layer (see DESIGN.md)."""
