"""Learned absolute position encodings of lifted fields: free (the plain ViT baseline of the
C4/D4 ViT) and tied over the point group's orbits (equivariant about the grid centre)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from .._deprecation import renamed_arguments
from .._errors import ConfigurationError, ShapeError
from ..actions import LiftedField
from ..actions._spatial import embed_point_element
from ..contracts import Contract
from ..contracts._module import check_floating_input
from ..groups import Group, GroupError, PointGroup
from ..groups._named import _point_group_from_name
from ._constants import constant_cache
from ._group import _grid_size

__all__ = ["LiftedAbsolutePositionalEncoding", "LiftedOrbitPositionalEncoding"]


class LiftedAbsolutePositionalEncoding(nn.Module):
    """A learned embedding per position and group element, added to a lifted field (baselines only).

    ``x + P`` with ``P`` of shape ``(dim, |H|, h, w)``: the lifted-field counterpart of
    [`AbsolutePositionalEncoding`][groupattn.positional.AbsolutePositionalEncoding] (which
    encodes tokens ``(B, N, C)``). Formerly ``groupattn.nn.AbsolutePositionEmbedding``
    (that name is a deprecated alias for one release).

    Contract: *breaks* for every group that moves positions ("absolute positional
    encoding is not invariant").

    Shapes: ``(B, dim, |H|, h, w) → (B, dim, |H|, h, w)``.

    Parameters
    ----------
    dim
        Width ``C`` per group element.
    point_group
        ``H`` (instance or name).
    grid
        Spatial size ``(h, w)`` of the lifted field, or one int for a square one.

    Notes
    -----
    Deprecated aliases (one release): ``channels`` → ``dim``, ``size`` → ``grid``.

    Raises
    ------
    GroupError
        For an unknown point group.
    ConfigurationError
        For a grid that is not one or two ints of at least 1.
    ShapeError
        In ``forward``, for an input that is not ``(B, dim, |H|, h, w)``.
    """

    @renamed_arguments(channels="dim", size="grid")
    def __init__(
        self, dim: int, point_group: PointGroup | str, grid: int | tuple[int, int]
    ) -> None:
        super().__init__()
        name = type(self).__name__
        self.point_group = _point_group_from_name(point_group, name)
        self.dim = dim
        self.grid = _grid_size(grid, name)
        self.embedding = nn.Parameter(torch.randn(dim, self.point_group.order(), *self.grid) * 0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Add the embedding."""
        if x.dim() != 5 or x.shape[1:] != self.embedding.shape:
            raise ShapeError(
                f"{type(self).__name__}: expected a lifted field (B, {', '.join(map(str, self.embedding.shape))}), "
                f"got {tuple(x.shape)}"
            )
        check_floating_input(x, type(self).__name__)
        return x + self.embedding

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """Breaks: absolute positions are not invariant."""
        t = LiftedField(self.point_group)
        return Contract.breaks(
            f"absolute positional encoding is not invariant under {group.name}", t, t
        )

    def extra_repr(self) -> str:
        return f"dim={self.dim}, point_group={self.point_group.name}, grid={self.grid}"


@constant_cache(maxsize=64)
def _orbit_index(point_group: PointGroup, height: int, width: int) -> tuple[torch.Tensor, int]:
    """Orbit ids ``(|H|, h, w)`` of the entries of a lifted field under ``H`` about the grid centre.

    ``H`` acts on (group element, position) pairs by ``h · (k, p) = (h k, h p)``; the action on
    the first factor is free, so there are exactly ``h · w`` orbits. Returns the ids
    (``0 … h·w − 1``, numbered by first appearance) and their count.
    """
    order = point_group.order()
    ids = torch.arange(order * height * width, dtype=torch.float64).reshape(
        1, 1, order, height, width
    )
    field = LiftedField(point_group)
    smallest = ids.clone()
    for g in point_group.elements():
        smallest = torch.minimum(smallest, field.act(point_group, g, ids))
    _, index = torch.unique(smallest.reshape(-1), return_inverse=True)
    return index.reshape(order, height, width), int(index.max()) + 1


class LiftedOrbitPositionalEncoding(nn.Module):
    """A learned absolute position encoding of a lifted field, tied over the point group's orbits.

    ``x + P`` with ``P[:, k, y, x] = E[:, orbit(k, (y, x))]``: one learned vector per orbit of
    (group element, position) under the point group ``H`` acting about the grid's centre,
    ``h · (k, p) = (h k, h p)``. The table is therefore invariant under ``H``'s action on
    lifted fields — ``P(h k, h p) = P(k, p)`` — and adding it commutes with every rotation
    (reflection) of ``H`` about the centre, for every value of ``E``. ``H`` acts freely on
    the group axis, so there are exactly ``h · w`` orbits: as many learned vectors as the
    free [`LiftedAbsolutePositionalEncoding`][groupattn.positional.LiftedAbsolutePositionalEncoding]
    of the trivial group (the plain ViT's per-position embedding). With it, a token
    knows where it sits relative to the centre — its distance and its direction relative to
    its own orientation — which the relative encodings of group attention do not give.

    Contract: *equivariant* under ``H`` (rotations and reflections about the centre of an
    ``h × w`` grid, ``h = w`` for a quarter turn) and its subgroups; *breaks* under
    translations ("absolute positions move with the grid, not with the content").

    Shapes: ``(B, dim, |H|, h, w) → (B, dim, |H|, h, w)``.

    Parameters
    ----------
    dim
        Width ``C`` per group element.
    point_group
        ``H`` (instance or name), e.g. ``"C4"`` or ``"D4"``.
    grid
        Spatial size ``(h, w)`` of the lifted field, or one int for a square one.

    Raises
    ------
    GroupError
        For an unknown point group.
    ConfigurationError
        For a grid that is not one or two ints of at least 1, or a non-square grid with a
        point group containing quarter turns.
    ShapeError
        In ``forward``, for an input that is not ``(B, dim, |H|, h, w)``.
    """

    def __init__(
        self, dim: int, point_group: PointGroup | str, grid: int | tuple[int, int]
    ) -> None:
        super().__init__()
        name = type(self).__name__
        self.point_group = _point_group_from_name(point_group, name)
        self.dim = dim
        self.grid = _grid_size(grid, name)
        if self.grid[0] != self.grid[1] and any(
            (2 * self.point_group.rotation(g)) % self.point_group.n
            for g in self.point_group.elements()
        ):
            raise ConfigurationError(
                f"{name}: expected a square grid for {self.point_group.name} (quarter turns), got {self.grid}"
            )
        _, orbits = _orbit_index(self.point_group, *self.grid)
        self.embedding = nn.Parameter(torch.randn(dim, orbits) * 0.02)

    def table(self) -> torch.Tensor:
        """The tied table ``P`` of shape ``(dim, |H|, h, w)``."""
        index, _ = _orbit_index(self.point_group, *self.grid)
        return self.embedding[:, index.to(self.embedding.device)]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Add the tied table."""
        expected = (self.dim, self.point_group.order(), *self.grid)
        if x.dim() != 5 or tuple(x.shape[1:]) != expected:
            raise ShapeError(
                f"{type(self).__name__}: expected a lifted field (B, {', '.join(map(str, expected))}), "
                f"got {tuple(x.shape)}"
            )
        check_floating_input(x, type(self).__name__)
        return x + self.table()

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """Equivariant under the point group about the centre; breaks under translations."""
        t = LiftedField(self.point_group)
        if isinstance(group, PointGroup):
            try:
                for generator in group.generators():
                    embed_point_element(generator, self.point_group, type(self).__name__)
            except GroupError as err:
                return Contract.unknown(f"{type(self).__name__}: {err}", t)
            return Contract.equivariant(t, t)
        return Contract.breaks(
            f"absolute positions move with the grid, not with the content: not invariant under {group.name}",
            t,
            t,
        )

    def extra_repr(self) -> str:
        return f"dim={self.dim}, point_group={self.point_group.name}, grid={self.grid}"
