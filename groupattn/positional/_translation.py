"""Translation positional information on a torus of tokens: invariant encodings and baselines.

Invariant (constant on the orbitals of the translations ``Z_h × Z_w``):
[`CirculantRelativeBias`][groupattn.positional.CirculantRelativeBias] (bias depends on ``(j − i) mod (h, w)`` only) and
[`ConvPositionalEncoding`][groupattn.positional.ConvPositionalEncoding] with circular padding. Baselines that break translation
equivariance, each with a ``breaks`` contract: [`ClippedRelativeBias`][groupattn.positional.ClippedRelativeBias] (Swin's
non-circular relative bias), [`AbsolutePositionalEncoding`][groupattn.positional.AbsolutePositionalEncoding] and
[`ConvPositionalEncoding`][groupattn.positional.ConvPositionalEncoding] with zero padding.
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from torch import nn

from .._deprecation import renamed_arguments
from .._errors import ConfigurationError
from ..actions import GSet, TokenField, check_grid, torus_stride
from ..contracts import Contract, EquivariantModule
from ..groups import Group, TorusTranslations
from ._constants import constant_cache
from ._orbital import PairTableBias, _OrbitalLabels

__all__ = [
    "AbsolutePositionalEncoding",
    "CirculantRelativeBias",
    "ClippedRelativeBias",
    "ConvPositionalEncoding",
    "translation_contract",
]


def translation_contract(
    module: str, group: Group, grid: tuple[int, int], prefix: int = 0, reason: str | None = None
) -> Contract:
    """The contract of a token layer that maps ``TokenField(grid, prefix)`` to itself.

    For layers that are built to commute with circular shifts of their token grid
    (attention with a circulant bias, a circular convolution, …): *equivariant* under
    translations of the grid (``TorusTranslations`` of any stride that tiles it, see
    [`torus_stride`][groupattn.actions.torus_stride]), or *breaks* with ``reason`` when the
    layer is a non-equivariant baseline; *unknown* for any other group.

    Parameters
    ----------
    module
        The layer's name (starts the reason of an *unknown* contract).
    group
        The group the contract is asked for.
    grid
        The token grid ``(h, w)``.
    prefix
        Leading invariant tokens (class token).
    reason
        Why the layer breaks translation equivariance; ``None`` if it does not.

    Returns
    -------
    Contract
        On ``TokenField(grid, prefix=prefix)`` in and out.
    """
    field = TokenField(grid, prefix=prefix)
    if torus_stride(group, grid) is None:
        return Contract.unknown(
            f"{module}: promises nothing for {group.name}; expected translations of the "
            f"{grid[0]}x{grid[1]} token torus",
            field,
        )
    if reason is not None:
        return Contract.breaks(reason, field, field)
    return Contract.equivariant(field, field)


@constant_cache(maxsize=32)
def _torus_orbitals(h: int, w: int) -> torch.Tensor:
    """The orbital labels ``(h·w, h·w)`` of the translations of an ``h × w`` torus (cached per grid).

    Every block of a model has the same grid: computing them once keeps building a deep
    model (and sizing it on the ``meta`` device) fast. Callers must not edit the result.
    """
    return GSet.grid(TorusTranslations(h, w), h, w).orbitals()


class CirculantRelativeBias(_OrbitalLabels):
    """A learned attention bias that depends only on ``(j − i) mod (h, w)``.

    The bias table has one entry per head and per orbital of the translations
    ``TorusTranslations(h, w)`` on token pairs (``h·w`` orbitals, one per circular
    offset), read from ``GSet.grid(TorusTranslations(h, w), h, w).orbitals()``. It is
    the torus case of [`OrbitalBias`][groupattn.positional.OrbitalBias] and shares its code
    path ([`IndexedTable`][groupattn.positional.IndexedTable] through
    [`PairTableBias`][groupattn.positional.PairTableBias]): the ``(N, N)`` orbital labels are the
    module's own plain tensor attribute, built once (not a parameter, not a buffer),
    gathered from the table on every call.

    Contract: *invariant* under ``TorusTranslations(h, w)`` — ``bias[g·i, g·j] =
    bias[i, j]`` — so attention with this bias is translation-equivariant.

    Shapes: ``() → (heads, prefix + h·w, prefix + h·w)``.

    Parameters
    ----------
    grid
        Token grid ``(h, w)``.
    num_heads
        Number of attention heads.
    prefix
        Leading non-grid tokens (e.g. a class token); their rows and columns get bias 0.
    init_std
        Standard deviation of the normal initialisation of the table.
    """

    @renamed_arguments(heads="num_heads")
    def __init__(
        self, grid: tuple[int, int], num_heads: int, prefix: int = 0, init_std: float = 0.02
    ) -> None:
        super().__init__(num_heads, prefix)
        self.grid = check_grid(grid, "CirculantRelativeBias")
        h, w = self.grid
        self._set_labels(_torus_orbitals(h, w).clone())
        self.table = nn.Parameter(torch.randn(num_heads, self.num_labels) * init_std)

    def values(self) -> torch.Tensor:
        """The learned table ``(heads, h·w)``."""
        return self.table

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """Invariant (constant on orbitals) under translations of the grid."""
        field = TokenField(self.grid, prefix=self.prefix)
        if torus_stride(group, self.grid) is None:
            return Contract.unknown(
                f"CirculantRelativeBias: promises nothing for {group.name}", field
            )
        return Contract.invariant(field)

    def extra_repr(self) -> str:
        return f"grid={self.grid}, num_heads={self.num_heads}, prefix={self.prefix}"


class ClippedRelativeBias(PairTableBias):
    """Swin-style relative position bias: a table over the non-circular offsets.

    ``bias[i, j] = table[y_j − y_i + h − 1, x_j − x_i + w − 1]`` with a
    ``(2h − 1) × (2w − 1)`` table per head. Offsets are *not* reduced modulo the grid,
    so the bias is not constant on the translation orbitals. Same code path as the
    orbital biases ([`PairTableBias`][groupattn.positional.PairTableBias]) with clipped-offset
    labels instead of orbitals.

    Contract: *breaks* under ``TorusTranslations(h, w)`` (a baseline). Inside a window
    whose windows are anchored it is harmless: shifts by whole windows do not change
    positions within a window.

    Shapes: ``() → (heads, prefix + h·w, prefix + h·w)``.

    Parameters
    ----------
    grid
        Token grid ``(h, w)`` (the window for window attention).
    num_heads
        Number of attention heads.
    prefix
        Leading non-grid tokens; their rows and columns get bias 0.
    init_std
        Standard deviation of the normal initialisation of the table.
    """

    @renamed_arguments(heads="num_heads")
    def __init__(
        self, grid: tuple[int, int], num_heads: int, prefix: int = 0, init_std: float = 0.02
    ) -> None:
        super().__init__(num_heads, prefix)
        self.grid = check_grid(grid, "ClippedRelativeBias")
        h, w = self.grid
        ys, xs = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
        ys, xs = ys.reshape(-1), xs.reshape(-1)
        index = (ys[None, :] - ys[:, None] + h - 1) * (2 * w - 1) + (
            xs[None, :] - xs[:, None] + w - 1
        )
        self._set_labels(index)
        self.table = nn.Parameter(torch.randn(num_heads, (2 * h - 1) * (2 * w - 1)) * init_std)

    @property
    def offset_index(self) -> torch.Tensor:
        """``(h·w, h·w)`` long: the clipped-offset entry of every token pair."""
        return self.pair_index

    def values(self) -> torch.Tensor:
        """The learned table ``(heads, (2h − 1)(2w − 1))``."""
        return self.table

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """Breaks under translations of the grid."""
        field = TokenField(self.grid, prefix=self.prefix)
        return Contract.breaks(
            "clipped (non-circular) relative position bias is not constant on the translation orbitals",
            field,
        )

    def extra_repr(self) -> str:
        return f"grid={self.grid}, num_heads={self.num_heads}, prefix={self.prefix}"


class AbsolutePositionalEncoding(EquivariantModule):
    """A learned embedding per token position, added to the tokens (ViT's baseline).

    An [`EquivariantModule`][groupattn.contracts.EquivariantModule] from ``TokenField(grid,
    prefix=prefix)`` to itself: calling it checks the input is
    ``(B, prefix + h·w, dim)``.

    Contract: *breaks* under translations — "absolute positional encoding is not
    translation-invariant".

    Shapes: ``(B, prefix + h·w, C) → (B, prefix + h·w, C)``.

    Parameters
    ----------
    dim
        Token width ``C``.
    grid
        Token grid ``(h, w)``.
    prefix
        Leading non-grid tokens (they get their own embedding too).
    init_std
        Standard deviation of the normal initialisation.
    """

    floating_input = True

    def __init__(
        self, dim: int, grid: tuple[int, int], prefix: int = 0, init_std: float = 0.02
    ) -> None:
        grid = check_grid(grid, "AbsolutePositionalEncoding")
        field = TokenField(grid, prefix=prefix)
        super().__init__(field, field, in_channels=dim)
        self.grid = grid
        self.dim, self.prefix = dim, prefix
        self.embedding = nn.Parameter(
            torch.randn(1, prefix + self.grid[0] * self.grid[1], dim) * init_std
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Add the position embeddings (the input is checked before, see the class docstring)."""
        return x + self.embedding

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """Breaks under translations."""
        return translation_contract(
            "AbsolutePositionalEncoding",
            group,
            self.grid,
            self.prefix,
            "absolute positional encoding is not translation-invariant",
        )

    def extra_repr(self) -> str:
        return f"dim={self.dim}, grid={self.grid}, prefix={self.prefix}"


class ConvPositionalEncoding(EquivariantModule):
    """Convolutional positional encoding (CPVT/Twins PEG): ``x + depthwise_conv(x)`` on the grid.

    An [`EquivariantModule`][groupattn.contracts.EquivariantModule] from ``TokenField(grid,
    prefix=prefix)`` to itself: calling it checks the input is
    ``(B, prefix + h·w, dim)``.

    With ``padding_mode="circular"`` the convolution commutes with circular shifts of
    the token grid (contract: *equivariant* under ``TorusTranslations(h, w)``); with
    ``"zeros"`` (the usual baseline) the border breaks it (contract: *breaks*).
    Prefix tokens (class token) pass through unchanged.

    Shapes: ``(B, prefix + h·w, C) → (B, prefix + h·w, C)``.

    Parameters
    ----------
    dim
        Token width ``C``.
    grid
        Token grid ``(h, w)``.
    kernel_size
        Odd kernel size.
    padding_mode
        ``"circular"`` or ``"zeros"``.
    prefix
        Leading non-grid tokens.
    """

    floating_input = True

    def __init__(
        self,
        dim: int,
        grid: tuple[int, int],
        kernel_size: int = 3,
        padding_mode: Literal["circular", "zeros"] = "circular",
        prefix: int = 0,
    ) -> None:
        grid = check_grid(grid, "ConvPositionalEncoding")
        if kernel_size % 2 != 1:
            raise ConfigurationError(
                f"ConvPositionalEncoding: expected an odd kernel size, got {kernel_size}"
            )
        if padding_mode not in ("circular", "zeros"):
            raise ConfigurationError(
                f"ConvPositionalEncoding: expected padding_mode 'circular' or 'zeros', got {padding_mode!r}"
            )
        field = TokenField(grid, prefix=prefix)
        super().__init__(field, field, in_channels=dim)
        self.grid = grid
        self.dim, self.prefix, self.padding_mode = dim, prefix, padding_mode
        self.conv = nn.Conv2d(
            dim, dim, kernel_size, padding=kernel_size // 2, groups=dim, padding_mode=padding_mode
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Add the convolved grid tokens (the input is checked before, see the class docstring)."""
        h, w = self.grid
        head, body = x[:, : self.prefix], x[:, self.prefix :]
        image = body.transpose(1, 2).reshape(x.shape[0], self.dim, h, w)
        body = body + self.conv(image).flatten(2).transpose(1, 2)
        return torch.cat([head, body], dim=1) if self.prefix else body

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """Equivariant with circular padding, breaks with zero padding."""
        reason = None
        if self.padding_mode != "circular":
            reason = "zero padding in the convolutional positional encoding is not translation-equivariant on the torus"
        return translation_contract("ConvPositionalEncoding", group, self.grid, self.prefix, reason)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, grid={self.grid}, padding_mode={self.padding_mode!r}, prefix={self.prefix}"
