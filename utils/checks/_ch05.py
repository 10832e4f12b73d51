"""Chapter 05 — checks (to be written)."""

__all__ = []
