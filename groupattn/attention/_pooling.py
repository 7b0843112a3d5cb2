"""Invariant heads: mean pooling and learned-query attention pooling over grid tokens."""

from __future__ import annotations

from typing import Any

import torch
from einops import rearrange
from torch import nn

from ..actions import InvariantField, TokenField
from ..contracts import Contract
from ..groups import Group
from ..positional._translation import _check_grid, _check_tokens, _grid_stride
from ._global import _check_heads
from ._kernel import attend

__all__ = ["AttentionPooling", "MeanPooling"]


def _invariant_contract(module: str, group: Group, grid: tuple[int, int], prefix: int) -> Contract:
    field = TokenField(grid, prefix=prefix)
    if _grid_stride(group, grid) is None:
        return Contract.unknown(f"{module}: promises nothing for {group.name}", field)
    return Contract.invariant(field, InvariantField())


class MeanPooling(nn.Module):
    """Average of the grid tokens (prefix tokens are skipped).

    Contract: *invariant* under every permutation of the grid tokens, in particular
    ``TorusTranslations(h, w)``.

    Shapes: ``(B, prefix + h·w, C) → (B, C)``.

    Parameters
    ----------
    grid
        Token grid ``(h, w)``.
    prefix
        Leading non-grid tokens to skip.
    """

    def __init__(self, grid: tuple[int, int], prefix: int = 0) -> None:
        super().__init__()
        self.grid = _check_grid("MeanPooling", grid)
        self.prefix = prefix

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Mean over the grid tokens."""
        _check_tokens("MeanPooling", x, self.grid, self.prefix)
        return x[:, self.prefix :].mean(dim=1)

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """Invariant."""
        return _invariant_contract("MeanPooling", group, self.grid, self.prefix)

    def extra_repr(self) -> str:
        return f"grid={self.grid}, prefix={self.prefix}"


class AttentionPooling(nn.Module):
    """Learned queries attend to the grid tokens (no positional bias); the results are concatenated and projected.

    Attention with queries that do not depend on position is invariant to every
    permutation of the keys and values. Contract: *invariant* under
    ``TorusTranslations(h, w)``.

    Shapes: ``(B, prefix + h·w, C) → (B, C)``.

    Parameters
    ----------
    dim
        Token width ``C``.
    heads
        Number of heads (divides ``dim``).
    grid
        Token grid ``(h, w)``.
    num_queries
        Number of learned queries.
    prefix
        Leading non-grid tokens to skip.
    """

    def __init__(
        self, dim: int, heads: int, grid: tuple[int, int], num_queries: int = 1, prefix: int = 0
    ) -> None:
        super().__init__()
        _check_heads("AttentionPooling", dim, heads)
        self.grid = _check_grid("AttentionPooling", grid)
        self.dim, self.heads, self.num_queries, self.prefix = dim, heads, num_queries, prefix
        self.queries = nn.Parameter(torch.randn(1, num_queries, dim) * 0.02)
        self.key_value = nn.Linear(dim, 2 * dim)
        self.proj = nn.Linear(num_queries * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Pool the grid tokens into one vector per sample."""
        _check_tokens("AttentionPooling", x, self.grid, self.prefix, self.dim)
        k, v = rearrange(
            self.key_value(x[:, self.prefix :]), "b n (two h d) -> two b h n d", two=2, h=self.heads
        )
        q = rearrange(self.queries, "one q (h d) -> one h q d", h=self.heads).expand(x.shape[0], -1, -1, -1)
        out = attend(q.contiguous(), k, v, module="AttentionPooling")
        return self.proj(rearrange(out, "b h q d -> b (q h d)"))

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """Invariant."""
        return _invariant_contract("AttentionPooling", group, self.grid, self.prefix)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, heads={self.heads}, grid={self.grid}, num_queries={self.num_queries}"
