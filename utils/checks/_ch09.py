"""Chapter 09 — checks (to be written)."""

__all__ = []
