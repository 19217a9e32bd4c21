"""numeric layer (see docs/design.md)."""
