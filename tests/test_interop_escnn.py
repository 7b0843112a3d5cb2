"""The escnn adapter, and our lifted-field / regular-representation actions checked against escnn."""

from __future__ import annotations

import math

import pytest

escnn = pytest.importorskip("escnn")

import torch  # noqa: E402
from escnn import gspaces  # noqa: E402
from escnn import nn as enn  # noqa: E402

from groupattn.actions import GridField, LiftedField, MatrixRepresentation, RegularRepresentation  # noqa: E402
from groupattn.groups import CyclicGroup, DihedralGroup, GroupError, p4, p4m  # noqa: E402
from groupattn.interop import (  # noqa: E402
    field_type_from_escnn,
    from_escnn_element,
    from_escnn_group,
    gspace_point_group,
    representation_from_escnn,
    to_escnn_element,
    to_escnn_group,
)

POINT_GROUPS = [CyclicGroup(4), DihedralGroup(4)]


def _gspace(group: CyclicGroup | DihedralGroup) -> object:
    return (
        gspaces.rot2dOnR2(group.n)
        if isinstance(group, CyclicGroup)
        else gspaces.flipRot2dOnR2(group.n)
    )


@pytest.mark.parametrize("group", [*POINT_GROUPS, CyclicGroup(3), DihedralGroup(6)], ids=repr)
def test_group_and_element_round_trip(group):
    eg = to_escnn_group(group)
    assert eg.order() == group.order()
    assert from_escnn_group(eg) == group
    for i, g in enumerate(group.elements()):
        e = to_escnn_element(group, g)
        # same index in escnn's element list, and the round trip is the identity
        assert eg.elements.index(e) == i
        assert from_escnn_element(e) == g


@pytest.mark.parametrize("group", [*POINT_GROUPS, CyclicGroup(3), DihedralGroup(6)], ids=repr)
def test_element_map_is_a_homomorphism(group):
    for a in group.elements():
        for b in group.elements():
            assert to_escnn_element(group, group.compose(a, b)) == to_escnn_element(
                group, a
            ) @ to_escnn_element(group, b)
        assert to_escnn_element(group, group.inverse(a)) == ~to_escnn_element(group, a)


@pytest.mark.parametrize("group", POINT_GROUPS, ids=repr)
def test_image_action_matches_escnn_transform(group):
    # our rotation is torch.rot90 on the last two axes and our reflection torch.flip of the last axis
    gs = _gspace(group)
    assert gspace_point_group(gs) == group
    x = torch.randn(2, 1, 5, 5, dtype=torch.float64)
    ft = enn.FieldType(gs, [gs.trivial_repr])
    for g in group.elements():
        theirs = enn.GeometricTensor(x, ft).transform(to_escnn_element(group, g, gs)).tensor
        assert torch.equal(GridField().act(group, g, x), theirs), g
    r = group.make(1)
    assert torch.equal(GridField().act(group, r, x), torch.rot90(x, 1, dims=(-2, -1)))
    if isinstance(group, DihedralGroup):
        assert torch.equal(
            GridField().act(group, group.make(0, True), x), torch.flip(x, dims=(-1,))
        )


def _explicit_lifted_action(group, g, x):
    """Independent construction: out[:, :, j] = sum_k P[j, k] in[:, :, k] with P[h·k, k] = 1."""
    n = group.order()
    table = group.cayley_table()
    i = group.index(g)
    permutation_matrix = torch.zeros(n, n, dtype=x.dtype)
    for k in range(n):
        permutation_matrix[table[i][k], k] = 1.0
    spatial = x
    if group.is_reflection(g):
        spatial = torch.flip(spatial, dims=(-1,))
    spatial = torch.rot90(spatial, group.rotation(g) * (4 // group.n), dims=(-2, -1))
    return torch.einsum("jk,bckyx->bcjyx", permutation_matrix, spatial)


@pytest.mark.parametrize("group", POINT_GROUPS, ids=repr)
def test_lifted_field_matches_escnn_regular_and_explicit_permutations(group):
    gs = _gspace(group)
    n = group.order()
    channels = 3
    x = torch.randn(2, channels, n, 6, 6, dtype=torch.float64)
    ft = enn.FieldType(gs, [gs.regular_repr] * channels)
    field = LiftedField(group)
    for g in group.elements():
        ours = field.act(group, g, x)
        # escnn: the group axis is the regular representation's fibre, laid out as channels
        theirs = (
            enn.GeometricTensor(x.reshape(2, channels * n, 6, 6), ft)
            .transform(to_escnn_element(group, g, gs))
            .tensor.reshape(2, channels, n, 6, 6)
        )
        # escnn builds its regular representation through a change of basis: equal up to rounding
        assert torch.allclose(ours, theirs, rtol=0, atol=1e-12), g
        assert torch.equal(ours, _explicit_lifted_action(group, g, x)), g


@pytest.mark.parametrize("group", POINT_GROUPS, ids=repr)
def test_regular_representation_matches_escnn(group):
    ours = RegularRepresentation(group)
    eg = to_escnn_group(group)
    for g in group.elements():
        theirs = torch.as_tensor(
            eg.regular_representation(to_escnn_element(group, g)), dtype=torch.float64
        )
        assert torch.allclose(ours.matrix(g), theirs, rtol=0, atol=1e-12), g


@pytest.mark.parametrize("group", POINT_GROUPS, ids=repr)
def test_wrapped_representation(group):
    eg = to_escnn_group(group)
    irrep = eg.irrep(1, 1) if isinstance(group, DihedralGroup) else eg.irrep(1)
    rep = representation_from_escnn(irrep)
    assert isinstance(rep, MatrixRepresentation)
    assert rep.group == group and rep.dim == 2
    for a in group.elements():
        for b in group.elements():
            # a representation: ρ(ab) = ρ(a) ρ(b)
            assert torch.allclose(
                rep.matrix(group.compose(a, b)), rep.matrix(a) @ rep.matrix(b), atol=1e-12
            )
    # the standard representation of our rotation is the 2x2 rotation matrix
    m = rep.matrix(group.make(1))
    assert torch.allclose(
        m, torch.tensor([[0.0, -1.0], [1.0, 0.0]], dtype=torch.float64), atol=1e-12
    )


@pytest.mark.parametrize("group", POINT_GROUPS, ids=repr)
def test_field_type_conversion_acts_like_escnn(group):
    gs = _gspace(group)
    irrep = gs.irrep(1, 1) if isinstance(group, DihedralGroup) else gs.irrep(1)
    ft = enn.FieldType(gs, [gs.regular_repr, gs.trivial_repr, irrep, gs.regular_repr])
    field = field_type_from_escnn(ft)
    assert isinstance(field, GridField) and field.channels is not None
    assert field.channels.dim == ft.size
    x = torch.randn(2, ft.size, 7, 7, dtype=torch.float64)
    for g in group.elements():
        theirs = enn.GeometricTensor(x, ft).transform(to_escnn_element(group, g, gs)).tensor
        ours = field.act(group, g, x)
        assert torch.allclose(ours, theirs, rtol=0, atol=1e-12), g
    # the same field type under the roto-translation group: translation part rolls, point part as above
    roto = p4(7) if isinstance(group, CyclicGroup) else p4m(7)
    g = roto.element(((2, 5), group.make(1).value))
    expected = torch.roll(field.act(group, group.make(1), x), shifts=(2, 5), dims=(-2, -1))
    assert torch.allclose(field.act(roto, g, x), expected, rtol=0, atol=1e-12)


def test_other_flip_axis_is_read_geometrically():
    gs = gspaces.flipRot2dOnR2(4, axis=0.0)
    group = gspace_point_group(gs)
    assert group == DihedralGroup(4)
    x = torch.randn(1, 1, 5, 5, dtype=torch.float64)
    ft = enn.FieldType(gs, [gs.trivial_repr, gs.regular_repr])
    field = field_type_from_escnn(ft)
    y = torch.randn(1, ft.size, 5, 5, dtype=torch.float64)
    for g in group.elements():
        e = to_escnn_element(group, g, gs)
        assert from_escnn_element(e, gs) == g
        theirs = enn.GeometricTensor(x, enn.FieldType(gs, [gs.trivial_repr])).transform(e).tensor
        assert torch.equal(GridField().act(group, g, x), theirs), g
        assert torch.allclose(
            field.act(group, g, y),
            enn.GeometricTensor(y, ft).transform(e).tensor,
            rtol=0,
            atol=1e-12,
        ), g
    # escnn's flip (m=1, r=0) of this gspace is our rho^2 sigma
    assert from_escnn_element(gs.fibergroup.element((1, 0), "int"), gs) == group.make(2, True)


def test_flip_only_and_trivial_gspaces():
    assert gspace_point_group(gspaces.flip2dOnR2()) == DihedralGroup(1)
    assert gspace_point_group(gspaces.trivialOnR2()) == CyclicGroup(1)
    gs = gspaces.flip2dOnR2()
    ft = enn.FieldType(gs, [gs.regular_repr])
    field = field_type_from_escnn(ft)
    group = DihedralGroup(1)
    x = torch.randn(1, 2, 4, 4, dtype=torch.float64)
    for g in group.elements():
        e = to_escnn_element(group, g, gs)
        assert from_escnn_element(e, gs) == g
        theirs = enn.GeometricTensor(x, ft).transform(e).tensor
        assert torch.allclose(field.act(group, g, x), theirs, rtol=0, atol=1e-12)


def test_unsupported_inputs_raise_clear_errors():
    with pytest.raises(GroupError, match="finite cyclic or dihedral fibre group"):
        gspace_point_group(gspaces.rot2dOnR2(-1))
    with pytest.raises(GroupError, match="flip-only gspace with axis"):
        gspace_point_group(gspaces.flip2dOnR2(axis=0.0))
    with pytest.raises(GroupError, match="multiple of"):
        gspace_point_group(gspaces.flipRot2dOnR2(4, axis=math.pi / 8))
    with pytest.raises(GroupError, match="CyclicGroup or DihedralGroup"):
        to_escnn_group(p4(4))  # type: ignore[arg-type]
    with pytest.raises(GroupError, match="cyclic_group or dihedral_group"):
        from_escnn_group(escnn.group.so2_group())
    with pytest.raises(GroupError, match="expected an element of D4"):
        to_escnn_element(CyclicGroup(4), 1, gspaces.flipRot2dOnR2(4))


def test_core_does_not_import_interop():
    """No module outside groupattn.interop imports it or escnn (statically, at any depth)."""
    import ast
    from pathlib import Path

    import groupattn

    root = Path(groupattn.__file__).parent
    # The one exception: the ``escnn_hybrid`` registry model imports escnn and the interop
    # adapters lazily, inside functions (when a model is built), never at module level;
    # ``tests/test_escnn_hybrid.py`` checks that importing groupattn.models imports neither.
    lazy_only = {Path("models/_escnn_hybrid.py")}
    offenders = []
    for path in root.rglob("*.py"):
        if "interop" in path.relative_to(root).parts:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        nodes = (
            [
                n
                for stmt in tree.body
                if not isinstance(stmt, ast.FunctionDef | ast.ClassDef)
                for n in ast.walk(stmt)
            ]
            + [
                n
                for cls in tree.body
                if isinstance(cls, ast.ClassDef)
                for stmt in cls.body
                if not isinstance(stmt, ast.FunctionDef)
                for n in ast.walk(stmt)
            ]
            if path.relative_to(root) in lazy_only
            else list(ast.walk(tree))
        )
        for node in nodes:
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [("." * node.level) + (node.module or "")]
            else:
                continue
            if any(n.split(".")[0] == "escnn" or "interop" in n for n in names):
                offenders.append(f"{path.relative_to(root)}:{node.lineno}")
    assert not offenders, offenders
