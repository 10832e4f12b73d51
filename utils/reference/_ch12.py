"""Chapter 12 — references (to be written)."""

__all__ = []
