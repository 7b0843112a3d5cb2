"""Invariant positional encodings for roto-translations T ⋊ H (GSA-Nets style).

Lifting self-attention (X → X × H) and group self-attention (X × H → X × H) are
equivariant to T ⋊ H exactly when their positional information is a function of the
*orbital* of the (output, key) pair. For an output token ``(h, x_i)`` and a key pixel
``x_j`` (lifting) or key token ``(k, x_j)`` (group), the orbital is determined by

* the key offset seen from the output's frame, ``h⁻¹ (x_j − x_i)``, and
* for group layers, the key's group element seen from the output's frame, ``h⁻¹ k``.

[`relative_geometry`][groupattn.positional.relative_geometry] enumerates these invariants once per input shape (cached) as a
small table plus a long index tensor mapping every ``(h, query, key)`` triple to its
table entry. The encodings below produce one value per table entry (and head); layers
gather the bias from the table with the index
([`GroupPositionalEncoding.bias`][groupattn.positional.GroupPositionalEncoding.bias], the gather of
[`OrbitalBias`][groupattn.positional.OrbitalBias]), so the bias is constant on orbitals by
construction. For point groups acting exactly on the grid the table entries are the
orbitals of ``GSet.lifted_grid`` (group layers) on pairs, enumerated here by a fast
closed form instead of union–find; [`OrbitalTableEncoding`][groupattn.positional.OrbitalTableEncoding], one learned value per
orbital, is a specialisation of [`IndexedTable`][groupattn.positional.IndexedTable] — the same
"index by orbital" class as [`OrbitalBias`][groupattn.positional.OrbitalBias] and
[`CirculantRelativeBias`][groupattn.positional.CirculantRelativeBias] — with that closed form as its labels.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import cast

import torch
from torch import nn

from .._deprecation import DeprecatedAttribute, renamed_arguments
from .._errors import ConfigurationError, ShapeError
from ..groups import GroupError, PointGroup, integer_matrix, real_matrix
from ._constants import constant_cache
from ._orbital import IndexedTable, gather_pair_table

__all__ = [
    "ContinuousGroupEncoding",
    "GroupPositionalEncoding",
    "OrbitalTableEncoding",
    "RelativeGeometry",
    "WindowTiling",
    "point_group_tables",
    "relative_geometry",
    "window_tiling",
]


@dataclass(frozen=True, eq=False)
class PointGroupTables:
    """Index tables of a finite point group (element ``i`` is ``elements()[i]``).

    Attributes
    ----------
    inverse
        ``(|H|,)``: index of ``h⁻¹``.
    relative
        ``(|H|, |H|)``: ``relative[h, k]`` is the index of ``h⁻¹ k``.
    matrices
        ``(|H|, 2, 2)`` float64: the matrix of ``h⁻¹`` acting on ``(y, x)`` offsets
        (exact integers for quarter turns and reflections).
    """

    inverse: torch.Tensor
    relative: torch.Tensor
    matrices: torch.Tensor


def _snap(value: float) -> float:
    rounded = float(round(value))
    return rounded if abs(value - rounded) < 1e-12 else value


@constant_cache(maxsize=None)
def point_group_tables(point_group: PointGroup) -> PointGroupTables:
    """The inverse and relative-element tables and the ``h⁻¹`` matrices of a point group.

    Rotations by multiples of 90° (and the reflection) get exact integer matrices even
    for C8, C16, …, so the C4 subgroup of a finer group acts exactly.
    """
    elements = point_group.elements()
    inverse = torch.tensor([point_group.index(point_group.inverse(h)) for h in elements])
    relative = torch.tensor(
        [
            [point_group.index(point_group.compose(point_group.inverse(h), k)) for k in elements]
            for h in elements
        ]
    )
    mats = []
    for h in elements:
        h_inv = point_group.inverse(h)
        if point_group.acts_exactly_on_grid:
            m = integer_matrix(point_group, h_inv)
            mats.append([[float(m[0][0]), float(m[0][1])], [float(m[1][0]), float(m[1][1])]])
        else:
            m2 = real_matrix(point_group, h_inv)
            mats.append([[_snap(m2[0][0]), _snap(m2[0][1])], [_snap(m2[1][0]), _snap(m2[1][1])]])
    return PointGroupTables(inverse, relative, torch.tensor(mats, dtype=torch.float64))


@dataclass(frozen=True, eq=False)
class RelativeGeometry:
    """The invariant table and gather index of one layer kind and input shape.

    Attributes
    ----------
    point_group
        The point group ``H``.
    lifting
        ``True`` for lifting layers (keys are pixels), ``False`` for group layers (keys
        are ``(k, pixel)`` tokens).
    neighbourhood
        ``None`` for global attention, else the odd side ``k`` of the ``k × k`` window.
    height, width
        The spatial grid.
    circular
        Whether offsets are taken on the torus (exact point groups) or in the plane
        (finer rotations, zero outside the image).
    spatial_offsets
        ``(S, 2)`` float64: the spatial invariant ``h⁻¹ (x_j − x_i)`` of each spatial
        entry (a representative offset).
    scale
        A length to normalise the offsets by (half the grid or window side).
    index
        Long tensor of table entries; entry ``e`` has spatial entry ``e // |H|`` and
        relative group element ``e % |H|`` for group layers (``e`` itself is the spatial
        entry for lifting layers). Shapes: lifting global ``(|H|, N, N)``, group global
        ``(|H|, N, |H|, N)``, lifting local ``(|H|, k²)``, group local ``(|H|, k², |H|)``,
        with ``N = height · width`` pixels in row-major order and window offsets in
        row-major order.
    neighbours
        Local layers: long tensor ``(N, k²)``, the pixel index of every window position
        (circular; for planar geometries an out-of-grid position is ``N``, a zero token).
    num_entries
        The table size ``T`` (``S`` for lifting, ``S · |H|`` for group layers).
    exact
        Whether the table entries are the orbitals of ``T ⋊ H`` exactly (point groups
        acting exactly on the grid).
    """

    point_group: PointGroup
    lifting: bool
    neighbourhood: int | None
    height: int
    width: int
    circular: bool
    spatial_offsets: torch.Tensor
    scale: float
    index: torch.Tensor
    num_entries: int
    exact: bool
    neighbours: torch.Tensor | None = None

    @property
    def group_order(self) -> int:
        """``|H|``."""
        return self.point_group.order()  # type: ignore[no-any-return]

    def group_entries(self) -> torch.Tensor:
        """``(T,)``: the relative group element of each entry (zeros for lifting layers)."""
        n = self.group_order
        if self.lifting:
            return torch.zeros(self.num_entries, dtype=torch.long)
        return torch.arange(self.num_entries) % n

    def spatial_entries(self) -> torch.Tensor:
        """``(T,)``: the spatial entry (row of ``spatial_offsets``) of each entry."""
        if self.lifting:
            return torch.arange(self.num_entries)
        return torch.arange(self.num_entries) // self.group_order


def _has_quarter_turn(point_group: PointGroup) -> bool:
    return any((2 * point_group.rotation(h)) % point_group.n != 0 for h in point_group.elements())


def check_grid(
    point_group: PointGroup, height: int, width: int, neighbourhood: int | None, module: str
) -> None:
    """Raise an error for a grid or neighbourhood the layer cannot handle.

    Rotation groups other than C1, C2, D1, D2 need a square grid, and a neighbourhood
    must fit in the grid ([`ShapeError`][groupattn.ShapeError]); a neighbourhood must be odd and
    positive ([`ConfigurationError`][groupattn.ConfigurationError]).
    """
    if height != width and _has_quarter_turn(point_group):
        raise ShapeError(
            f"{module}: expected a square grid for the rotation group {point_group.name}, got {height}x{width}"
        )
    if neighbourhood is not None:
        if neighbourhood < 1 or neighbourhood % 2 == 0:
            raise ConfigurationError(
                f"{module}: expected an odd neighbourhood size k >= 1, got {neighbourhood}"
            )
        if neighbourhood > min(height, width):
            raise ShapeError(
                f"{module}: expected a neighbourhood of at most the grid side {min(height, width)}, "
                f"got {neighbourhood} on a {height}x{width} grid"
            )


def _centered(residue: torch.Tensor, n: int) -> torch.Tensor:
    return (residue + n // 2) % n - n // 2


@constant_cache(maxsize=64)
def relative_geometry(
    point_group: PointGroup,
    height: int,
    width: int,
    neighbourhood: int | None = None,
    lifting: bool = False,
) -> RelativeGeometry:
    """Enumerate the orbital invariants of a lifting or group attention layer (cached).

    For point groups acting exactly on the grid (C1, C2, C4, D1, D2, D4) offsets live
    on the ``height × width`` torus and the table entries are exactly the orbitals of
    ``T ⋊ H`` on (output, key) pairs: a table indexed by them is invariant by
    construction. For finer rotations (C8, C16, …) offsets are planar and rotated
    continuously, one entry per ``(h, offset)``; only a continuous encoding of them
    makes sense and equivariance is approximate.

    Parameters
    ----------
    point_group
        The point group ``H``.
    height, width
        The spatial grid.
    neighbourhood
        ``None`` (global) or the odd window side ``k``.
    lifting
        Lifting (keys are pixels) or group layer (keys are lifted tokens).

    Returns
    -------
    RelativeGeometry

    Raises
    ------
    ShapeError
        For a non-square grid under 90° rotations or a neighbourhood larger than the grid.
    ConfigurationError
        For an even or non-positive neighbourhood.
    """
    module = "relative_geometry"
    check_grid(point_group, height, width, neighbourhood, module)
    tables = point_group_tables(point_group)
    n_group = point_group.order()
    exact = point_group.acts_exactly_on_grid
    mats = tables.matrices  # (|H|, 2, 2) of h⁻¹
    if neighbourhood is not None:
        k = neighbourhood
        r = k // 2
        grid = torch.stack(
            torch.meshgrid(torch.arange(-r, r + 1), torch.arange(-r, r + 1), indexing="ij"), -1
        )
        deltas = grid.reshape(-1, 2).to(torch.float64)  # (k², 2) row-major
        rotated = torch.einsum("gab,mb->gma", mats, deltas)  # (|H|, k², 2)
        if exact:
            ri = rotated.round().long()
            spatial_index = (ri[..., 0] + r) * k + (ri[..., 1] + r)  # (|H|, k²)
            offsets = deltas
        else:
            spatial_index = torch.arange(n_group * k * k).reshape(n_group, k * k)
            offsets = rotated.reshape(-1, 2)
        scale = float(max(r, 1))
        circular = exact
        ys, xs = torch.meshgrid(torch.arange(height), torch.arange(width), indexing="ij")
        ny = ys.reshape(-1, 1) + grid.reshape(-1, 2)[None, :, 0]  # (N, k²)
        nx = xs.reshape(-1, 1) + grid.reshape(-1, 2)[None, :, 1]
        if circular:
            neighbours = (ny % height) * width + (nx % width)
        else:
            inside = (ny >= 0) & (ny < height) & (nx >= 0) & (nx < width)
            neighbours = torch.where(inside, ny * width + nx, torch.full_like(ny, height * width))
    else:
        ys, xs = torch.meshgrid(torch.arange(height), torch.arange(width), indexing="ij")
        pixels = torch.stack([ys.reshape(-1), xs.reshape(-1)], -1)  # (N, 2)
        diff = pixels[None, :, :] - pixels[:, None, :]  # (N_query, N_key, 2): x_j − x_i
        scale = float(max(max(height, width) / 2.0, 1.0))
        if exact:
            modulus = torch.tensor([height, width])
            diff = diff % modulus
            imats = mats.round().long()
            rotated = torch.einsum("gab,ijb->gija", imats, diff) % modulus  # (|H|, N, N, 2)
            spatial_index = rotated[..., 0] * width + rotated[..., 1]
            res = torch.stack(
                torch.meshgrid(torch.arange(height), torch.arange(width), indexing="ij"), -1
            ).reshape(-1, 2)
            offsets = torch.stack(
                [_centered(res[:, 0], height), _centered(res[:, 1], width)], -1
            ).double()
            circular = True
        else:
            span_y, span_x = 2 * height - 1, 2 * width - 1
            dy = torch.arange(-(height - 1), height)
            dx = torch.arange(-(width - 1), width)
            plane = (
                torch.stack(torch.meshgrid(dy, dx, indexing="ij"), -1).reshape(-1, 2).double()
            )  # (D, 2)
            count = span_y * span_x
            rotated = torch.einsum("gab,mb->gma", mats, plane)  # (|H|, D, 2)
            offsets = rotated.reshape(-1, 2)
            local = (diff[..., 0] + height - 1) * span_x + (diff[..., 1] + width - 1)  # (N, N)
            spatial_index = torch.arange(n_group)[:, None, None] * count + local[None]
            circular = False
        neighbours = None
    num_spatial = offsets.shape[0]
    if lifting:
        index = spatial_index
        num_entries = num_spatial
    else:
        rel = tables.relative  # (|H|, |H|)
        if neighbourhood is not None:
            index = spatial_index[:, :, None] * n_group + rel[:, None, :]  # (|H|, k², |H|)
        else:
            index = (
                spatial_index[:, :, None, :] * n_group + rel[:, None, :, None]
            )  # (|H|, N, |H|, N)
        num_entries = num_spatial * n_group
    return RelativeGeometry(
        point_group=point_group,
        lifting=lifting,
        neighbourhood=neighbourhood,
        height=height,
        width=width,
        circular=circular,
        spatial_offsets=offsets.to(torch.float64),
        scale=scale,
        index=index.contiguous(),
        num_entries=num_entries,
        exact=exact,
        neighbours=None if neighbours is None else neighbours.contiguous(),
    )


class GroupPositionalEncoding(nn.Module):
    """Base class: one value per orbital entry (and head), optionally one vector per head.

    ``forward(geometry)`` returns ``(bias, vectors)``: ``bias`` of shape ``(heads, T)``
    (an additive attention bias, or ``None``) and ``vectors`` of shape
    ``(T, heads, d)`` (for the query-dependent content × position term
    ``q · r(h⁻¹(x_j − x_i), h⁻¹k)``, or ``None``). Layers gather both with
    ``geometry.index``; since every entry is a function of the orbital invariants, the
    attention logits are invariant and the layer equivariant.

    Contract: the encoding itself is invariant — it depends on orbitals only.

    Parameters
    ----------
    num_heads
        Number of attention heads.
    vector_dim
        Per-head width ``d`` of the query-dependent term; 0 disables it.
    additive
        Whether to produce the additive bias.
    """

    vector_channels = DeprecatedAttribute("vector_dim")

    @renamed_arguments(vector_channels="vector_dim")
    def __init__(self, num_heads: int, vector_dim: int = 0, additive: bool = True) -> None:
        super().__init__()
        if num_heads < 1:
            raise ConfigurationError(
                f"{type(self).__name__}: expected num_heads >= 1, got {num_heads}"
            )
        if vector_dim < 0:
            raise ConfigurationError(
                f"{type(self).__name__}: expected vector_dim >= 0, got {vector_dim}"
            )
        if not additive and vector_dim == 0:
            raise ConfigurationError(
                f"{type(self).__name__}: expected an additive bias or a query-dependent term, got neither"
            )
        self.num_heads = num_heads
        self.vector_dim = vector_dim
        self.additive = additive

    @property
    def out_features(self) -> int:
        """Values per table entry: ``heads`` (bias) + ``heads · d`` (vectors)."""
        return self.num_heads * ((1 if self.additive else 0) + self.vector_dim)

    def entry_values(self, geometry: RelativeGeometry) -> torch.Tensor:
        """``(T, out_features)``: the raw values of every table entry."""
        raise NotImplementedError

    def forward(
        self, geometry: RelativeGeometry
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        values = self.entry_values(geometry)
        heads = self.num_heads
        bias = values[:, :heads].transpose(0, 1) if self.additive else None
        vectors = None
        if self.vector_dim:
            start = heads if self.additive else 0
            vectors = values[:, start:].reshape(values.shape[0], heads, self.vector_dim)
        return bias, vectors

    def bias(self, geometry: RelativeGeometry) -> torch.Tensor:
        """The additive bias gathered to every ``(h, query, key)`` triple: ``(heads, *geometry.index.shape)``.

        The "index a table by orbital" gather of
        [`OrbitalBias`][groupattn.positional.OrbitalBias]
        ([`gather_pair_table`][groupattn.positional.gather_pair_table] of the ``(heads, T)`` table by
        the geometry's orbital index); a pure gather, so the bias is constant on the
        orbitals.

        Raises
        ------
        ConfigurationError
            If the encoding has no additive bias.
        ShapeError
            For a table of fixed geometry, if the geometry is not the table's.
        """
        table, _ = self(geometry)
        if table is None:
            raise ConfigurationError(
                f"{type(self).__name__}: expected an additive encoding for bias(), got additive=False"
            )
        return self._gather_entries(table, geometry)

    def _gather_entries(self, table: torch.Tensor, geometry: RelativeGeometry) -> torch.Tensor:
        """``(heads, T)`` → ``(heads, *geometry.index.shape)``, read by ``geometry.index``."""
        return gather_pair_table(table, geometry.index.to(table.device))

    def contract(self, group: object, input_type: object = None) -> object:
        """The encoding depends on orbitals only: invariant (see the class docstring)."""
        from ..contracts import Contract

        return Contract.invariant(input_type)


def _grid_size(size: object, module: str) -> tuple[int, int]:
    """``(height, width)`` from one int or a pair of ints, each at least 1."""
    pair = (size, size) if not isinstance(size, (tuple, list)) else tuple(size)
    try:
        if isinstance(size, bool) or len(pair) != 2 or any(isinstance(v, bool) for v in pair):
            raise TypeError
        height, width = (operator.index(v) for v in pair)
    except TypeError:
        raise ConfigurationError(
            f"{module}: expected a grid size (height, width) of ints, got {size!r}"
        ) from None
    if height < 1 or width < 1:
        raise ConfigurationError(
            f"{module}: expected a grid size of at least 1x1, got {height}x{width}"
        )
    return height, width


class OrbitalTableEncoding(GroupPositionalEncoding, IndexedTable):
    """A learned table: one value per orbital per head (and optionally a vector).

    The roto-translation case of [`IndexedTable`][groupattn.positional.IndexedTable], the class
    [`OrbitalBias`][groupattn.positional.OrbitalBias] and
    [`CirculantRelativeBias`][groupattn.positional.CirculantRelativeBias] specialise too: its labels,
    [`orbital_index`][groupattn.positional.OrbitalTableEncoding.orbital_index], are the orbitals of ``T ⋊ H`` on the (output, key) pairs of
    the layer, enumerated once at construction by the closed form of
    [`relative_geometry`][groupattn.positional.relative_geometry] (no union–find) and copied into the module — a plain
    tensor attribute, not a parameter or buffer, so not in the ``state_dict`` (which
    holds ``table`` only). Memory: the index has one long per (output, key) pair, e.g.
    ``(|H|·h·w)²`` for a global group layer.

    Needs the geometry at construction because the number of orbitals depends on it:
    for global layers the grid size, for local layers only the window (one table serves
    every grid the window fits in). Only point groups acting exactly on the grid (C1,
    C2, C4, D1, D2, D4) have finitely many, exactly invariant orbitals.

    Contract: invariant (it depends on orbitals only).

    Shapes: ``forward(geometry)`` → bias ``(heads, T)`` (or ``None``) and vectors
    ``(T, heads, d)`` (or ``None``); [`bias`][groupattn.positional.GroupPositionalEncoding.bias] → ``(heads, *orbital_index.shape)``:
    lifting global ``(|H|, N, N)``, group global ``(|H|, N, |H|, N)``, lifting local
    ``(|H|, k²)``, group local ``(|H|, k², |H|)``.

    Parameters
    ----------
    point_group
        ``H``.
    num_heads, vector_dim, additive
        As for [`GroupPositionalEncoding`][groupattn.positional.GroupPositionalEncoding].
    lifting
        Lifting (pixels as keys) or group layer.
    neighbourhood
        Window side, or ``None`` for global attention (then ``grid`` is required).
    grid
        Grid ``(height, width)`` (or one int for a square grid) for global layers.
    init_std
        Standard deviation of the initial table.

    Notes
    -----
    Deprecated aliases (one release): ``size`` → ``grid``, ``vector_channels`` →
    ``vector_dim`` (arguments and attributes).

    Raises
    ------
    GroupError
        For a point group that does not act exactly on the grid.
    ConfigurationError
        For a global table without ``grid`` or with a side below 1, or an even
        neighbourhood.
    ShapeError
        For a grid the point group cannot act on (non-square under quarter turns).

    Examples
    --------
    >>> from groupattn.groups import CyclicGroup
    >>> encoding = OrbitalTableEncoding(CyclicGroup(4), num_heads=2, lifting=False, grid=3)
    >>> encoding.table.shape, encoding.orbital_index.shape, encoding.num_labels
    (torch.Size([36, 2]), torch.Size([4, 9, 4, 9]), 36)
    """

    size = DeprecatedAttribute("grid")

    @renamed_arguments(size="grid", vector_channels="vector_dim")
    def __init__(
        self,
        point_group: PointGroup,
        num_heads: int,
        lifting: bool,
        neighbourhood: int | None = None,
        grid: int | tuple[int, int] | None = None,
        vector_dim: int = 0,
        additive: bool = True,
        init_std: float = 1.0,
    ) -> None:
        super().__init__(num_heads, vector_dim, additive)
        name = "OrbitalTableEncoding"
        if not point_group.acts_exactly_on_grid:
            raise GroupError(
                f"{name}: expected a point group acting exactly on the grid (C1, C2, C4, D1, D2, D4), "
                f"got {point_group.name}; use ContinuousGroupEncoding for finer rotations"
            )
        if neighbourhood is None and grid is None:
            raise ConfigurationError(
                f"{name}: expected the grid size for a global table, got grid=None"
            )
        self.point_group = point_group
        self.lifting = lifting
        self.neighbourhood = neighbourhood
        self.grid: tuple[int, int] | None = None
        if neighbourhood is not None:
            height = width = neighbourhood  # local orbitals depend on the window only
        else:
            self.grid = height, width = _grid_size(grid, name)
        check_grid(point_group, height, width, neighbourhood, name)
        geometry = relative_geometry(
            point_group, height, width, neighbourhood, lifting
        )  # the fast closed form
        self._set_labels(geometry.index, geometry.num_entries)
        self.table = nn.Parameter(torch.randn(geometry.num_entries, self.out_features) * init_std)

    @property
    def orbital_index(self) -> torch.Tensor:
        """Long tensor of the orbital of every (output, key) pair (see [`RelativeGeometry.index`][groupattn.positional.RelativeGeometry])."""
        return self.pair_index

    def _describe_geometry(self, geometry: RelativeGeometry | None = None) -> str:
        if geometry is None:
            grid = f"{self.grid[0]}x{self.grid[1]}" if self.grid else f"window {self.neighbourhood}"
            kind, group, count = self.lifting, self.point_group.name, self.num_labels
        else:
            window = geometry.neighbourhood
            grid = f"{geometry.height}x{geometry.width}" if window is None else f"window {window}"
            kind, group, count = geometry.lifting, geometry.point_group.name, geometry.num_entries
        return f"{grid} geometry ({'lifting' if kind else 'group'} layer, {group}) with {count} orbitals"

    def _check_geometry(self, geometry: RelativeGeometry) -> None:
        """Raise [`ShapeError`][groupattn.ShapeError] unless ``geometry`` is the one the table was built for."""
        same = (
            geometry.point_group == self.point_group
            and geometry.lifting == self.lifting
            and geometry.neighbourhood == self.neighbourhood
            and (self.grid is None or (geometry.height, geometry.width) == self.grid)
            and geometry.num_entries == self.num_labels
            and geometry.index.shape == self.pair_index.shape
        )
        if not same:
            raise ShapeError(
                f"OrbitalTableEncoding: expected a {self._describe_geometry()}, "
                f"got a {self._describe_geometry(geometry)}"
            )

    def entry_values(self, geometry: RelativeGeometry) -> torch.Tensor:
        """``(T, out_features)``: the learned table, after checking the geometry is the table's.

        Raises
        ------
        ShapeError
            For a geometry of another point group, kind, window or grid.
        """
        self._check_geometry(geometry)
        return self.table

    def _gather_entries(self, table: torch.Tensor, geometry: RelativeGeometry) -> torch.Tensor:
        """The shared gather ([`gather`][groupattn.positional.IndexedTable.gather]) by the table's
        own orbital index: ``geometry.index`` for every geometry of [`relative_geometry`][groupattn.positional.relative_geometry]
        that [`entry_values`][groupattn.positional.OrbitalTableEncoding.entry_values] accepts (same point group, kind, window or grid)."""
        return self.gather(table)


class ContinuousGroupEncoding(GroupPositionalEncoding):
    """GSA-Nets style encoding: an MLP of the rotated offset ``h⁻¹(x_j − x_i)`` plus a
    learned embedding of the relative group element ``h⁻¹ k`` (group layers).

    The MLP runs on the table of distinct invariants only (``S`` spatial entries, at
    most ``height · width`` for exact groups), not on every ``(h, query, key)``
    triple; the layer then gathers. Offsets are normalised by the geometry's scale.
    Works for any point group: for C8, C16, … offsets are rotated continuously.

    Parameters
    ----------
    point_group
        ``H``.
    num_heads, vector_dim, additive
        As for [`GroupPositionalEncoding`][groupattn.positional.GroupPositionalEncoding].
    hidden
        Width of the MLP's hidden layer.
    lifting
        For lifting layers (no relative group element, no group embedding).
    init_std
        Scale of the initial encoding (the output layer's weights have standard deviation
        ``init_std / √hidden``; the group embedding ``init_std``). Order one, so heads
        attend differently from the start: at rotation-equivariant layers the position
        term is what lets a head see orientation.
    """

    @renamed_arguments(vector_channels="vector_dim")
    def __init__(
        self,
        point_group: PointGroup,
        num_heads: int,
        vector_dim: int = 0,
        additive: bool = True,
        hidden: int = 16,
        lifting: bool = False,
        init_std: float = 1.0,
    ) -> None:
        super().__init__(num_heads, vector_dim, additive)
        self.point_group = point_group
        self.lifting = lifting
        first, last = (
            nn.Linear(2, hidden),
            nn.Linear(hidden, self.out_features),
        )  # in this order (seeded inits)
        self.mlp = nn.Sequential(first, nn.GELU(), last)
        nn.init.normal_(last.weight, std=init_std / hidden**0.5)
        self.group_embedding = (
            None
            if lifting
            else nn.Parameter(torch.randn(point_group.order(), self.out_features) * init_std)
        )

    def entry_values(self, geometry: RelativeGeometry) -> torch.Tensor:
        weight = cast(nn.Linear, self.mlp[0]).weight
        coords = (geometry.spatial_offsets / geometry.scale).to(
            dtype=weight.dtype, device=weight.device
        )
        spatial = self.mlp(coords)  # (S, F)
        if geometry.lifting != self.lifting:
            kind = "lifting" if self.lifting else "group"
            raise ShapeError(
                f"ContinuousGroupEncoding: expected a {kind} geometry, got the other kind"
            )
        if self.group_embedding is None:
            return spatial
        table = spatial[:, None, :] + self.group_embedding[None, :, :]  # (S, |H|, F)
        return table.reshape(-1, self.out_features)


@dataclass(frozen=True, eq=False)
class WindowTiling:
    """Tiles of a grid with their halos, for batched local (``k × k``) attention.

    Local attention is computed tile by tile: the queries of a ``ty × tx`` tile attend
    to the ``(ty + k − 1) × (tx + k − 1)`` halo around it, with keys outside each query's
    own window masked out. Every query still sees exactly its ``k²`` window positions
    (once each, as ``k`` is at most the grid side), so the result equals per-pixel local
    attention; the attention kernel gets a few large problems instead of one tiny
    problem per pixel.

    Attributes
    ----------
    tile
        ``(ty, tx)``, dividing the grid.
    queries
        ``(tiles, ty·tx)``: pixel index of each tile's queries (row-major in the tile).
    untile
        ``(N,)``: position of pixel ``i`` in the flattened ``queries``.
    halo
        ``(tiles, S)``: pixel index of each halo position (``N`` for an out-of-grid
        position of a planar geometry, a zero token).
    window
        ``(ty·tx, S)``: the window offset (row of the ``k × k`` window, row-major) of
        each (query, halo position) pair, or ``-1`` outside the query's window.
    """

    tile: tuple[int, int]
    queries: torch.Tensor
    untile: torch.Tensor
    halo: torch.Tensor
    window: torch.Tensor


def _tile_side(side: int, limit: int) -> int:
    return max(t for t in range(1, min(side, limit) + 1) if side % t == 0)


@constant_cache(maxsize=64)
def window_tiling(
    height: int, width: int, neighbourhood: int, circular: bool, max_tile: int = 8
) -> WindowTiling:
    """The cached [`WindowTiling`][groupattn.positional.WindowTiling] of a grid (tile sides: largest divisors ≤ ``max_tile``)."""
    k = neighbourhood
    r = k // 2
    ty, tx = _tile_side(height, max_tile), _tile_side(width, max_tile)
    hy, hx = ty + k - 1, tx + k - 1
    tiles_y, tiles_x = height // ty, width // tx
    ay = torch.arange(tiles_y).repeat_interleave(tiles_x)  # (tiles,)
    ax = torch.arange(tiles_x).repeat(tiles_y)
    qy, qx = torch.meshgrid(torch.arange(ty), torch.arange(tx), indexing="ij")
    qy, qx = qy.reshape(-1), qx.reshape(-1)
    queries = (ay[:, None] * ty + qy[None]) * width + (
        ax[:, None] * tx + qx[None]
    )  # (tiles, ty·tx)
    untile = torch.empty(height * width, dtype=torch.long)
    untile[queries.reshape(-1)] = torch.arange(height * width)
    uy, ux = torch.meshgrid(torch.arange(hy), torch.arange(hx), indexing="ij")
    uy, ux = uy.reshape(-1), ux.reshape(-1)
    py = ay[:, None] * ty + uy[None] - r  # (tiles, S)
    px = ax[:, None] * tx + ux[None] - r
    if circular:
        halo = (py % height) * width + (px % width)
    else:
        inside = (py >= 0) & (py < height) & (px >= 0) & (px < width)
        halo = torch.where(inside, py * width + px, torch.full_like(py, height * width))
    dy = uy[None, :] - qy[:, None] - r  # (ty·tx, S)
    dx = ux[None, :] - qx[:, None] - r
    inside_window = (dy.abs() <= r) & (dx.abs() <= r)
    window = torch.where(inside_window, (dy + r) * k + (dx + r), torch.full_like(dy, -1))
    return WindowTiling(
        (ty, tx), queries.contiguous(), untile, halo.contiguous(), window.contiguous()
    )
