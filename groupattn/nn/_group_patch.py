"""Lifting patch embedding (C4/D4-equivariant) and an absolute position embedding for baselines."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from ..actions import (
    GridField,
    LiftedField,
    SpatialElement,
    embed_point_element,
    point_group_of,
    transform_grid,
)
from ..attention._group_attention import resolve_point_group
from ..contracts import Contract
from ..groups import Group, GroupError, PointGroup, TorusTranslations

__all__ = ["AbsolutePositionEmbedding", "LiftedPatchEmbedding", "LiftingConvolution"]


def _rotated_kernels(weight: torch.Tensor, point_group: PointGroup, module: str) -> torch.Tensor:
    """Kernels ``(O, I, k, k)`` transformed by every element of ``H``, slice-major:
    ``(|H|·O, I, k, k)`` with ``W_h = h·W`` (``rot90`` / ``flip`` about the kernel's centre)."""
    return torch.cat(
        [transform_grid(weight, SpatialElement((0, 0), point_group, h), module) for h in point_group.elements()]
    )


def _rotated_kernel_contract(
    module: str, point_group: PointGroup, acting: PointGroup | None, in_t: GridField, out_t: LiftedField
) -> Contract:
    """Equivariant if every generator of the acting point group is an element of ``H`` (the
    kernels are rotated by ``H`` only), else *breaks*."""
    if acting is not None:
        try:
            for gen in acting.generators():
                embed_point_element(gen, point_group, module)
        except GroupError:
            return Contract.breaks(
                f"{module}: kernels are only rotated by {point_group.name}, not {acting.name}-equivariant",
                in_t,
                out_t,
            )
    return Contract.equivariant(in_t, out_t)


class LiftedPatchEmbedding(nn.Module):
    """Patch embedding that lifts: ``(B, C_in, H, W) → (B, C_out, |H|, H/p, W/p)``.

    Output slice ``h`` is the stride-``p`` convolution with the kernel rotated (and
    reflected) by ``h``: ``W_h(u) = W(h⁻¹u)``. Rotating the image about its centre by
    ``g`` (with ``p`` dividing the side, so the patch grid maps onto itself) rotates the
    patch grid and permutes the slices ``h ↦ g h``: the embedding is exactly
    equivariant to the point group. The kernels of all slices come from one
    precomputed index permutation; one convolution computes all of them. With the
    trivial group ``C1`` this is the ordinary ViT patch embedding.

    With ``kernel_size = k > p`` the patches overlap: each token sees its ``p × p``
    patch and a margin of ``(k − p) / 2`` pixels on every side, taken from the image
    padded circularly (a circular ``k × k`` convolution of stride ``p``). The window
    stays centred on its patch, so rotations about the image centre still map windows
    onto windows and whole-patch translations still move them by one token: the
    contract is the same.

    Contract: equivariant ``GridField → LiftedField(H)`` under ``H`` and its subgroups,
    and under translations by multiples of ``p`` (``TorusTranslations(h, w, stride=p)``
    onto ``TorusTranslations(h, w)``); *breaks* under other translations.

    Parameters
    ----------
    in_channels, out_channels
        Channel widths.
    patch_size
        ``p``.
    point_group
        ``H`` (instance or name); must act exactly on the grid.
    bias
        Learn a bias per output channel (shared by the slices). Off, an empty
        (all-zero) patch embeds to the zero token.
    kernel_size
        Side ``k`` of the window each token sees (default ``p``: non-overlapping
        patches); ``k ≥ p`` with ``k − p`` even.

    Raises
    ------
    GroupError
        For a point group not acting exactly on the grid, a patch size below 1, a
        kernel size smaller than the patch or of the wrong parity, and (in ``forward``)
        a wrong shape, a grid not divisible by ``p`` or a non-square grid under quarter
        turns.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        patch_size: int,
        point_group: PointGroup | str,
        bias: bool = True,
        kernel_size: int | None = None,
    ) -> None:
        super().__init__()
        self.point_group = resolve_point_group(point_group, "LiftedPatchEmbedding")
        if not self.point_group.acts_exactly_on_grid:
            raise GroupError(
                f"LiftedPatchEmbedding: expected a point group acting exactly on the grid, got {self.point_group.name}"
            )
        if patch_size < 1:
            raise GroupError(f"LiftedPatchEmbedding: expected a patch size >= 1, got {patch_size}")
        kernel = patch_size if kernel_size is None else kernel_size
        if kernel < patch_size or (kernel - patch_size) % 2:
            raise GroupError(
                f"LiftedPatchEmbedding: expected a kernel size >= the patch size {patch_size} that differs from it "
                f"by an even number (a window centred on its patch), got {kernel_size}"
            )
        self.in_channels, self.out_channels, self.patch_size = in_channels, out_channels, patch_size
        self.kernel_size = kernel
        self.weight = nn.Parameter(torch.randn(out_channels, in_channels, kernel, kernel) / kernel)
        self.bias: nn.Parameter | None = nn.Parameter(torch.zeros(out_channels)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = self.patch_size
        if x.dim() != 4 or x.shape[1] != self.in_channels:
            raise GroupError(
                f"LiftedPatchEmbedding: expected an image batch (B, C={self.in_channels}, H, W), got {tuple(x.shape)}"
            )
        if x.shape[-1] % p or x.shape[-2] % p:
            raise GroupError(
                f"LiftedPatchEmbedding: expected a grid divisible by patch {p}, got {x.shape[-2]}x{x.shape[-1]}"
            )
        if x.shape[-1] != x.shape[-2] and self.point_group.order() > 2:
            raise GroupError(
                f"LiftedPatchEmbedding: expected a square grid for {self.point_group.name}, "
                f"got {x.shape[-2]}x{x.shape[-1]}"
            )
        kernels = _rotated_kernels(self.weight, self.point_group, "LiftedPatchEmbedding")  # (G·O, I, k, k)
        g = self.point_group.order()
        margin = (self.kernel_size - p) // 2
        if margin:
            x = F.pad(x, (margin, margin, margin, margin), mode="circular")
        out = F.conv2d(x, kernels, None if self.bias is None else self.bias.repeat(g), stride=p)
        return rearrange(out, "b (g o) y x -> b o g y x", g=g)

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """See the class docstring."""
        in_t, out_t = GridField(), LiftedField(self.point_group)
        p = self.patch_size
        if isinstance(group, TorusTranslations):
            if group.stride % p == 0:
                return Contract.equivariant(
                    in_t, out_t, output_group=TorusTranslations(group.height, group.width, stride=group.stride // p)
                )
            return Contract.breaks(
                f"LiftedPatchEmbedding: the patch grid (patch {p}) does not move with translations by "
                f"{group.stride} pixel(s); anchor the input first",
                in_t,
                out_t,
            )
        try:
            acting = point_group_of(group)
        except GroupError as err:
            return Contract.unknown(f"LiftedPatchEmbedding: {err}", in_t)
        if acting is not None and not isinstance(group, PointGroup) and p > 1:
            return Contract.breaks(
                f"LiftedPatchEmbedding: the patch grid (patch {p}) does not move with all translations of "
                f"{group.name}",
                in_t,
                out_t,
            )
        return _rotated_kernel_contract("LiftedPatchEmbedding", self.point_group, acting, in_t, out_t)


class LiftingConvolution(nn.Module):
    """A lifting convolution on the torus: ``(B, C_in, H, W) → (B, C_out, |H|, H, W)``.

    Output slice ``h`` is the circular ``k × k`` convolution (stride 1) with the kernel
    rotated (and reflected) by ``h``: ``W_h(u) = W(h⁻¹u)`` — the lifting layer of a
    p4 / p4m group CNN. The kernel is unconstrained, so unlike
    :class:`SymmetricConvStem` the output carries orientation: rotating the image by
    ``g`` about its centre rotates every slice and permutes them ``h ↦ g h``. Circular
    padding keeps it equivariant to all translations of the torus. One convolution
    computes every slice (the rotated kernels come from a precomputed permutation of
    the ``k²`` taps).

    Contract: equivariant ``GridField → LiftedField(H)`` under torus translations,
    ``H`` and its subgroups, and ``T ⋊ H``; *breaks* for point groups larger than
    ``H``; point groups that do not act exactly on the grid are rejected at
    construction.

    Parameters
    ----------
    in_channels, out_channels
        Channel widths.
    kernel_size
        Odd side ``k``.
    point_group
        ``H`` (instance or name); must act exactly on the grid (C1, C2, C4, D1, D2, D4).

    Raises
    ------
    GroupError
        For a point group not acting on the grid, an even or non-positive kernel size,
        and (in ``forward``) a wrong shape, a non-square grid under quarter turns, or a
        grid smaller than the kernel.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, point_group: PointGroup | str) -> None:
        super().__init__()
        self.point_group = resolve_point_group(point_group, "LiftingConvolution")
        if not self.point_group.acts_exactly_on_grid:
            raise GroupError(
                f"LiftingConvolution: expected a point group acting exactly on the grid, got {self.point_group.name}"
            )
        if kernel_size < 1 or kernel_size % 2 == 0:
            raise GroupError(f"LiftingConvolution: expected an odd kernel size >= 1, got {kernel_size}")
        if in_channels < 1 or out_channels < 1:
            raise GroupError(
                f"LiftingConvolution: expected positive channel widths, got {in_channels} -> {out_channels}"
            )
        self.in_channels, self.out_channels, self.kernel_size = in_channels, out_channels, kernel_size
        bound = (3.0 / (in_channels * kernel_size * kernel_size)) ** 0.5
        self.weight = nn.Parameter(torch.empty(out_channels, in_channels, kernel_size, kernel_size).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.zeros(out_channels))

    def kernels(self) -> torch.Tensor:
        """The rotated kernels of all slices, ``(|H|·C_out, C_in, k, k)`` (slice-major)."""
        return _rotated_kernels(self.weight, self.point_group, "LiftingConvolution")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        name = "LiftingConvolution"
        if x.dim() != 4 or x.shape[1] != self.in_channels:
            raise GroupError(f"{name}: expected an image batch (B, C={self.in_channels}, H, W), got {tuple(x.shape)}")
        height, width = x.shape[-2:]
        if height != width and self.point_group.order() > 2:
            raise GroupError(f"{name}: expected a square grid for {self.point_group.name}, got {height}x{width}")
        r = self.kernel_size // 2
        if min(height, width) < self.kernel_size:
            raise GroupError(f"{name}: expected a grid of at least {self.kernel_size}x{self.kernel_size}, got {height}x{width}")
        g = self.point_group.order()
        padded = F.pad(x, (r, r, r, r), mode="circular")
        out = F.conv2d(padded, self.kernels().to(x.dtype), self.bias.repeat(g).to(x.dtype))
        return rearrange(out, "b (g o) y x -> b o g y x", g=g)

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """See the class docstring."""
        in_t, out_t = GridField(), LiftedField(self.point_group)
        try:
            acting = point_group_of(group)
        except GroupError as err:
            return Contract.unknown(f"LiftingConvolution: {err}", in_t)
        return _rotated_kernel_contract("LiftingConvolution", self.point_group, acting, in_t, out_t)

    def extra_repr(self) -> str:
        k = self.kernel_size
        return f"{self.in_channels}->{self.out_channels}, {self.point_group.name}, circular {k}x{k}"


class AbsolutePositionEmbedding(nn.Module):
    """A learned absolute position embedding added to a lifted field (baselines only).

    ``x + P`` with ``P`` of shape ``(C, |H|, H, W)``.

    Contract: *breaks* for every group that moves positions ("absolute positional
    encoding is not invariant").

    Parameters
    ----------
    channels
        ``C``.
    point_group
        ``H`` (instance or name).
    size
        ``(H, W)`` or one int.
    """

    def __init__(self, channels: int, point_group: PointGroup | str, size: int | tuple[int, int]) -> None:
        super().__init__()
        self.point_group = resolve_point_group(point_group, "AbsolutePositionEmbedding")
        hw = (size, size) if isinstance(size, int) else tuple(size)
        self.embedding = nn.Parameter(torch.randn(channels, self.point_group.order(), hw[0], hw[1]) * 0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 5 or x.shape[1:] != self.embedding.shape:
            raise GroupError(
                f"AbsolutePositionEmbedding: expected a lifted field (B, {', '.join(map(str, self.embedding.shape))}), "
                f"got {tuple(x.shape)}"
            )
        return x + self.embedding

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """Breaks: absolute positions are not invariant."""
        t = LiftedField(self.point_group)
        return Contract.breaks(f"absolute positional encoding is not invariant under {group.name}", t, t)
