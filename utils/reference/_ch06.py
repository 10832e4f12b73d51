"""Chapter 06 — references (to be written)."""

__all__ = []
