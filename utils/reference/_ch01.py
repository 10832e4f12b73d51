"""Chapter 01 — references (to be written)."""

__all__ = []
