"""Chapter 10 — checks (to be written)."""

__all__ = []
