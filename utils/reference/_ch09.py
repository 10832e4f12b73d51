"""Chapter 09 — references (to be written)."""

__all__ = []
