"""A learned absolute position encoding of lifted fields (the plain ViT baseline of the C4/D4 ViT)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from .._deprecation import renamed_arguments
from .._errors import ShapeError
from ..actions import LiftedField
from ..contracts import Contract
from ..contracts._module import check_floating_input
from ..groups import Group, PointGroup
from ..groups._named import _point_group_from_name
from ._group import _grid_size

__all__ = ["LiftedAbsolutePositionalEncoding"]


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
