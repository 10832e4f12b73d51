"""Chapter 11 — checks (to be written)."""

__all__ = []
