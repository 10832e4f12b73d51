"""Chapter 13 — checks (to be written)."""

__all__ = []
