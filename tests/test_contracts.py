"""Contracts: constructors, kinds, descriptions, registration and lookup."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from groupattn.actions import GridField, InvariantField, LiftedField, TokenField
from groupattn.contracts import (
    Contract,
    ContractError,
    DeclaresContract,
    Status,
    contract_of,
    register_contract,
    registered_contract,
)
from groupattn.groups import CyclicGroup, TorusTranslations, p4


def test_constructors_set_kind_types_and_reason() -> None:
    grid, lifted = GridField(), LiftedField(CyclicGroup(4))
    eq = Contract.equivariant(grid, lifted)
    assert (eq.kind, eq.input_type, eq.output_type, eq.reason, eq.output_group) == (
        Status.EQUIVARIANT,
        grid,
        lifted,
        None,
        None,
    )
    inv = Contract.invariant(grid)
    assert inv.kind == Status.INVARIANT and inv.output_type == InvariantField()
    coarse = TorusTranslations(4, 4)
    canon = Contract.canonicalizing(grid, grid, output_group=TorusTranslations(4, 4, stride=2))
    assert canon.kind == Status.CANONICALIZING and canon.output_group == TorusTranslations(
        4, 4, stride=2
    )
    restore = Contract.frame_restoring((grid, InvariantField()), grid, coarse)
    assert restore.kind == Status.FRAME_RESTORING and isinstance(restore.input_type, tuple)
    broken = Contract.breaks(
        "absolute positional encoding is not translation-invariant", grid, grid
    )
    assert broken.kind == Status.BROKEN and "absolute" in (broken.reason or "")
    unknown = Contract.unknown("no idea", grid)
    assert unknown.kind == Status.UNVERIFIED and unknown.output_type is None


def test_preserves_symmetry_and_describe() -> None:
    grid = GridField()
    assert Contract.equivariant(grid, grid).preserves_symmetry
    assert Contract.invariant(grid).preserves_symmetry
    assert Contract.canonicalizing(grid, grid).preserves_symmetry
    assert Contract.frame_restoring(grid, grid).preserves_symmetry
    assert not Contract.breaks("clipped bias", grid, grid).preserves_symmetry
    assert not Contract.unknown("?").preserves_symmetry
    assert (
        Contract.equivariant(grid, TokenField(grid=(2, 2))).describe()
        == "equivariant: grid(B,C,H,W) -> tokens(B,N,C)[2x2]"
    )
    assert (
        Contract.breaks("clipped bias", grid).describe()
        == "broken: grid(B,C,H,W) -> ? (clipped bias)"
    )
    assert (
        Contract.frame_restoring((grid, InvariantField()), grid)
        .describe()
        .startswith("frame-restoring: (grid(B,C,H,W), invariant) -> grid")
    )
    assert Status("canonicalizing") is Status.CANONICALIZING and Status.BROKEN == "broken"


def test_contracts_are_immutable_values() -> None:
    a = Contract.equivariant(GridField(), GridField())
    assert a == Contract.equivariant(GridField(), GridField())
    assert a != Contract.invariant(GridField())
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.kind = Status.BROKEN  # type: ignore[misc]


class _Declares(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def contract(self, group, input_type=None) -> Contract:
        if not isinstance(group, TorusTranslations):
            return Contract.unknown(
                f"_Declares: only translations are analysed, got {group.name}", input_type
            )
        t = input_type or GridField()
        return Contract.equivariant(t, t)


class _Plain(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


class _PlainChild(_Plain):
    pass


def test_contract_of_declared_registered_and_unknown() -> None:
    torus = TorusTranslations(4, 4)
    declared = _Declares()
    assert isinstance(declared, DeclaresContract)
    assert not isinstance(_Plain(), DeclaresContract)
    assert contract_of(declared, torus).kind == Status.EQUIVARIANT
    assert contract_of(declared, p4(4)).kind == Status.UNVERIFIED
    assert contract_of(declared, torus, LiftedField(CyclicGroup(4))).input_type == LiftedField(
        CyclicGroup(4)
    )

    fallback = contract_of(_Plain(), torus)
    assert fallback.kind == Status.UNVERIFIED and "_Plain declares no contract" in (
        fallback.reason or ""
    )

    @register_contract(_Plain)
    def _plain_contract(module, group, input_type):
        return Contract.invariant(input_type or GridField())

    try:
        assert registered_contract(_Plain) is _plain_contract
        assert registered_contract(_PlainChild()) is _plain_contract  # subclasses inherit
        assert contract_of(_PlainChild(), torus).kind == Status.INVARIANT
    finally:
        from groupattn.contracts import _contract

        _contract._REGISTRY.pop(_Plain)
    assert registered_contract(_Plain) is None


def test_register_contract_for_a_function() -> None:
    def double(x: torch.Tensor) -> torch.Tensor:
        return 2 * x

    assert contract_of(double, TorusTranslations(2, 2)).kind == Status.UNVERIFIED

    @register_contract(double)
    def _(fn, group, input_type):
        return Contract.equivariant(input_type or GridField(), input_type or GridField())

    try:
        assert contract_of(double, TorusTranslations(2, 2)).kind == Status.EQUIVARIANT
    finally:
        from groupattn.contracts import _contract

        _contract._REGISTRY.pop(double)


def test_contract_error_is_a_value_error() -> None:
    assert issubclass(ContractError, ValueError)
    with pytest.raises(ValueError, match="cannot"):
        raise ContractError("Module: cannot state a contract for S5")


def test_one_status_vocabulary_and_deprecated_names() -> None:
    """Contracts, verdicts and node records share one enum; the old names still work, with a warning."""
    import warnings

    import groupattn.check
    import groupattn.contracts
    from groupattn.check import NodeRecord

    for old_module, old_name in ((groupattn.contracts, "Kind"), (groupattn.check, "Verdict")):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert getattr(old_module, old_name) is Status
        assert any(
            issubclass(w.category, DeprecationWarning) and old_name in str(w.message)
            for w in caught
        )
    assert Status.BREAKS is Status.BROKEN and Status.UNKNOWN is Status.UNVERIFIED
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert Status("breaks") is Status.BROKEN and Status("unknown") is Status.UNVERIFIED
    assert len(caught) == 2
    assert groupattn.check.Status is groupattn.contracts.Status
    assert (
        Status.EQUIVARIANT.certified and Status.INVARIANT.certified and not Status.BROKEN.certified
    )
    record = NodeRecord("x", "placeholder", "input", "input")
    assert record.status == Status.INPUT
