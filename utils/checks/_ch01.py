"""Chapter 01 — checks (to be written)."""

__all__ = []
