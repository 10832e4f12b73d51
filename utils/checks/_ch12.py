"""Chapter 12 — checks (to be written)."""

__all__ = []
