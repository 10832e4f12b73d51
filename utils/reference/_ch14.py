"""Chapter 14 — references (to be written)."""

__all__ = []
