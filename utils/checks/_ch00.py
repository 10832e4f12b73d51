"""Chapter 00 — checks (to be written)."""

__all__ = []
