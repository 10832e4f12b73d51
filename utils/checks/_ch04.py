"""Chapter 04 — checks (to be written)."""

__all__ = []
