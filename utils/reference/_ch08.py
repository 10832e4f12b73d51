"""Chapter 08 — references (to be written)."""

__all__ = []
