"""Spatially-reduced (global sub-sampled) attention, Twins-SVT / PVT style, with anchoring."""

from __future__ import annotations

from typing import Any

import torch
from einops import rearrange
from torch import nn

from .._deprecation import DeprecatedAttribute, renamed_arguments
from .._errors import ConfigurationError
from ..actions import TokenField, check_grid, torus_stride
from ..canonical import PolyphaseAnchor
from ..canonical._polyphase import Norm
from ..contracts import Contract, EquivariantModule
from ..groups import Group
from ..positional import translation_contract
from ._global import check_heads
from ._kernel import attend

__all__ = ["SpatialReductionAttention"]


class SpatialReductionAttention(EquivariantModule):
    """Every token attends to a spatially reduced copy of the grid (keys and values).

    An [`EquivariantModule`][groupattn.contracts.EquivariantModule] from ``TokenField(grid)`` to
    itself: calling it checks the input is ``(B, h·w, dim)``.

    Keys and values come from a ``reduction × reduction`` strided convolution of the
    tokens (then a LayerNorm). With ``anchored=True`` the tokens are polyphase-anchored
    with stride ``reduction`` before the convolution, so the reduced tokens move with
    the data. The reduced tokens form a *set* (no positional bias), so the frame need
    not be undone: queries come from the un-anchored tokens and the output moves
    exactly with the input.

    Contract under ``TorusTranslations(h, w)``: *equivariant* when anchored (or
    ``reduction = 1``); otherwise *breaks*.

    Shapes: ``(B, h·w, C) → (B, h·w, C)``.

    Parameters
    ----------
    dim
        Token width ``C``.
    num_heads
        Number of heads (divides ``dim``).
    grid
        Token grid ``(h, w)``, divisible by ``reduction``.
    reduction
        Spatial reduction ratio ``r``.
    anchored
        Anchor before reducing (the equivariant variant).
    norm
        Norm of the polyphase anchoring.
    pre_norm
        Apply a ``LayerNorm`` to the tokens inside the layer (use instead of the block's
        pre-norm), so that the phase is chosen from the un-normalised tokens (the
        polyphase L2 norms of LayerNorm-ed tokens nearly tie).
    """

    floating_input = True
    heads = DeprecatedAttribute("num_heads")

    @renamed_arguments(heads="num_heads")
    def __init__(
        self,
        dim: int,
        num_heads: int,
        grid: tuple[int, int],
        reduction: int,
        anchored: bool = True,
        norm: Norm = "l2",
        pre_norm: bool = False,
    ) -> None:
        check_heads(dim, num_heads, "SpatialReductionAttention")
        grid = check_grid(grid, "SpatialReductionAttention")
        field = TokenField(grid)
        super().__init__(field, field, in_channels=dim)
        self.grid = grid
        if reduction < 1 or self.grid[0] % reduction or self.grid[1] % reduction:
            raise ConfigurationError(
                f"SpatialReductionAttention: expected a grid divisible by reduction {reduction}, "
                f"got {self.grid[0]}x{self.grid[1]}"
            )
        self.dim, self.num_heads, self.reduction = dim, num_heads, reduction
        self.anchored, self.norm, self.pre_norm = anchored, norm, pre_norm
        self.input_norm: nn.Module = nn.LayerNorm(dim) if pre_norm else nn.Identity()
        self.query = nn.Linear(dim, dim)
        self.key_value = nn.Linear(dim, 2 * dim)
        self.proj = nn.Linear(dim, dim)
        self.reduce: nn.Module = (
            nn.Conv2d(dim, dim, reduction, stride=reduction) if reduction > 1 else nn.Identity()
        )
        self.reduce_norm: nn.Module = nn.LayerNorm(dim) if reduction > 1 else nn.Identity()
        self.anchor = PolyphaseAnchor(reduction, norm, grid=self.grid)

    def _reduced(self, x: torch.Tensor) -> torch.Tensor:
        if self.reduction == 1:
            return self.input_norm(x)
        if self.anchored:
            x = self.anchor(x).output
        x = self.input_norm(x)
        h, w = self.grid
        image = rearrange(x, "b (y x) c -> b c y x", y=h, x=w)
        return self.reduce_norm(rearrange(self.reduce(image), "b c y x -> b (y x) c"))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Attend from every token to the reduced tokens."""
        q = rearrange(self.query(self.input_norm(x)), "b n (h d) -> b h n d", h=self.num_heads)
        k, v = rearrange(
            self.key_value(self._reduced(x)),
            "b m (two h d) -> two b h m d",
            two=2,
            h=self.num_heads,
        )
        out = attend(q, k, v, module="SpatialReductionAttention")
        return self.proj(rearrange(out, "b h n d -> b n (h d)"))

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """See the class docstring."""
        stride = torus_stride(group, self.grid)
        reason = None
        if stride is not None and not self.anchored and stride % self.reduction:
            reason = (
                "spatial-reduction attention without anchoring is not translation-equivariant: the "
                f"stride-{self.reduction} reduction grid does not move with the input"
            )
        return translation_contract("SpatialReductionAttention", group, self.grid, 0, reason)

    def extra_repr(self) -> str:
        return (
            f"dim={self.dim}, num_heads={self.num_heads}, grid={self.grid}, reduction={self.reduction}, "
            f"anchored={self.anchored}"
        )
