"""graph layer (see docs/design.md)."""
