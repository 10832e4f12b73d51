"""Chapter 15 — references (to be written)."""

__all__ = []
