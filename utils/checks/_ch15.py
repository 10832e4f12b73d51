"""Chapter 15 — checks (to be written)."""

__all__ = []
