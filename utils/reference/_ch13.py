"""Chapter 13 — references (to be written)."""

__all__ = []
