"""Chapter 00 — references (to be written)."""

__all__ = []
