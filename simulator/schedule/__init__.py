"""schedule layer (see DESIGN.md)."""
