"""Chapter 07 — references (to be written)."""

__all__ = []
