"""``LiftedOrbitPositionalEncoding``: an absolute position per orbit, exact under the point group.

It gives the C4/D4 ViT what its baseline's learned position embedding gives the plain
ViT — where a token sits relative to the centre — without breaking rotations: the table
is tied over the orbits of (group element, position), so adding it commutes with every
element of the point group about the grid's centre, for every value of the weights.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from groupattn import ConfigurationError, ShapeError
from groupattn.actions import LiftedField
from groupattn.check import Status, certify
from groupattn.contracts import contract_of
from groupattn.groups import CyclicGroup, DihedralGroup, TorusTranslations, p4
from groupattn.models import create
from groupattn.positional import LiftedAbsolutePositionalEncoding, LiftedOrbitPositionalEncoding

GROUPS = {
    "C4": CyclicGroup(4),
    "D4": DihedralGroup(4),
    "C2": CyclicGroup(2),
    "D1": DihedralGroup(1),
}


def _perturbed(layer: LiftedOrbitPositionalEncoding, seed: int) -> LiftedOrbitPositionalEncoding:
    with torch.no_grad():
        layer.embedding.normal_(generator=torch.Generator().manual_seed(seed))
    return layer


@pytest.mark.parametrize("name", sorted(GROUPS))
@given(side=st.integers(1, 6), dim=st.integers(1, 5), seed=st.integers(0, 2**16))
def test_equivariant_for_every_element_in_float64(
    name: str, side: int, dim: int, seed: int
) -> None:
    group = GROUPS[name]
    layer = _perturbed(LiftedOrbitPositionalEncoding(dim, group, side), seed).double()
    field = LiftedField(group)
    x = torch.randn(
        2,
        dim,
        group.order(),
        side,
        side,
        dtype=torch.float64,
        generator=torch.Generator().manual_seed(seed),
    )
    y = layer(x)
    for g in group.elements():
        moved = layer(field.act(group, g, x))
        torch.testing.assert_close(moved, field.act(group, g, y), rtol=0, atol=0)


@pytest.mark.parametrize("name", sorted(GROUPS))
def test_table_is_invariant_and_has_one_vector_per_position(name: str) -> None:
    group = GROUPS[name]
    layer = _perturbed(LiftedOrbitPositionalEncoding(3, group, 5), 1)
    table = layer.table()[None]
    assert table.shape == (1, 3, group.order(), 5, 5)
    for g in group.elements():
        assert torch.equal(LiftedField(group).act(group, g, table), table)
    # H acts freely on the group axis: exactly h·w orbits, as many vectors as a plain ViT's embedding
    assert layer.embedding.shape == (3, 25)
    # and no two orbits share a vector: the table is as rich as the symmetry allows
    assert torch.unique(layer.table()[0]).numel() == 25


def test_rectangular_grids_for_half_turns_and_reflections_only() -> None:
    layer = LiftedOrbitPositionalEncoding(2, "C2", (3, 5))
    assert layer.embedding.shape == (2, 15)
    with pytest.raises(
        ConfigurationError, match="LiftedOrbitPositionalEncoding: expected a square grid for C4"
    ):
        LiftedOrbitPositionalEncoding(2, "C4", (3, 5))


def test_breaks_translations_and_says_why() -> None:
    layer = _perturbed(LiftedOrbitPositionalEncoding(2, "C4", 4), 0)
    contract = contract_of(layer, p4(4))
    assert contract.kind == Status.BROKEN and "absolute positions" in (contract.reason or "")
    assert contract_of(layer, TorusTranslations(4, 4)).kind == Status.BROKEN
    x = torch.randn(1, 2, 4, 4, 4, dtype=torch.float64)
    layer = layer.double()
    shifted = layer(torch.roll(x, 1, dims=-1))
    assert not torch.allclose(shifted, torch.roll(layer(x), 1, dims=-1))


def test_contract_is_unknown_for_a_larger_point_group() -> None:
    layer = LiftedOrbitPositionalEncoding(2, "C4", 4)
    assert contract_of(layer, DihedralGroup(4)).kind == Status.UNVERIFIED
    assert contract_of(layer, CyclicGroup(2)).kind == Status.EQUIVARIANT


def test_shape_errors_name_the_module_and_both_shapes() -> None:
    layer = LiftedOrbitPositionalEncoding(2, "C4", 4)
    with pytest.raises(
        ShapeError,
        match=r"LiftedOrbitPositionalEncoding: expected a lifted field \(B, 2, 4, 4, 4\), got \(1, 2, 4, 3, 3\)",
    ):
        layer(torch.randn(1, 2, 4, 3, 3))


@pytest.mark.parametrize(("point_group", "group"), [("C4", "c4"), ("D4", "d4")])
def test_group_vit_with_it_is_certified_by_its_body(point_group: str, group: str) -> None:
    torch.manual_seed(0)
    model = create("group_vit", point_group=point_group)
    assert isinstance(model.position, LiftedOrbitPositionalEncoding)
    cert = certify(model, torch.randn(2, 1, 32, 32), group, verify=True)
    assert cert.verdict == Status.INVARIANT, cert.to_text()
    assert not any("declared contracts" in n for n in cert.notes)  # proven through its body
    assert cert.verification is not None and cert.verification.equivariant


def test_group_vit_without_absolute_positions_keeps_patch_translations() -> None:
    model = create("group_vit", absolute_position=False)
    cert = certify(model, torch.randn(2, 1, 32, 32), TorusTranslations(8, 8, stride=4))
    assert cert.verdict == Status.INVARIANT, cert.to_text()
    with_positions = create("group_vit")
    cert = certify(with_positions, torch.randn(2, 1, 32, 32), TorusTranslations(8, 8, stride=4))
    assert cert.verdict == Status.BROKEN


def test_the_free_embedding_of_the_baseline_still_breaks_rotations() -> None:
    layer = LiftedAbsolutePositionalEncoding(2, "C4", 4)
    cert = certify(layer, torch.randn(2, 2, 4, 4, 4), CyclicGroup(4))
    assert cert.verdict == Status.BROKEN
