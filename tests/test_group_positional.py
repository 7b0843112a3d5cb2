"""Invariant positional encodings for T ⋊ H: orbital geometry, tables, continuous encodings."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from groupattn.actions import GSet
from groupattn.contracts import Status
from groupattn.groups import (
    CyclicGroup,
    DihedralGroup,
    GroupError,
    PointGroup,
    RotoTranslationGroup,
    p4,
    p4m,
)
from groupattn.positional import (
    ContinuousGroupEncoding,
    OrbitalTableEncoding,
    RelativeGeometry,
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
def test_lifting_table_entries_are_the_orbitals_of_output_key_pairs(
    group: RotoTranslationGroup,
) -> None:
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
    compose = torch.tensor(
        [[pg.index(pg.compose(x, y)) for y in pg.elements()] for x in pg.elements()]
    )
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
    table = OrbitalTableEncoding(CyclicGroup(4), num_heads=3, lifting=False, grid=5, vector_dim=2)
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
    encoding = ContinuousGroupEncoding(DihedralGroup(4), num_heads=2, vector_dim=3)
    geometry = relative_geometry(DihedralGroup(4), 6, 6, None, False)
    calls: list[int] = []
    encoding.mlp.register_forward_hook(
        lambda module, inputs, output: calls.append(inputs[0].shape[0])
    )
    bias, vectors = encoding(geometry)
    assert calls == [36]  # one MLP row per torus offset, not per (h, query, key)
    assert bias is not None and bias.shape == (2, 36 * 8)
    assert vectors is not None and vectors.shape == (36 * 8, 2, 3)
    assert encoding.contract(p4m(6)).kind == Status.INVARIANT


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


# ---------------------------------------------------------------- the orbital table on the shared code path

TABLE_CASES = [
    (pg, lifting, neighbourhood, vector_channels, additive)
    for pg in EXACT
    for lifting in (False, True)
    for neighbourhood in (None, 3)
    for vector_channels, additive in ((0, True), (2, True), (3, False))
]


def _grid_of(pg: PointGroup) -> tuple[int, int]:
    """A square grid for quarter turns, a non-square one where the group allows it."""
    return (4, 4) if pg.name in ("C4", "D4") else (3, 5)


def _previous_table_encoding(
    pg: PointGroup,
    heads: int,
    lifting: bool,
    neighbourhood: int | None,
    size: tuple[int, int],
    vector_channels: int,
    additive: bool,
    init_std: float,
    seed: int,
) -> tuple[
    torch.Tensor, RelativeGeometry, torch.Tensor | None, torch.Tensor | None, torch.Tensor | None
]:
    """What ``OrbitalTableEncoding`` computed before it moved onto ``IndexedTable``, spelled out.

    That implementation drew, as the only random draw of its constructor, one normal
    table ``(T, heads · (additive + d)) · init_std`` with ``T`` = spatial entries (``size²``
    or ``k²``) times ``|H|`` for group layers; ``forward`` returned the first ``heads``
    columns transposed as the ``(heads, T)`` bias table and the rest as ``(T, heads, d)``
    vectors, and ``bias`` gathered the bias table by ``relative_geometry(...).index``. The
    oracle redoes this with advanced indexing (not ``index_select``).

    Returns ``(table, geometry, bias table, vectors, gathered bias)``.
    """
    torch.manual_seed(seed)
    height, width = size
    spatial = neighbourhood * neighbourhood if neighbourhood else height * width
    entries = spatial * (1 if lifting else pg.order())
    table = torch.randn(entries, heads * (int(additive) + vector_channels)) * init_std
    geometry = relative_geometry(pg, height, width, neighbourhood, lifting)
    bias_table = table[:, :heads].T if additive else None
    vectors = None
    if vector_channels:
        vectors = table[:, heads * int(additive) :].reshape(entries, heads, vector_channels)
    gathered = None if bias_table is None else bias_table[:, geometry.index]
    return table, geometry, bias_table, vectors, gathered


def _same_or_none(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    return (a is None and b is None) or (a is not None and b is not None and torch.equal(a, b))


@pytest.mark.parametrize(
    ("pg", "lifting", "neighbourhood", "vector_channels", "additive"), TABLE_CASES
)
def test_orbital_table_outputs_are_unchanged_bit_for_bit(
    pg: PointGroup, lifting: bool, neighbourhood: int | None, vector_channels: int, additive: bool
) -> None:
    size, heads, seed = _grid_of(pg), 3, 11
    table, geometry, bias_table, vectors, gathered = _previous_table_encoding(
        pg, heads, lifting, neighbourhood, size, vector_channels, additive, 0.7, seed
    )
    torch.manual_seed(seed)
    encoding = OrbitalTableEncoding(
        pg,
        heads,
        lifting,
        neighbourhood,
        None if neighbourhood else size,
        vector_channels,
        additive,
        init_std=0.7,
    )
    assert list(encoding.state_dict()) == ["table"] and not list(encoding.buffers())
    assert torch.equal(encoding.table, table)
    ours_bias, ours_vectors = encoding(geometry)
    assert _same_or_none(ours_bias, bias_table) and _same_or_none(ours_vectors, vectors)
    if gathered is not None:
        assert torch.equal(encoding.bias(geometry), gathered)
    if neighbourhood is not None:  # local tables serve every grid the window fits in
        other = relative_geometry(pg, 5, 5, neighbourhood, lifting)
        ours_bias, _ = encoding(other)
        assert _same_or_none(ours_bias, bias_table)


def test_orbital_table_loads_an_old_format_state_dict() -> None:
    """Checkpoints hold the learned table only, under the key ``table`` (the index was never state)."""
    pg = DihedralGroup(4)
    table, geometry, _, vectors, gathered = _previous_table_encoding(
        pg, 2, False, None, (4, 4), 2, True, 1.0, 5
    )
    encoding = OrbitalTableEncoding(pg, 2, lifting=False, grid=4, vector_dim=2)
    encoding.load_state_dict({"table": table.clone()})  # strict
    assert torch.equal(encoding.bias(geometry), gathered) and _same_or_none(
        encoding(geometry)[1], vectors
    )
    from groupattn.attention import GroupSelfAttention

    layer = GroupSelfAttention(4, 4, pg, num_heads=2, encoding="table", grid=4, query_position=True)
    assert list(layer.state_dict()) == [
        "qkv.weight",
        "qkv.bias",
        "proj.weight",
        "proj.bias",
        "encoding.table",
    ]
    old = {**layer.state_dict(), "encoding.table": table.clone()}
    layer.load_state_dict(old)  # strict
    assert torch.equal(layer.encoding.bias(geometry), gathered)


@pytest.mark.parametrize("lifting", [False, True], ids=["group", "lifting"])
@pytest.mark.parametrize("group", [p4(4), p4m(4)], ids=lambda g: g.name)
def test_orbital_table_index_is_invariant_under_every_element(
    group: RotoTranslationGroup, lifting: bool
) -> None:
    pg, size = group.point_group, group.size
    encoding = OrbitalTableEncoding(pg, 1, lifting=lifting, grid=size)
    n = size * size
    lifted, pixels = GSet.lifted_grid(group, pg, size, size), GSet.grid(group, size, size)
    index = encoding.orbital_index.reshape(pg.order() * n, -1)  # (lifted output token, key)
    for g in group.elements():
        rows = lifted.permutation(g)
        cols = pixels.permutation(g) if lifting else rows
        assert torch.equal(
            index[rows[:, None], cols[None, :]], index
        )  # index[g·i, g·j] = index[i, j]
    if lifting:
        assert torch.unique(index).numel() == encoding.num_labels == n
    else:  # exactly the orbitals, from the closed form (no union–find in the encoding)
        assert (
            _same_partition(index, lifted.orbitals())
            and encoding.num_labels == lifted.num_orbitals()
        )


def test_orbital_table_owns_its_index() -> None:
    """Editing one table's index in place reaches neither another table nor relative_geometry's cache."""
    geometry = relative_geometry(DihedralGroup(4), 4, 4, None, False)
    cached = geometry.index.clone()
    first = OrbitalTableEncoding(DihedralGroup(4), 1, lifting=False, grid=4)
    second = OrbitalTableEncoding(DihedralGroup(4), 1, lifting=False, grid=4)
    before = second.bias(geometry)
    with torch.no_grad():
        first.orbital_index.fill_(0)
    assert torch.equal(geometry.index, cached) and torch.equal(second.orbital_index, cached)
    assert torch.equal(second.bias(geometry), before)
    assert torch.equal(first.bias(geometry), first.table[:1, :1].expand_as(before))
    assert not list(first.buffers()) and list(first.state_dict()) == ["table"]


def test_orbital_table_rejects_a_geometry_that_is_not_its_own() -> None:
    d2 = OrbitalTableEncoding(DihedralGroup(2), 1, lifting=False, grid=(3, 5))
    assert d2.bias(relative_geometry(DihedralGroup(2), 3, 5)).shape == (1, 4, 15, 4, 15)
    cases = [
        (
            relative_geometry(DihedralGroup(2), 5, 3),
            r"got a 5x3 geometry \(group layer, D2\) with 60 orbitals",
        ),
        (
            relative_geometry(CyclicGroup(4), 4, 4, 3),
            r"got a window 3 geometry \(group layer, C4\) with 36 orbitals",
        ),
        (
            relative_geometry(DihedralGroup(2), 3, 5, None, True),
            r"got a 3x5 geometry \(lifting layer, D2\)",
        ),
    ]
    for geometry, message in cases:
        with pytest.raises(
            GroupError,
            match=r"OrbitalTableEncoding: expected a 3x5 geometry \(group layer, D2\) "
            r"with 60 orbitals, " + message,
        ):
            d2(geometry)
    # same number of orbitals, another point group (C4 and D2 have order 4): rejected too
    c4 = OrbitalTableEncoding(CyclicGroup(4), 1, lifting=True, neighbourhood=3)
    with pytest.raises(GroupError, match=r"expected a window 3 geometry \(lifting layer, C4\)"):
        c4.bias(relative_geometry(DihedralGroup(2), 5, 5, 3, True))
    for size, message in [
        ((4, 6), "OrbitalTableEncoding: expected a square grid for the rotation group C4, got 4x6"),
        ((0, 4), "OrbitalTableEncoding: expected a grid size of at least 1x1, got 0x4"),
        (
            (2.5, 3),
            r"OrbitalTableEncoding: expected a grid size \(height, width\) of ints, got \(2\.5, 3\)",
        ),
        ((4, 4, 4), r"expected a grid size \(height, width\) of ints, got \(4, 4, 4\)"),
    ]:
        with pytest.raises(GroupError, match=message):
            OrbitalTableEncoding(CyclicGroup(4), 1, lifting=False, grid=size)  # type: ignore[arg-type]
    with pytest.raises(
        GroupError, match="OrbitalTableEncoding: expected an odd neighbourhood size k >= 1, got 4"
    ):
        OrbitalTableEncoding(CyclicGroup(4), 1, lifting=True, neighbourhood=4)
