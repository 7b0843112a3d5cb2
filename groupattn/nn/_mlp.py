"""The token-wise feed-forward network of a transformer block."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..actions import TokenField
from ..contracts import Contract
from ..contracts._module import check_floating_input
from ..groups import Group

__all__ = ["MLP"]


class MLP(nn.Module):
    """``Linear → GELU → Linear`` applied to every token independently.

    Contract: *equivariant* under any group that permutes tokens (input type = output
    type; by default ``TokenField(grid, prefix=prefix)``).

    Shapes: ``(B, N, dim) → (B, N, out_dim)``.

    Parameters
    ----------
    dim
        Token width.
    hidden
        Hidden width.
    out_dim
        Output width (``dim`` by default).
    grid, prefix
        Token layout stated in the contract.
    """

    def __init__(
        self,
        dim: int,
        hidden: int,
        out_dim: int | None = None,
        grid: tuple[int, int] = (1, 1),
        prefix: int = 0,
    ) -> None:
        super().__init__()
        self.grid, self.prefix = grid, prefix
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, out_dim or dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the MLP token-wise."""
        check_floating_input(x, "MLP")
        return self.fc2(self.act(self.fc1(x)))

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """Equivariant (token-wise)."""
        field = input_type or TokenField(self.grid, prefix=self.prefix)
        return Contract.equivariant(field, field)
