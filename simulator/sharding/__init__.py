"""Placements, layouts on an N-D mesh, per-operator signatures, strategy notations, the
redistribution planner and sharding plans."""
