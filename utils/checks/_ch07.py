"""Chapter 07 — checks (to be written)."""

__all__ = []
