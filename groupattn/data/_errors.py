"""Errors of the data loaders (defined with the library's error hierarchy, ``groupattn._errors``)."""

from __future__ import annotations

from .._errors import DataError, MissingExtraError, UnsafePickleError

__all__ = ["DataError", "MissingExtraError", "UnsafePickleError"]
