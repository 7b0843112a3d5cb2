"""Contracts: the promise every module declares (input → output field type, and a kind).

:class:`EquivariantModule` is the base class of modules that declare their input and
output field types: it checks every input against ``in_type`` and derives a default
contract from the types.
"""

from ._contract import (
    Contract,
    ContractError,
    DeclaresContract,
    Kind,
    contract_of,
    register_contract,
    registered_contract,
)
from ._module import EquivariantModule

__all__ = [
    "Contract",
    "ContractError",
    "DeclaresContract",
    "EquivariantModule",
    "Kind",
    "contract_of",
    "register_contract",
    "registered_contract",
]
