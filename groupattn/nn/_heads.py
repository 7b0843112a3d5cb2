"""The optional class token and its read-out."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..actions import InvariantField, TokenField
from ..contracts import Contract
from ..groups import Group
from ..positional._translation import _check_grid, _check_tokens, _grid_stride

__all__ = ["ClassToken", "ClassTokenReadout"]


class ClassToken(nn.Module):
    """Prepend a learned class token to the grid tokens.

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

    def __init__(self, dim: int, grid: tuple[int, int]) -> None:
        super().__init__()
        self.dim, self.grid = dim, _check_grid("ClassToken", grid)
        self.token = nn.Parameter(torch.randn(1, 1, dim) * 0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Prepend the class token."""
        _check_tokens("ClassToken", x, self.grid, 0, self.dim)
        return torch.cat([self.token.expand(x.shape[0], -1, -1), x], dim=1)

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """Equivariant, adding one invariant prefix token."""
        field = TokenField(self.grid)
        if _grid_stride(group, self.grid) is None:
            return Contract.unknown(f"ClassToken: promises nothing for {group.name}", field)
        return Contract.equivariant(field, TokenField(self.grid, prefix=1))


class ClassTokenReadout(nn.Module):
    """Read out the class token (the first token).

    Contract: *invariant* — prefix tokens of a :class:`~groupattn.actions.TokenField` do
    not move.

    Shapes: ``(B, 1 + h·w, C) → (B, C)``.

    Parameters
    ----------
    grid
        Token grid ``(h, w)`` behind the class token.
    """

    def __init__(self, grid: tuple[int, int]) -> None:
        super().__init__()
        self.grid = _check_grid("ClassTokenReadout", grid)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The first token."""
        _check_tokens("ClassTokenReadout", x, self.grid, 1)
        return x[:, 0]

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """Invariant."""
        field = TokenField(self.grid, prefix=1)
        if _grid_stride(group, self.grid) is None:
            return Contract.unknown(f"ClassTokenReadout: promises nothing for {group.name}", field)
        return Contract.invariant(field, InvariantField())
