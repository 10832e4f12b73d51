"""Chapter 10 — references (to be written)."""

__all__ = []
