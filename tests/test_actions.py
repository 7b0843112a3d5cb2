"""Action laws on coordinates and on every field type, conventions, and bad input."""

from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from groupattn.actions import (
    GridField,
    GSet,
    InvariantField,
    LiftedField,
    MatrixRepresentation,
    RegularRepresentation,
    SetField,
    TokenField,
    TrivialRepresentation,
    act_on_coordinates,
    embed_point_element,
    point_group_of,
    spatial_element,
    transform_grid,
)
from groupattn.groups import (
    CyclicGroup,
    DihedralGroup,
    GridTranslations,
    GroupError,
    PermutationGroup,
    RotoTranslationGroup,
    SymmetricGroup,
    TorusTranslations,
    integer_matrix,
    p4,
    p4m,
)
from groupattn.testing.strategies import group_elements, signals

SIZE = 5
C4, D4 = CyclicGroup(4), DihedralGroup(4)
SPATIAL_GROUPS = {
    "torus": TorusTranslations(SIZE, SIZE),
    "z2": GridTranslations(radius=7),
    "c2": CyclicGroup(2),
    "c4": C4,
    "d2": DihedralGroup(2),
    "d4": D4,
    "p4": p4(SIZE),
    "p4m": p4m(SIZE),
    "p4_z2": p4(),
    "t_d1": RotoTranslationGroup(DihedralGroup(1), SIZE),
}


def _standard_representation(group):
    """The 2-D representation of a point group (or its point part) by integer matrices."""
    point = point_group_of(group)
    return MatrixRepresentation(point, 2, lambda g: integer_matrix(point, g), name="standard")


def _field_types(key: str):
    group = SPATIAL_GROUPS[key]
    point = point_group_of(group)
    fields = {
        "grid": GridField(),
        "grid_trivial": GridField(TrivialRepresentation(3)),
        "tokens": TokenField(grid=(SIZE, SIZE)),
        "tokens_prefix": TokenField(grid=(SIZE, SIZE), prefix=2),
        "invariant": InvariantField(),
    }
    if point is not None:
        fields["lifted"] = LiftedField(point)
        fields["lifted_d4"] = (
            LiftedField(D4) if isinstance(point, DihedralGroup) else LiftedField(C4)
        )
        fields["grid_regular"] = GridField(RegularRepresentation(point, 2))
        fields["grid_standard"] = GridField(_standard_representation(group))
        fields["lifted_regular"] = LiftedField(point, RegularRepresentation(point))
        fields["lifted_tokens"] = TokenField(grid=(SIZE, SIZE), point_group=point, prefix=1)
    return group, fields


CASES = [(key, name) for key in SPATIAL_GROUPS for name in _field_types(key)[1]]


@pytest.mark.parametrize(("key", "name"), CASES, ids=[f"{k}-{n}" for k, n in CASES])
@settings(max_examples=6)
@given(data=st.data())
def test_field_action_law_is_exact(key: str, name: str, data: st.DataObject) -> None:
    group, fields = _field_types(key)
    field = fields[name]
    x = data.draw(signals(field, batch=(1, 2), channels=(1, 3), size=SIZE))
    g, h = data.draw(group_elements(group)), data.draw(group_elements(group))
    gh_x = field.act(group, group.compose(g, h), x)
    # permutations (and integer matrices) move values without rounding: exact equality
    assert torch.equal(field.act(group, g, field.act(group, h, x)), gh_x)
    assert torch.equal(field.act(group, group.identity(), x), x)
    assert gh_x.shape == x.shape and gh_x.dtype == x.dtype


@settings(max_examples=10)
@given(data=st.data(), n=st.sampled_from([3, 6, 8, 12]), dihedral=st.booleans())
def test_any_angle_acts_on_continuous_coordinates(
    data: st.DataObject, n: int, dihedral: bool
) -> None:
    group = DihedralGroup(n) if dihedral else CyclicGroup(n)
    g, h = data.draw(group_elements(group)), data.draw(group_elements(group))
    coords = torch.randn(7, 2, dtype=torch.float64)
    center = (0.25, -1.5)
    lhs = act_on_coordinates(
        group, g, act_on_coordinates(group, h, coords, center=center), center=center
    )
    rhs = act_on_coordinates(group, g * h, coords, center=center)
    assert torch.allclose(lhs, rhs, rtol=0, atol=1e-12)
    # isometry fixing the centre
    dists = torch.cdist(coords, coords)
    assert torch.allclose(torch.cdist(rhs, rhs), dists, atol=1e-12)
    assert torch.allclose(
        act_on_coordinates(group, g, torch.tensor([center], dtype=torch.float64), center=center),
        torch.tensor([center], dtype=torch.float64),
        atol=1e-12,
    )


@pytest.mark.parametrize("key", list(SPATIAL_GROUPS))
@settings(max_examples=8)
@given(data=st.data())
def test_integer_coordinates_move_exactly(key: str, data: st.DataObject) -> None:
    group = SPATIAL_GROUPS[key]
    g, h = data.draw(group_elements(group)), data.draw(group_elements(group))
    coords = torch.tensor(list(itertools.product(range(-3, 4), repeat=2)))
    modulo = (SIZE, SIZE) if group.is_finite and key not in {"c2", "c4", "d2", "d4"} else None
    lhs = act_on_coordinates(
        group, g, act_on_coordinates(group, h, coords, modulo=modulo), modulo=modulo
    )
    rhs = act_on_coordinates(group, g * h, coords, modulo=modulo)
    assert rhs.dtype == torch.int64
    assert torch.equal(lhs, rhs)


@pytest.mark.parametrize("key", ["torus", "c4", "d4", "p4", "p4m", "t_d1"])
def test_pixels_move_like_coordinates(key: str) -> None:
    """A single lit pixel at p lands at g·p = h(p − c) + c + t (mod the grid)."""
    group = SPATIAL_GROUPS[key]
    center = ((SIZE - 1) / 2, (SIZE - 1) / 2)
    elements = group.elements() if group.order() <= 64 else group.sample(40, seed=0)
    for g in elements:
        for p in [(0, 0), (1, 3), (4, 2)]:
            x = torch.zeros(1, 1, SIZE, SIZE, dtype=torch.float64)
            x[0, 0, p[0], p[1]] = 1.0
            moved = GridField().act(group, g, x)
            q = act_on_coordinates(
                group, g, torch.tensor([p], dtype=torch.float64), center=center, modulo=(SIZE, SIZE)
            )
            qy, qx = (round(v) for v in q[0].tolist())
            assert moved[0, 0, qy, qx] == 1.0 and moved.sum() == 1.0, (g, p)


def test_grid_conventions_are_rot90_and_flip() -> None:
    x = torch.randn(2, 3, 4, 4)
    assert torch.equal(GridField().act(C4, 1, x), torch.rot90(x, 1, dims=(-2, -1)))
    assert torch.equal(GridField().act(D4, D4.make(0, True), x), torch.flip(x, dims=(-1,)))
    assert torch.equal(
        GridField().act(D4, D4.make(3, True), x),
        torch.rot90(torch.flip(x, dims=(-1,)), 3, dims=(-2, -1)),
    )
    torus = TorusTranslations(4, 4)
    assert torch.equal(
        GridField().act(torus, (1, 3), x), torch.roll(x, shifts=(1, 3), dims=(-2, -1))
    )
    strided = TorusTranslations(2, 2, stride=2)
    assert torch.equal(
        GridField().act(strided, (1, 1), x), torch.roll(x, shifts=(2, 2), dims=(-2, -1))
    )
    # a pixel moves to p + t; integer rotation (y, x) -> (-x, y)
    assert act_on_coordinates(C4, 1, torch.tensor([[2, 1]])).tolist() == [[-1, 2]]
    assert act_on_coordinates(D4, D4.make(0, True), torch.tensor([[2, 1]])).tolist() == [[2, -1]]
    # C2 rotates non-square grids too
    y = torch.randn(1, 1, 3, 5)
    assert torch.equal(GridField().act(CyclicGroup(2), 1, y), torch.flip(y, dims=(-2, -1)))


def test_lifted_field_permutes_the_group_axis_by_the_regular_representation() -> None:
    for group in (C4, D4):
        field = LiftedField(group)
        regular = RegularRepresentation(group)
        x = torch.randn(1, 2, group.order(), 3, 3, dtype=torch.float64)
        for g in group.elements():
            expected = transform_grid(x, spatial_element(group, g))
            expected = regular.apply(group, g, expected, axis=2)
            assert torch.equal(field.act(group, g, x), expected)
            src = field.group_axis_permutation(group, g)
            assert src.tolist() == [group.index(group.inverse(g) * k) for k in group.elements()]
    # a C4 subgroup acts on a D4-lifted field through the embedding C4 ⊂ D4
    x = torch.randn(1, 1, 8, 3, 3, dtype=torch.float64)
    assert torch.equal(LiftedField(D4).act(C4, 1, x), LiftedField(D4).act(D4, D4.make(1), x))
    assert embed_point_element(CyclicGroup(2).element(1), D4) == D4.make(2)
    with pytest.raises(GroupError, match="contained in C4"):
        embed_point_element(D4.make(0, True), C4)


def test_token_field_agrees_with_grid_and_lifted_fields() -> None:
    group = p4m(4)
    x_img = torch.randn(2, 3, 4, 4, dtype=torch.float64)
    x_lift = torch.randn(2, 3, 8, 4, 4, dtype=torch.float64)
    cls_token = torch.randn(2, 1, 3, dtype=torch.float64)
    tokens = TokenField(grid=(4, 4), prefix=1)
    lifted_tokens = TokenField(grid=(4, 4), point_group=D4)
    for g in group.sample(10, seed=2):
        seq = torch.cat([cls_token, x_img.flatten(2).transpose(1, 2)], dim=1)
        moved = tokens.act(group, g, seq)
        assert torch.equal(moved[:, :1], cls_token)
        assert torch.equal(
            moved[:, 1:], GridField().act(group, g, x_img).flatten(2).transpose(1, 2)
        )
        seq = x_lift.flatten(2).transpose(1, 2)
        moved = lifted_tokens.act(group, g, seq)
        assert torch.equal(moved, LiftedField(D4).act(group, g, x_lift).flatten(2).transpose(1, 2))
    assert tokens.num_tokens == 17 and lifted_tokens.num_tokens == 128


@settings(max_examples=10)
@given(data=st.data())
def test_set_field_action_law_for_permutation_groups(data: st.DataObject) -> None:
    group = PermutationGroup([[1, 2, 3, 4, 5, 0], [0, 5, 4, 3, 2, 1]], name="hexagon")
    field = SetField(6, RegularRepresentation(group))
    x = data.draw(signals(field))
    g, h = data.draw(group_elements(group)), data.draw(group_elements(group))
    assert torch.equal(field.act(group, g, field.act(group, h, x)), field.act(group, g * h, x))
    # token i moves to position perm[i] (trivial channels)
    perm = group.permutation(g)
    moved = SetField(6).act(group, g, x)
    for i in range(6):
        assert torch.equal(moved[:, perm[i]], x[:, i])


def test_gset_of_field_agrees_with_the_field_action() -> None:
    group = p4m(4)
    gset = GSet.lifted_grid(group, D4, 4, 4)
    x = torch.randn(1, 1, 8, 4, 4, dtype=torch.float64)
    flat = x.reshape(-1)
    for g in group.sample(8, seed=0):
        perm = gset.permutation(g)
        moved = LiftedField(D4).act(group, g, x).reshape(-1)
        assert torch.equal(moved[perm], flat)
        assert sorted(perm.tolist()) == list(range(gset.num_points))


def test_point_group_of_and_spatial_element() -> None:
    assert point_group_of(p4(4)) == C4 and point_group_of(TorusTranslations(3)) is None
    se = spatial_element(p4m(4), ((1, 2), 5))
    assert se.translation == (1, 2) and se.point == D4.element(5)
    assert spatial_element(TorusTranslations(2, 2, stride=3), (1, 1)).translation == (3, 3)
    with pytest.raises(GroupError, match="expected a group acting on the plane"):
        point_group_of(SymmetricGroup(3))


# ---------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    ("field", "shape", "message"),
    [
        (
            GridField(),
            (2, 3, 4),
            r"GridField: expected an image batch \(B, C, H, W\), got a tensor of shape \(2, 3, 4\)",
        ),
        (GridField(), (1, 2, 3, 4, 4), "GridField: expected an image batch"),
        (
            LiftedField(C4),
            (1, 2, 4, 4),
            r"LiftedField: expected a lifted field \(B, C, \|C4\|=4, H, W\)",
        ),
        (LiftedField(D4), (1, 2, 4, 4, 4), r"\|D4\|=8"),
        (
            TokenField(grid=(4, 4)),
            (1, 16),
            r"TokenField: expected tokens \(B, N=16, C\) over a 4x4 grid",
        ),
        (TokenField(grid=(4, 4), prefix=1), (1, 16, 3), "with 1 prefix tokens"),
        (SetField(6), (1, 5, 2), r"SetField: expected a token set \(B, N=6, C\)"),
        (InvariantField(), (), r"InvariantField: expected a batched tensor"),
    ],
)
def test_wrong_rank_or_size_raises_for_each_field_type(field, shape, message) -> None:
    group = SymmetricGroup(6) if isinstance(field, SetField) else C4
    with pytest.raises(GroupError, match=message):
        field.act(group, group.identity(), torch.zeros(shape))


def test_spatial_errors_are_clear() -> None:
    with pytest.raises(GroupError, match="expected a square grid for a 90° rotation, got 3x5"):
        GridField().act(C4, 1, torch.zeros(1, 1, 3, 5))
    with pytest.raises(GroupError, match=r"LiftedField: expected a square grid"):
        LiftedField(C4).act(p4(), ((0, 0), 3), torch.zeros(1, 1, 4, 3, 5))
    with pytest.raises(GroupError, match="acting exactly on the pixel grid"):
        GridField().act(CyclicGroup(8), 1, torch.zeros(1, 1, 4, 4))
    with pytest.raises(
        GroupError, match=r"act_on_coordinates: expected coordinates of shape \(\.\.\., 2\)"
    ):
        act_on_coordinates(C4, 1, torch.zeros(4, 3))
    with pytest.raises(GroupError, match="expected an element in"):
        GridField().act(C4, 9, torch.zeros(1, 1, 4, 4))
    with pytest.raises(GroupError, match="expected a group acting on the plane"):
        GridField().act(SymmetricGroup(3), 1, torch.zeros(1, 1, 4, 4))
    with pytest.raises(GroupError, match="SetField: expected a permutation group, got C4"):
        SetField(4).act(C4, 1, torch.zeros(1, 4, 2))
    with pytest.raises(
        GroupError, match="SetField: expected a permutation group of degree 4, got degree 3"
    ):
        SetField(4).act(SymmetricGroup(3), 1, torch.zeros(1, 4, 2))
    with pytest.raises(GroupError, match=r"expected 8 channels for regular\(C4, x2\), got 3"):
        GridField(RegularRepresentation(C4, 2)).act(C4, 1, torch.zeros(1, 3, 4, 4))
    with pytest.raises(GroupError, match="LiftedField: expected a point group"):
        LiftedField(TorusTranslations(4))  # type: ignore[arg-type]
    bad = MatrixRepresentation(C4, 2, lambda g: torch.eye(3), name="bad")
    with pytest.raises(
        GroupError, match=r"MatrixRepresentation\(bad\): expected a 2x2 matrix, got \(3, 3\)"
    ):
        GridField(bad).act(C4, 1, torch.zeros(1, 2, 4, 4))
    with pytest.raises(GroupError, match="RegularRepresentation: expected a finite group"):
        RegularRepresentation(GridTranslations())  # type: ignore[arg-type]


def test_check_acts_on_grid_accepts_exact_groups_and_refuses_the_rest() -> None:
    from groupattn.actions import check_acts_on_grid
    from groupattn.groups import CyclicGroup, DihedralGroup, GroupError, TorusTranslations, p4m

    for group in (
        CyclicGroup(4),
        DihedralGroup(4),
        CyclicGroup(2),
        TorusTranslations(8, 8),
        p4m(8),
    ):
        check_acts_on_grid(group, (3, 8, 8))
    for group, shape in (
        (CyclicGroup(8), (1, 8, 8)),
        (CyclicGroup(5), (1, 8, 8)),
        (CyclicGroup(4), (1, 8, 6)),
    ):
        with pytest.raises(GroupError, match="--group"):
            check_acts_on_grid(group, shape, module="--group")
