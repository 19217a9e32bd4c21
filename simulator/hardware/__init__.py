"""hardware layer (see DESIGN.md)."""
