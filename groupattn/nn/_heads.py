"""The optional class token and its read-out."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..actions import InvariantField, TokenField, check_grid, torus_stride
from ..contracts import Contract, EquivariantModule
from ..groups import Group

__all__ = ["ClassToken", "ClassTokenReadout"]


class ClassToken(EquivariantModule):
    """Prepend a learned class token to the grid tokens.

    An [`EquivariantModule`][groupattn.contracts.EquivariantModule] from ``TokenField(grid)`` to
    ``TokenField(grid, prefix=1)``: calling it checks the input is ``(B, h·w, dim)``.

    The class token is the same for every input, so it is invariant; with attention
    whose bias treats it the same from every position it stays invariant. Contract:
    *equivariant* from ``TokenField(grid)`` to ``TokenField(grid, prefix=1)``.

    Shapes: ``(B, h·w, dim) → (B, 1 + h·w, dim)``.

    Parameters
    ----------
    dim
        Token width.
    grid
        Token grid ``(h, w)``.
    """

    floating_input = True

    def __init__(self, dim: int, grid: tuple[int, int]) -> None:
        grid = check_grid(grid, "ClassToken")
        super().__init__(TokenField(grid), TokenField(grid, prefix=1), in_channels=dim)
        self.dim, self.grid = dim, grid
        self.token = nn.Parameter(torch.randn(1, 1, dim) * 0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Prepend the class token."""
        return torch.cat([self.token.expand(x.shape[0], -1, -1), x], dim=1)

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """Equivariant, adding one invariant prefix token."""
        field = TokenField(self.grid)
        if torus_stride(group, self.grid) is None:
            return Contract.unknown(f"ClassToken: promises nothing for {group.name}", field)
        return Contract.equivariant(field, TokenField(self.grid, prefix=1))


class ClassTokenReadout(EquivariantModule):
    """Read out the class token (the first token).

    An [`EquivariantModule`][groupattn.contracts.EquivariantModule] from ``TokenField(grid,
    prefix=1)`` to [`InvariantField`][groupattn.actions.InvariantField]: calling it checks the
    input is ``(B, 1 + h·w, C)``.

    Contract: *invariant* — prefix tokens of a [`TokenField`][groupattn.actions.TokenField] do
    not move.

    Shapes: ``(B, 1 + h·w, C) → (B, C)``.

    Parameters
    ----------
    grid
        Token grid ``(h, w)`` behind the class token.
    """

    def __init__(self, grid: tuple[int, int]) -> None:
        grid = check_grid(grid, "ClassTokenReadout")
        super().__init__(TokenField(grid, prefix=1), InvariantField())
        self.grid = grid

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The first token."""
        return x[:, 0]

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """Invariant."""
        field = TokenField(self.grid, prefix=1)
        if torus_stride(group, self.grid) is None:
            return Contract.unknown(f"ClassTokenReadout: promises nothing for {group.name}", field)
        return Contract.invariant(field, InvariantField())
