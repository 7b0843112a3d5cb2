"""Invariant heads: mean pooling and learned-query attention pooling over tokens."""

from __future__ import annotations

from typing import Any

import torch
from einops import rearrange
from torch import nn

from .._deprecation import DeprecatedAttribute, renamed_arguments
from .._errors import ShapeError
from ..actions import (
    FieldType,
    GSetField,
    InvariantField,
    TokenField,
    TrivialRepresentation,
    check_grid,
)
from ..contracts import Contract, EquivariantModule
from ..groups import Group, GroupError
from ..positional import token_permutation
from ._global import check_heads
from ._kernel import attend

__all__ = ["AttentionPooling", "MeanPooling"]


def _default_field(grid: tuple[int, int] | None, prefix: int) -> FieldType | None:
    return None if grid is None else TokenField(grid, prefix=prefix)


def _invariant_contract(
    module: str, group: Group, field: FieldType | None, prefix: int, input_type: Any = None
) -> Contract:
    """*Invariant* if ``group`` permutes the pooled tokens among themselves.

    Pooling over tokens ``prefix … N−1`` with a function symmetric in them (a mean,
    attention with position-free queries) is invariant exactly when every element maps
    that set of tokens onto itself and the channels are trivial; checked on the
    generators by acting on a float64 probe through the input type.
    """
    if isinstance(input_type, TokenField | GSetField):
        field = input_type
    elif field is None and isinstance(input_type, FieldType):
        field = input_type
    if field is None:
        return Contract.unknown(
            f"{module}: promises nothing without a token layout (give grid=... or an input type)",
            input_type,
        )
    channels = getattr(field, "channels", None)
    if channels is not None and not isinstance(channels, TrivialRepresentation):
        return Contract.unknown(
            f"{module}: the pooled vector moves by the channel representation {channels!r}; "
            f"there is no field type for it",
            field,
        )
    n = field.num_tokens if isinstance(field, TokenField) else getattr(field, "num_points", None)
    if not isinstance(field, TokenField | GSetField) or n is None:
        return Contract.unknown(
            f"{module}: expected a token layout (B, N, C), got {field.describe()}", field
        )
    if prefix > n:
        return Contract.unknown(
            f"{module}: expected at least {prefix} tokens, got {field.describe()}", field
        )
    pooled = torch.arange(prefix, n)
    try:
        for g in group.generators():
            perm = token_permutation(field, group, g, n)
            if not torch.equal(torch.sort(perm[prefix:]).values, pooled):
                return Contract.breaks(
                    f"{module}: {group.name} moves tokens between the skipped prefix and the pooled tokens",
                    field,
                    InvariantField(),
                )
    except (GroupError, ShapeError) as error:  # ShapeError: its own class from the next release on
        return Contract.unknown(f"{module}: promises nothing for {group.name} ({error})", field)
    return Contract.invariant(field, InvariantField())


class MeanPooling(nn.Module):
    """Average of the tokens (``prefix`` leading tokens are skipped).

    The mean is symmetric in the tokens, so it is invariant under every permutation of
    them: under translations or rotations of a token grid, ``S_n`` on a set, a graph's
    automorphisms, any G-set.

    Contract: *invariant* under every group whose action on the input type permutes
    the pooled tokens among themselves with trivial channels (checked exactly on the
    generators): ``TorusTranslations(h, w)`` on ``TokenField((h, w))`` by default, and
    any group on a [`GSetField`][groupattn.actions.GSetField] /
    [`SetField`][groupattn.actions.SetField] input type passed to [`contract`][groupattn.attention.MeanPooling.contract].
    *Unknown* for a group that does not act on the layout.

    Shapes: ``(B, prefix + N, C) → (B, C)``.

    Parameters
    ----------
    grid
        Token grid ``(h, w)`` (checked in ``forward`` and the default input type of the
        contract), or ``None`` for any number of tokens (the contract then needs an
        input type, e.g. ``GSetField(gset)``).
    prefix
        Leading tokens to skip (e.g. a class token).
    """

    def __init__(self, grid: tuple[int, int] | None = None, prefix: int = 0) -> None:
        super().__init__()
        self.grid = None if grid is None else check_grid(grid, "MeanPooling")
        self.prefix = prefix

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Mean over the tokens after the prefix."""
        if self.grid is not None:
            TokenField(self.grid, prefix=self.prefix).check(x, "MeanPooling")
        elif x.dim() != 3 or x.shape[1] <= self.prefix:
            raise ShapeError(
                f"MeanPooling: expected tokens (B, N, C) with N > {self.prefix}, got a tensor of shape {tuple(x.shape)}"
            )
        return x[:, self.prefix :].mean(dim=1)

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """Invariant (see the class docstring)."""
        return _invariant_contract(
            "MeanPooling", group, _default_field(self.grid, self.prefix), self.prefix, input_type
        )

    def extra_repr(self) -> str:
        return f"grid={self.grid}, prefix={self.prefix}"


class AttentionPooling(EquivariantModule):
    """Learned queries attend to the grid tokens (no positional bias); the results are concatenated and projected.

    An [`EquivariantModule`][groupattn.contracts.EquivariantModule] from ``TokenField(grid,
    prefix=prefix)`` to [`InvariantField`][groupattn.actions.InvariantField]: calling it checks
    the input is ``(B, prefix + h·w, dim)``.

    Attention with queries that do not depend on position is invariant to every
    permutation of the keys and values. Contract: *invariant* under
    ``TorusTranslations(h, w)``, and under any group that permutes the pooled tokens
    of the input type given to [`contract`][groupattn.attention.AttentionPooling.contract] (as [`MeanPooling`][groupattn.attention.MeanPooling]).

    Shapes: ``(B, prefix + h·w, C) → (B, C)``.

    Parameters
    ----------
    dim
        Token width ``C``.
    num_heads
        Number of heads (divides ``dim``).
    grid
        Token grid ``(h, w)``.
    num_queries
        Number of learned queries.
    prefix
        Leading non-grid tokens to skip.
    """

    floating_input = True
    heads = DeprecatedAttribute("num_heads")

    @renamed_arguments(heads="num_heads")
    def __init__(
        self, dim: int, num_heads: int, grid: tuple[int, int], num_queries: int = 1, prefix: int = 0
    ) -> None:
        check_heads(dim, num_heads, "AttentionPooling")
        grid = check_grid(grid, "AttentionPooling")
        super().__init__(TokenField(grid, prefix=prefix), InvariantField(), in_channels=dim)
        self.grid = grid
        self.dim, self.num_heads, self.num_queries, self.prefix = (
            dim,
            num_heads,
            num_queries,
            prefix,
        )
        self.queries = nn.Parameter(torch.randn(1, num_queries, dim) * 0.02)
        self.key_value = nn.Linear(dim, 2 * dim)
        self.proj = nn.Linear(num_queries * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Pool the grid tokens into one vector per sample."""
        k, v = rearrange(
            self.key_value(x[:, self.prefix :]),
            "b n (two h d) -> two b h n d",
            two=2,
            h=self.num_heads,
        )
        q = rearrange(self.queries, "one q (h d) -> one h q d", h=self.num_heads).expand(
            x.shape[0], -1, -1, -1
        )
        out = attend(q.contiguous(), k, v, module="AttentionPooling")
        return self.proj(rearrange(out, "b h q d -> b (q h d)"))

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """Invariant."""
        return _invariant_contract(
            "AttentionPooling",
            group,
            _default_field(self.grid, self.prefix),
            self.prefix,
            input_type,
        )

    def extra_repr(self) -> str:
        return f"dim={self.dim}, num_heads={self.num_heads}, grid={self.grid}, num_queries={self.num_queries}"
