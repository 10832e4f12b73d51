"""Chapter 14 — checks (to be written)."""

__all__ = []
