"""Canonicalizers: pick a group element from the data and apply it (polyphase anchoring, APS, orientation)."""

from ._types import Canonicalized

__all__ = ["Canonicalized"]
