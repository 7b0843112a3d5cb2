"""The errors groupattn raises: one base class, one subclass per kind of mistake.

Every error the library raises on purpose derives from [`GroupattnError`][groupattn.GroupattnError], so
``except groupattn.GroupattnError`` catches them all. Each also derives from the
built-in exception a Python programmer would expect, so existing ``except ValueError``
(or ``except ImportError``) code keeps working::

    GroupattnError (Exception)
    ├── GroupError (ValueError)          an invalid group, element or group operation
    │   ├── ShapeError                   an input of the wrong rank, shape, grid or width
    │   └── ConfigurationError           a bad constructor (or factory) argument
    ├── DtypeError (TypeError)           an input of the wrong dtype (integer, bool, …)
    ├── ContractError (ValueError)       a contract that cannot be stated
    ├── DataError (ValueError)           data that cannot be loaded
    │   └── UnsafePickleError            (also pickle.UnpicklingError)
    ├── MissingExtraError (ImportError)  an optional dependency that is not installed
    ├── VerificationBudgetError (ValueError)
    └── CheckpointError (ValueError)

[`ContractError`][groupattn.contracts.ContractError] is also importable from [`groupattn.contracts`][groupattn.contracts],
[`DataError`][groupattn.data.DataError], [`MissingExtraError`][groupattn.data.MissingExtraError] and [`UnsafePickleError`][groupattn.data.UnsafePickleError] from
[`groupattn.data`][groupattn.data], [`VerificationBudgetError`][groupattn.check.VerificationBudgetError] from [`groupattn.check`][groupattn.check], and
[`GroupError`][groupattn.groups.GroupError] from [`groupattn.groups`][groupattn.groups] (the same
classes). ``CheckpointError`` lives in [`groupattn.training`][groupattn.training].

Deprecated: [`ShapeError`][groupattn.ShapeError] and [`ConfigurationError`][groupattn.ConfigurationError] derive from
[`GroupError`][groupattn.groups.GroupError] in this release only, so that code written against 0.1 —
``except GroupError`` around a layer call or a constructor — keeps catching them.
From the next release on they derive from [`GroupattnError`][groupattn.GroupattnError] and ``ValueError``
directly; catch [`ShapeError`][groupattn.ShapeError], [`ConfigurationError`][groupattn.ConfigurationError],
[`GroupattnError`][groupattn.GroupattnError] or ``ValueError`` instead of [`GroupError`][groupattn.groups.GroupError] for them.

Every message follows one pattern: the module (or function) that raised it, what it
expected, and what it got — ``"PatchEmbedding: expected 1 input channels, got 3"``.
"""

from __future__ import annotations

import pickle

__all__ = [
    "ConfigurationError",
    "ContractError",
    "DataError",
    "DtypeError",
    "GroupError",
    "GroupattnError",
    "MissingExtraError",
    "ShapeError",
    "UnsafePickleError",
    "VerificationBudgetError",
]


class GroupattnError(Exception):
    """Base class of every error groupattn raises on purpose.

    Catch it to handle any mistake the library detects (a bad group, shape, dtype,
    argument, contract, file, …); each subclass also derives from the matching built-in
    exception (``ValueError``, ``TypeError`` or ``ImportError``).
    """


class GroupError(GroupattnError, ValueError):
    """Raised for an invalid group, element or group operation.

    The message names the group (or module), what it expected and what it got: an
    element of another group, an unknown group name, a point group that does not act
    on the pixel grid, a group too large to list, …

    In this release also the base class of [`ShapeError`][groupattn.ShapeError] and
    [`ConfigurationError`][groupattn.ConfigurationError] (deprecated, see the module docstring).
    """


class ShapeError(GroupError):
    """Raised for an input whose rank, shape, grid or channel width a module does not accept.

    ``"GroupSelfAttention: expected a lifted field (B, C=16, |C4|=4, H, W), got a tensor
    of shape (2, 8, 4, 6, 6)"``. A ``ValueError``; derives from [`GroupError`][groupattn.groups.GroupError] in
    this release only (deprecated; from the next release on, from
    [`GroupattnError`][groupattn.GroupattnError] and ``ValueError`` directly).
    """


class ConfigurationError(GroupError):
    """Raised for a constructor or factory argument a module cannot be built with.

    A width not divisible by the number of heads, an even neighbourhood, a grid not
    divisible by the window, an unknown option name, an argument given under its new
    and its deprecated name at once, … A ``ValueError``; derives from
    [`GroupError`][groupattn.groups.GroupError] in this release only (deprecated; from the next release on,
    from [`GroupattnError`][groupattn.GroupattnError] and ``ValueError`` directly).
    """


class DtypeError(GroupattnError, TypeError):
    """Raised for an input tensor of a dtype a module cannot compute with.

    Integer and bool inputs are refused (never cast silently): convert them with
    ``x.float()`` (or to the model's dtype) first. A floating input of another dtype
    than the model's parameters is refused as well, unless autocast is active for the
    input's device (then the autocast rules choose each operation's precision).
    """


class ContractError(GroupattnError, ValueError):
    """Raised when a module's contract cannot be stated for the given group or input."""


class DataError(GroupattnError, ValueError):
    """Raised when data cannot be loaded or has an unexpected layout."""


class MissingExtraError(GroupattnError, ImportError):
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


class VerificationBudgetError(GroupattnError, ValueError):
    """The numerical check would take longer than its budget (raised before paying it)."""
