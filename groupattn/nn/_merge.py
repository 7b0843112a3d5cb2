"""Patch merging (Swin/Twins down-sampling of a token grid by 2), anchored when equivariant."""

from __future__ import annotations

from typing import Any

import torch
from einops import rearrange
from torch import nn

from .._errors import ConfigurationError
from .._sealed import sealed
from ..actions import TokenField, check_grid, torus_stride
from ..canonical import gather_tokens, polyphase_phase, shifted_token_index
from ..canonical._polyphase import Norm
from ..contracts import Contract, EquivariantModule
from ..groups import Group, TorusTranslations

__all__ = ["PatchMerging"]


@sealed
class PatchMerging(EquivariantModule):
    """Concatenate each ``2 × 2`` block of tokens, normalise and project (Swin's patch merging).

    An [`EquivariantModule`][groupattn.contracts.EquivariantModule] from ``TokenField(grid)`` to
    ``TokenField(grid / 2)``: calling it checks the input is ``(B, h·w, dim)``.

    With ``anchored=True`` the token grid is polyphase-anchored with stride 2 first, so
    the ``2 × 2`` blocks move with the data.

    Contract under ``TorusTranslations(h, w)``: anchored — *canonicalizing* onto
    ``TorusTranslations(h/2, w/2)``; plain — *breaks*. Under shifts by even offsets both
    are *equivariant*.

    Shapes: ``(B, h·w, dim) → (B, h/2 · w/2, out_dim)``.

    Parameters
    ----------
    dim
        Input token width.
    out_dim
        Output token width.
    grid
        Input token grid ``(h, w)``, both even.
    anchored
        Anchor before merging (the equivariant variant).
    norm
        Norm of the polyphase anchoring.
    """

    floating_input = True
    merge_rows: torch.Tensor
    merge_cols: torch.Tensor

    def __init__(
        self,
        dim: int,
        out_dim: int,
        grid: tuple[int, int],
        anchored: bool = True,
        norm: Norm = "l2",
    ) -> None:
        grid = check_grid(grid, "PatchMerging")
        if grid[0] % 2 or grid[1] % 2:
            raise ConfigurationError(
                f"PatchMerging: expected a grid divisible by stride 2, got {grid[0]}x{grid[1]}"
            )
        super().__init__(
            TokenField(grid), TokenField((grid[0] // 2, grid[1] // 2)), in_channels=dim
        )
        self.grid = grid
        self.dim, self.out_dim, self.anchored, self.norm = dim, out_dim, anchored, norm
        self.out_grid = (self.grid[0] // 2, self.grid[1] // 2)
        self.layer_norm = nn.LayerNorm(4 * dim)
        self.reduction = nn.Linear(4 * dim, out_dim, bias=False)
        # token order (y, x, dy, dx): the 2x2 block at (y, x), row-major inside the block
        h, w = self.grid
        ys, xs = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
        order = rearrange(ys * w + xs, "(y dy) (x dx) -> (y x dy dx)", dy=2, dx=2)
        self.register_buffer("merge_rows", order // w, persistent=False)
        self.register_buffer("merge_cols", order % w, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Merge ``2 × 2`` token blocks."""
        b = x.shape[0]
        if self.anchored:
            frame = polyphase_phase(x, 2, self.norm, self.grid)[0]
        else:
            frame = torch.zeros(b, 2, dtype=torch.long, device=x.device)
        # anchoring and the 2x2 grouping in one row gather (same cost for the baseline)
        index = shifted_token_index(
            frame[:, 0], frame[:, 1], self.grid, self.merge_rows, self.merge_cols
        )
        # explicit sizes: with an empty batch a -1 would be ambiguous
        merged = gather_tokens(x, index).reshape(
            b, self.out_grid[0] * self.out_grid[1], 4 * self.dim
        )
        return self.reduction(self.layer_norm(merged))

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """See the class docstring."""
        stride = torus_stride(group, self.grid)
        field, out = TokenField(self.grid), TokenField(self.out_grid)
        if stride is None:
            return Contract.unknown(f"PatchMerging: promises nothing for {group.name}", field)
        assert isinstance(group, TorusTranslations)
        if stride % 2 == 0:
            return Contract.equivariant(
                field, out, TorusTranslations(group.height, group.width, stride=stride // 2)
            )
        if not self.anchored:
            return Contract.breaks(
                "patch merging without anchoring is not translation-equivariant: the 2x2 blocks do not "
                "move with odd shifts",
                field,
                out,
            )
        if stride != 1:
            return Contract.unknown(
                f"PatchMerging: 2 does not divide the acting stride {stride}", field
            )
        return Contract.canonicalizing(field, out, TorusTranslations(*self.out_grid))

    def extra_repr(self) -> str:
        return f"dim={self.dim}, out_dim={self.out_dim}, grid={self.grid}, anchored={self.anchored}"
