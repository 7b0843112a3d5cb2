"""groupattn: group-equivariant attention for PyTorch.

The top-level package holds the version and the library's error hierarchy (see
[`GroupattnError`][groupattn.GroupattnError]); everything else lives in the subpackages
([`groupattn.groups`][groupattn.groups], [`groupattn.attention`][groupattn.attention], [`groupattn.models`][groupattn.models], …).

Every error the library raises on purpose derives from
[`GroupattnError`][groupattn.GroupattnError] and from the built-in exception existing code
catches::

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
    └── CheckpointError (ValueError)     (groupattn.training)

Deprecated: [`ShapeError`][groupattn.ShapeError] and
[`ConfigurationError`][groupattn.ConfigurationError] derive from
[`GroupError`][groupattn.GroupError] in this release only, so that ``except GroupError``
written against 0.1 keeps catching them; from the next release on they derive from
[`GroupattnError`][groupattn.GroupattnError] and ``ValueError`` directly.
"""

from ._errors import (
    ConfigurationError,
    ContractError,
    DataError,
    DtypeError,
    GroupattnError,
    GroupError,
    MissingExtraError,
    ShapeError,
    UnsafePickleError,
    VerificationBudgetError,
)

__version__ = "0.1.0"

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
