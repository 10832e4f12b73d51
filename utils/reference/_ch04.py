"""Chapter 04 — references (to be written)."""

__all__ = []
