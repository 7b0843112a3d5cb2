"""Contracts: the promise every module declares (input → output field type, and a kind)."""

from ._contract import (
    Contract,
    ContractError,
    DeclaresContract,
    Kind,
    contract_of,
    register_contract,
    registered_contract,
)

__all__ = [
    "Contract",
    "ContractError",
    "DeclaresContract",
    "Kind",
    "contract_of",
    "register_contract",
    "registered_contract",
]
