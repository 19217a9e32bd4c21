"""numeric layer (see DESIGN.md)."""
