"""Chapter 11 — references (to be written)."""

__all__ = []
