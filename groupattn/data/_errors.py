"""Errors of the data loaders."""

from __future__ import annotations

import pickle

__all__ = ["DataError", "MissingExtraError", "UnsafePickleError"]


class DataError(ValueError):
    """Raised when data cannot be loaded or has an unexpected layout."""


class MissingExtraError(ImportError):
    """Raised when a loader needs an optional package that is not installed.

    The message is one line naming the extra that provides it, e.g.
    ``pip install 'groupattn[data]'``.

    Attributes
    ----------
    package
        The missing distribution, e.g. ``"mlxtend"``.
    extra
        The groupattn extra that installs it, e.g. ``"data"``.
    """

    def __init__(self, where: str, package: str, extra: str) -> None:
        self.package = package
        self.extra = extra
        super().__init__(
            f"{where}: expected the optional package {package} (groupattn's '{extra}' extra: "
            f"pip install 'groupattn[{extra}]'), got none installed"
        )


class UnsafePickleError(DataError, pickle.UnpicklingError):
    """Raised when a pickle asks for anything outside the restricted unpickler's allow-list.

    Nothing the pickle names is imported or called before the error is raised.
    """
