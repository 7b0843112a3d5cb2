"""Global multi-head self-attention over a token grid, with an optional pairwise bias."""

from __future__ import annotations

from typing import Any, Literal

import torch
from einops import rearrange
from torch import nn

from .._deprecation import DeprecatedAttribute, renamed_arguments
from .._errors import ConfigurationError
from ..actions import TokenField, check_grid
from ..contracts import Contract, EquivariantModule, Status, contract_of
from ..groups import Group
from ..positional import CirculantRelativeBias, ClippedRelativeBias, translation_contract
from ._kernel import attend

__all__ = ["GlobalSelfAttention", "check_heads", "make_relative_bias"]

BiasKind = Literal["circulant", "clipped"] | None


@renamed_arguments(heads="num_heads")
def make_relative_bias(
    kind: BiasKind | nn.Module, grid: tuple[int, int], num_heads: int, prefix: int = 0
) -> nn.Module | None:
    """Build a relative position bias by name.

    Parameters
    ----------
    kind
        ``"circulant"`` ([`CirculantRelativeBias`][groupattn.positional.CirculantRelativeBias]),
        ``"clipped"`` ([`ClippedRelativeBias`][groupattn.positional.ClippedRelativeBias]), ``None`` (no
        bias) or a ready module returning ``(num_heads, N, N)``.
    grid, num_heads, prefix
        As for the bias classes.

    Raises
    ------
    ConfigurationError
        For an unknown ``kind``.
    """
    if kind is None or isinstance(kind, nn.Module):
        return kind
    if kind == "circulant":
        return CirculantRelativeBias(grid, num_heads, prefix)
    if kind == "clipped":
        return ClippedRelativeBias(grid, num_heads, prefix)
    raise ConfigurationError(
        f"make_relative_bias: expected 'circulant', 'clipped' or None, got {kind!r}"
    )


@renamed_arguments(heads="num_heads")
def check_heads(dim: int, num_heads: int, module: str = "check_heads") -> None:
    """Validate a multi-head layer's width: ``num_heads >= 1`` heads that divide ``dim``.

    Field types say which tensors a layer accepts (see
    [`FieldType.check`][groupattn.actions.FieldType.check]); this checks the one
    constructor argument they do not express, the split of the width into heads.

    Parameters
    ----------
    dim
        The token width ``C``.
    num_heads
        The number of heads.
    module
        The name the error message starts with (the calling layer).

    Raises
    ------
    ConfigurationError
        ``"{module}: expected a width divisible by the number of heads {num_heads}, got {dim}"``.

    Examples
    --------
    >>> check_heads(8, 2, "MyAttention")  # fine: two heads of width 4
    """
    if num_heads < 1 or dim % num_heads:
        raise ConfigurationError(
            f"{module}: expected a width divisible by the number of heads {num_heads}, got {dim}"
        )


def _check_bias_settings(
    bias: nn.Module | None, grid: tuple[int, int], num_heads: int, prefix: int
) -> None:
    """Refuse a bias module whose ``grid``, ``num_heads`` or ``prefix`` differ from the layer's.

    Only the attributes the module has are compared (a user's bias need not state them);
    a grid of the same token count in another shape (``(2, 8)`` in a ``4x4`` layer)
    is refused too: its pairs are other pairs.

    Raises
    ------
    ConfigurationError
        Naming GlobalSelfAttention, the layer's value and the bias's.
    """
    if bias is None:
        return
    expected = {"grid": tuple(grid), "num_heads": num_heads, "prefix": prefix}
    for name, value in expected.items():
        if not hasattr(bias, name):
            continue
        got = getattr(bias, name)
        got = tuple(got) if name == "grid" and isinstance(got, (list, tuple)) else got
        if got != value:
            raise ConfigurationError(
                f"GlobalSelfAttention: expected a bias module with {name}={value!r} (the layer's), got "
                f"{type(bias).__name__} with {name}={got!r}"
            )


class GlobalSelfAttention(EquivariantModule):
    """Multi-head self-attention over all tokens of a grid, plus an optional pairwise bias.

    An [`EquivariantModule`][groupattn.contracts.EquivariantModule] from ``TokenField(grid,
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
    num_heads
        Number of heads (divides ``dim``).
    grid
        Token grid ``(h, w)``.
    bias
        ``"circulant"``, ``"clipped"``, ``None`` or a bias module (see [`make_relative_bias`][groupattn.attention.make_relative_bias]).
    prefix
        Leading non-grid tokens (class token), which attend and are attended to with bias 0.
    """

    floating_input = True
    heads = DeprecatedAttribute("num_heads")

    @renamed_arguments(heads="num_heads")
    def __init__(
        self,
        dim: int,
        num_heads: int,
        grid: tuple[int, int],
        bias: BiasKind | nn.Module = "circulant",
        prefix: int = 0,
    ) -> None:
        check_heads(dim, num_heads, "GlobalSelfAttention")
        grid = check_grid(grid, "GlobalSelfAttention")
        field = TokenField(grid, prefix=prefix)
        super().__init__(field, field, in_channels=dim)
        self.dim, self.num_heads, self.prefix = dim, num_heads, prefix
        self.grid = grid
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.bias = make_relative_bias(bias, self.grid, num_heads, prefix)
        _check_bias_settings(self.bias, self.grid, num_heads, prefix)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Attend over all tokens."""
        q, k, v = rearrange(
            self.qkv(x), "b n (three h d) -> three b h n d", three=3, h=self.num_heads
        )
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
        return f"dim={self.dim}, num_heads={self.num_heads}, grid={self.grid}, prefix={self.prefix}"
