"""Chapter 06 — checks (to be written)."""

__all__ = []
