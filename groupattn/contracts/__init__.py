"""Contracts: the promise every module declares (input → output field type, and a kind).

[`EquivariantModule`][groupattn.contracts.EquivariantModule] is the base class of modules that declare their input and
output field types: it checks every input against ``in_type`` and derives a default
contract from the types.
"""

import warnings
from typing import Any

from ._contract import (
    Contract,
    ContractError,
    DeclaresContract,
    Status,
    contract_of,
    register_contract,
    registered_contract,
)
from ._module import EquivariantModule


def __getattr__(name: str) -> Any:
    if name == "Kind":
        warnings.warn(
            "groupattn.contracts.Kind is deprecated: use groupattn.contracts.Status",
            DeprecationWarning,
            stacklevel=2,
        )
        return Status
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Contract",
    "ContractError",
    "DeclaresContract",
    "EquivariantModule",
    "Status",
    "contract_of",
    "register_contract",
    "registered_contract",
]
