"""Global multi-head self-attention over a token grid, with an optional pairwise bias."""

from __future__ import annotations

from typing import Any, Literal

import torch
from einops import rearrange
from torch import nn

from ..actions import TokenField, check_grid
from ..contracts import Contract, EquivariantModule, Status, contract_of
from ..groups import Group, GroupError
from ..positional import CirculantRelativeBias, ClippedRelativeBias, translation_contract
from ._kernel import attend

__all__ = ["GlobalSelfAttention", "check_heads", "make_relative_bias"]

BiasKind = Literal["circulant", "clipped"] | None


def make_relative_bias(
    kind: BiasKind | nn.Module, grid: tuple[int, int], heads: int, prefix: int = 0
) -> nn.Module | None:
    """Build a relative position bias by name.

    Parameters
    ----------
    kind
        ``"circulant"`` (:class:`~groupattn.positional.CirculantRelativeBias`),
        ``"clipped"`` (:class:`~groupattn.positional.ClippedRelativeBias`), ``None`` (no
        bias) or a ready module returning ``(heads, N, N)``.
    grid, heads, prefix
        As for the bias classes.
    """
    if kind is None or isinstance(kind, nn.Module):
        return kind
    if kind == "circulant":
        return CirculantRelativeBias(grid, heads, prefix)
    if kind == "clipped":
        return ClippedRelativeBias(grid, heads, prefix)
    raise GroupError(f"make_relative_bias: expected 'circulant', 'clipped' or None, got {kind!r}")


def check_heads(dim: int, heads: int, module: str = "check_heads") -> None:
    """Validate a multi-head layer's width: ``heads >= 1`` heads that divide ``dim``.

    Field types say which tensors a layer accepts (see
    :meth:`FieldType.check <groupattn.actions.FieldType.check>`); this checks the one
    constructor argument they do not express, the split of the width into heads.

    Parameters
    ----------
    dim
        The token width ``C``.
    heads
        The number of heads.
    module
        The name the error message starts with (the calling layer).

    Raises
    ------
    GroupError
        ``"{module}: expected a width divisible by the number of heads {heads}, got {dim}"``.

    Examples
    --------
    >>> check_heads(8, 2, "MyAttention")  # fine: two heads of width 4
    """
    if heads < 1 or dim % heads:
        raise GroupError(f"{module}: expected a width divisible by the number of heads {heads}, got {dim}")


class GlobalSelfAttention(EquivariantModule):
    """Multi-head self-attention over all tokens of a grid, plus an optional pairwise bias.

    An :class:`~groupattn.contracts.EquivariantModule` from ``TokenField(grid,
    prefix=prefix)`` to itself: calling it checks the input is
    ``(B, prefix + h·w, dim)``.

    Attention itself is equivariant to every permutation of the tokens; only the bias
    can break that. Contract under ``TorusTranslations(h, w)``: *equivariant* when the
    bias is constant on the translation orbitals (``"circulant"`` or no bias), *breaks*
    otherwise (``"clipped"``), naming the bias.

    Shapes: ``(B, prefix + h·w, C) → (B, prefix + h·w, C)``.

    Parameters
    ----------
    dim
        Token width ``C``.
    heads
        Number of heads (divides ``dim``).
    grid
        Token grid ``(h, w)``.
    bias
        ``"circulant"``, ``"clipped"``, ``None`` or a bias module (see :func:`make_relative_bias`).
    prefix
        Leading non-grid tokens (class token), which attend and are attended to with bias 0.
    """

    def __init__(
        self,
        dim: int,
        heads: int,
        grid: tuple[int, int],
        bias: BiasKind | nn.Module = "circulant",
        prefix: int = 0,
    ) -> None:
        check_heads(dim, heads, "GlobalSelfAttention")
        grid = check_grid(grid, "GlobalSelfAttention")
        field = TokenField(grid, prefix=prefix)
        super().__init__(field, field, in_channels=dim)
        self.dim, self.heads, self.prefix = dim, heads, prefix
        self.grid = grid
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.bias = make_relative_bias(bias, self.grid, heads, prefix)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Attend over all tokens."""
        q, k, v = rearrange(self.qkv(x), "b n (three h d) -> three b h n d", three=3, h=self.heads)
        bias = None if self.bias is None else self.bias().unsqueeze(0)
        out = attend(q, k, v, bias, module="GlobalSelfAttention")
        return self.proj(rearrange(out, "b h n d -> b n (h d)"))

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """Equivariant unless the bias breaks (see the class docstring)."""
        reason = None
        if self.bias is not None:
            bias_contract = contract_of(self.bias, group)
            if bias_contract.kind == Status.BROKEN:
                reason = f"global attention bias: {bias_contract.reason}"
            elif bias_contract.kind == Status.UNVERIFIED:
                return Contract.unknown(f"GlobalSelfAttention: {bias_contract.reason}", input_type)
        return translation_contract("GlobalSelfAttention", group, self.grid, self.prefix, reason)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, heads={self.heads}, grid={self.grid}, prefix={self.prefix}"
