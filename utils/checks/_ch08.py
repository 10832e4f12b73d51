"""Chapter 08 — checks (to be written)."""

__all__ = []
