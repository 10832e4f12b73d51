"""Chapter 05 — references (to be written)."""

__all__ = []
