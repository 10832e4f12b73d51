"""Chapter 02 — references (to be written)."""

__all__ = []
