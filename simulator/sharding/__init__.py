"""sharding layer (see DESIGN.md)."""
