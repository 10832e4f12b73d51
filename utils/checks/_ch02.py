"""Chapter 02 — checks (to be written)."""

__all__ = []
