"""Invariant positional encodings for T ⋊ H: orbital geometry, tables, continuous encodings."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from groupattn.actions import GSet
from groupattn.contracts import Kind
from groupattn.groups import CyclicGroup, DihedralGroup, GroupError, RotoTranslationGroup, p4, p4m
from groupattn.positional import (
    ContinuousGroupEncoding,
    OrbitalTableEncoding,
    point_group_tables,
    relative_geometry,
    window_tiling,
)

EXACT = [CyclicGroup(1), CyclicGroup(2), CyclicGroup(4), DihedralGroup(2), DihedralGroup(4)]


def _same_partition(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two label tensors of equal shape define the same partition."""
    a, b = a.reshape(-1), b.reshape(-1)
    pairs = torch.unique(torch.stack([a, b]), dim=1).shape[1]
    return pairs == torch.unique(a).numel() == torch.unique(b).numel()


@pytest.mark.parametrize("group", [p4(4), p4m(4), p4(3)], ids=lambda g: g.name)
def test_group_table_entries_are_exactly_the_orbitals(group: RotoTranslationGroup) -> None:
    size = group.size
    geometry = relative_geometry(group.point_group, size, size, None, lifting=False)
    n = group.point_group.order() * size * size
    ours = geometry.index.reshape(n, n)
    theirs = GSet.lifted_grid(group, group.point_group, size, size).orbitals()
    assert _same_partition(ours, theirs)
    assert geometry.num_entries == torch.unique(ours).numel()


@pytest.mark.parametrize("group", [p4(5), p4m(4)], ids=lambda g: g.name)
def test_lifting_table_entries_are_the_orbitals_of_output_key_pairs(group: RotoTranslationGroup) -> None:
    size, pg = group.size, group.point_group
    geometry = relative_geometry(pg, size, size, None, lifting=True)
    n = size * size
    index = geometry.index.reshape(pg.order() * n, n)  # (lifted output token, key pixel)
    lifted, pixels = GSet.lifted_grid(group, pg, size, size), GSet.grid(group, size, size)
    for g in group.generators():
        pl, pp = lifted.permutation(g), pixels.permutation(g)
        moved = torch.empty_like(index)
        moved[pl[:, None], pp[None, :]] = index
        assert torch.equal(moved, index)  # invariant
    # complete: p4 acts freely on lifted tokens, so there are |lifted × pixels| / |group| orbitals
    assert torch.unique(index).numel() == n == geometry.num_entries


@settings(max_examples=12)
@given(
    group_index=st.integers(0, len(EXACT) - 1),
    size=st.integers(3, 6),
    neighbourhood=st.sampled_from([1, 3]),
    lifting=st.booleans(),
    element_seed=st.integers(0, 1000),
)
def test_local_geometry_is_invariant(
    group_index: int, size: int, neighbourhood: int, lifting: bool, element_seed: int
) -> None:
    pg = EXACT[group_index]
    geometry = relative_geometry(pg, size, size, neighbourhood, lifting)
    tables = point_group_tables(pg)
    a = pg.elements()[element_seed % pg.order()]
    ai = pg.index(a)
    r = neighbourhood // 2
    deltas = torch.stack(
        torch.meshgrid(torch.arange(-r, r + 1), torch.arange(-r, r + 1), indexing="ij"), -1
    ).reshape(-1, 2)
    m = tables.matrices[tables.inverse[ai]].round().long()  # matrix of a
    moved = deltas @ m.T
    target = (moved[:, 0] + r) * neighbourhood + (moved[:, 1] + r)  # window index of a·δ
    compose = torch.tensor([[pg.index(pg.compose(x, y)) for y in pg.elements()] for x in pg.elements()])
    for h in range(pg.order()):
        ah = int(compose[ai, h])
        if lifting:
            assert torch.equal(geometry.index[ah][target], geometry.index[h])
        else:
            for k in range(pg.order()):
                ak = int(compose[ai, k])
                assert torch.equal(geometry.index[ah][target, ak], geometry.index[h][:, k])


def test_geometry_is_cached_per_shape() -> None:
    a = relative_geometry(CyclicGroup(4), 5, 5, None, False)
    assert relative_geometry(CyclicGroup(4), 5, 5, None, False) is a
    assert relative_geometry(CyclicGroup(4), 6, 6, None, False) is not a


def test_non_square_grid_rejected_for_quarter_turns_but_not_for_d2() -> None:
    with pytest.raises(GroupError, match="square grid"):
        relative_geometry(CyclicGroup(4), 4, 6)
    geometry = relative_geometry(DihedralGroup(2), 4, 6)
    assert geometry.num_entries == 4 * 6 * 4


def test_finer_rotations_use_rotated_planar_offsets() -> None:
    geometry = relative_geometry(CyclicGroup(8), 5, 5, 3, lifting=True)
    assert not geometry.exact and not geometry.circular
    offsets = geometry.spatial_offsets.reshape(8, 9, 2)
    # the 45° element sees the offset (0, 1) rotated by −45°
    assert torch.allclose(offsets[1, 5], torch.tensor([0.5**0.5, 0.5**0.5], dtype=torch.float64))
    # quarter turns stay exact integers
    assert torch.equal(offsets[2], offsets[2].round())


def test_window_tiling_covers_every_window_once() -> None:
    tiling = window_tiling(6, 6, 3, True, 2)
    assert tiling.tile == (2, 2)
    counts = (tiling.window >= 0).sum(dim=1)
    assert torch.all(counts == 9)
    assert torch.equal(tiling.queries.reshape(-1)[tiling.untile], torch.arange(36))


def test_orbital_table_shapes_and_errors() -> None:
    table = OrbitalTableEncoding(CyclicGroup(4), num_heads=3, lifting=False, size=5, vector_channels=2)
    geometry = relative_geometry(CyclicGroup(4), 5, 5, None, False)
    bias, vectors = table(geometry)
    assert bias is not None and bias.shape == (3, 5 * 5 * 4)
    assert vectors is not None and vectors.shape == (5 * 5 * 4, 3, 2)
    with pytest.raises(GroupError, match="expected a 5x5 geometry"):
        table(relative_geometry(CyclicGroup(4), 6, 6, None, False))
    with pytest.raises(GroupError, match="acting exactly on the grid"):
        OrbitalTableEncoding(CyclicGroup(8), 2, lifting=True, neighbourhood=3)
    with pytest.raises(GroupError, match="grid size"):
        OrbitalTableEncoding(CyclicGroup(4), 2, lifting=True)
    with pytest.raises(GroupError, match="neither"):
        OrbitalTableEncoding(CyclicGroup(4), 2, lifting=True, neighbourhood=3, additive=False)


def test_continuous_encoding_runs_on_distinct_invariants_only() -> None:
    encoding = ContinuousGroupEncoding(DihedralGroup(4), num_heads=2, vector_channels=3)
    geometry = relative_geometry(DihedralGroup(4), 6, 6, None, False)
    calls: list[int] = []
    encoding.mlp.register_forward_hook(lambda module, inputs, output: calls.append(inputs[0].shape[0]))
    bias, vectors = encoding(geometry)
    assert calls == [36]  # one MLP row per torus offset, not per (h, query, key)
    assert bias is not None and bias.shape == (2, 36 * 8)
    assert vectors is not None and vectors.shape == (36 * 8, 2, 3)
    assert encoding.contract(p4m(6)).kind == Kind.INVARIANT


def test_encoding_is_a_function_of_the_orbital() -> None:
    """Two (output, key) pairs in the same orbital get the same bias (continuous encoding)."""
    group = p4(4)
    encoding = ContinuousGroupEncoding(group.point_group, num_heads=1)
    torch.nn.init.normal_(encoding.group_embedding)
    geometry = relative_geometry(group.point_group, 4, 4, None, False)
    bias, _ = encoding(geometry)
    assert bias is not None
    n = 4 * 4 * 4
    full = bias[0][geometry.index.reshape(n, n)]
    orbitals = GSet.lifted_grid(group, group.point_group, 4, 4).orbitals()
    for label in torch.unique(orbitals)[:20]:
        values = full[orbitals == label]
        assert torch.all(values == values[0])
