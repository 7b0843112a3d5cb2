"""Lifting patch embedding (C4/D4-equivariant) and the lifting convolution."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from .._deprecation import DeprecatedAttribute, renamed_arguments
from .._errors import ConfigurationError, ShapeError
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
from ..contracts._module import check_floating_input
from ..groups import Group, GroupError, PointGroup, TorusTranslations

__all__ = ["GroupConvolution", "LiftedPatchEmbedding", "LiftingConvolution"]


def _rotated_kernels(weight: torch.Tensor, point_group: PointGroup, module: str) -> torch.Tensor:
    """Kernels ``(O, I, k, k)`` transformed by every element of ``H``, slice-major:
    ``(|H|·O, I, k, k)`` with ``W_h = h·W`` (``rot90`` / ``flip`` about the kernel's centre)."""
    return torch.cat(
        [
            transform_grid(weight, SpatialElement((0, 0), point_group, h), module)
            for h in point_group.elements()
        ]
    )


def _rotated_kernel_contract(
    module: str,
    point_group: PointGroup,
    acting: PointGroup | None,
    in_t: GridField,
    out_t: LiftedField,
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
    """Patch embedding that lifts: ``(B, in_channels, H, W) → (B, dim, |H|, H/p, W/p)``.

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
    in_channels
        Image channels.
    dim
        Token width per group element.
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

    Notes
    -----
    Deprecated alias (one release): ``out_channels`` → ``dim`` (argument and attribute).

    Raises
    ------
    GroupError
        For a point group not acting exactly on the grid.
    ConfigurationError
        For a patch size below 1 or a kernel size smaller than the patch or of the
        wrong parity.
    ShapeError
        In ``forward``: a wrong shape, a grid not divisible by ``p`` or a non-square
        grid under quarter turns.
    """

    out_channels = DeprecatedAttribute("dim")

    @renamed_arguments(out_channels="dim")
    def __init__(
        self,
        in_channels: int,
        dim: int,
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
            raise ConfigurationError(
                f"LiftedPatchEmbedding: expected a patch size >= 1, got {patch_size}"
            )
        kernel = patch_size if kernel_size is None else kernel_size
        if kernel < patch_size or (kernel - patch_size) % 2:
            raise ConfigurationError(
                f"LiftedPatchEmbedding: expected a kernel size >= the patch size {patch_size} that differs from it "
                f"by an even number (a window centred on its patch), got {kernel_size}"
            )
        self.in_channels, self.dim, self.patch_size = in_channels, dim, patch_size
        self.kernel_size = kernel
        self.weight = nn.Parameter(torch.randn(dim, in_channels, kernel, kernel) / kernel)
        self.bias: nn.Parameter | None = nn.Parameter(torch.zeros(dim)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = self.patch_size
        if x.dim() != 4 or x.shape[1] != self.in_channels:
            raise ShapeError(
                f"LiftedPatchEmbedding: expected an image batch (B, C={self.in_channels}, H, W), got {tuple(x.shape)}"
            )
        check_floating_input(x, "LiftedPatchEmbedding")
        if x.shape[-1] % p or x.shape[-2] % p:
            raise ShapeError(
                f"LiftedPatchEmbedding: expected a grid divisible by patch {p}, got {x.shape[-2]}x{x.shape[-1]}"
            )
        if x.shape[-1] != x.shape[-2] and self.point_group.order() > 2:
            raise ShapeError(
                f"LiftedPatchEmbedding: expected a square grid for {self.point_group.name}, "
                f"got {x.shape[-2]}x{x.shape[-1]}"
            )
        kernels = _rotated_kernels(
            self.weight, self.point_group, "LiftedPatchEmbedding"
        )  # (G·O, I, k, k)
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
                    in_t,
                    out_t,
                    output_group=TorusTranslations(
                        group.height, group.width, stride=group.stride // p
                    ),
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
        return _rotated_kernel_contract(
            "LiftedPatchEmbedding", self.point_group, acting, in_t, out_t
        )


class LiftingConvolution(nn.Module):
    """A lifting convolution on the torus: ``(B, in_channels, H, W) → (B, dim, |H|, H, W)``.

    Output slice ``h`` is the circular ``k × k`` convolution (stride 1) with the kernel
    rotated (and reflected) by ``h``: ``W_h(u) = W(h⁻¹u)`` — the lifting layer of a
    p4 / p4m group CNN. The kernel is unconstrained, so unlike
    [`SymmetricConvStem`][groupattn.nn.SymmetricConvStem] the output carries orientation: rotating the image by
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
    in_channels
        Image channels.
    dim
        Output width per group element.
    kernel_size
        Odd side ``k``.
    point_group
        ``H`` (instance or name); must act exactly on the grid (C1, C2, C4, D1, D2, D4).

    Notes
    -----
    Deprecated alias (one release): ``out_channels`` → ``dim`` (argument and attribute).

    Raises
    ------
    GroupError
        For a point group not acting on the grid.
    ConfigurationError
        For an even or non-positive kernel size or a non-positive width.
    ShapeError
        In ``forward``: a wrong shape, a non-square grid under quarter turns, or a grid
        smaller than the kernel.
    """

    out_channels = DeprecatedAttribute("dim")

    @renamed_arguments(out_channels="dim")
    def __init__(
        self, in_channels: int, dim: int, kernel_size: int, point_group: PointGroup | str
    ) -> None:
        super().__init__()
        self.point_group = resolve_point_group(point_group, "LiftingConvolution")
        if not self.point_group.acts_exactly_on_grid:
            raise GroupError(
                f"LiftingConvolution: expected a point group acting exactly on the grid, got {self.point_group.name}"
            )
        if kernel_size < 1 or kernel_size % 2 == 0:
            raise ConfigurationError(
                f"LiftingConvolution: expected an odd kernel size >= 1, got {kernel_size}"
            )
        if in_channels < 1 or dim < 1:
            raise ConfigurationError(
                f"LiftingConvolution: expected positive channel widths, got {in_channels} -> {dim}"
            )
        self.in_channels, self.dim, self.kernel_size = in_channels, dim, kernel_size
        bound = (3.0 / (in_channels * kernel_size * kernel_size)) ** 0.5
        self.weight = nn.Parameter(
            torch.empty(dim, in_channels, kernel_size, kernel_size).uniform_(-bound, bound)
        )
        self.bias = nn.Parameter(torch.zeros(dim))

    def kernels(self) -> torch.Tensor:
        """The rotated kernels of all slices, ``(|H|·C_out, C_in, k, k)`` (slice-major)."""
        return _rotated_kernels(self.weight, self.point_group, "LiftingConvolution")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        name = "LiftingConvolution"
        if x.dim() != 4 or x.shape[1] != self.in_channels:
            raise ShapeError(
                f"{name}: expected an image batch (B, C={self.in_channels}, H, W), got {tuple(x.shape)}"
            )
        check_floating_input(x, name)
        height, width = x.shape[-2:]
        if height != width and self.point_group.order() > 2:
            raise ShapeError(
                f"{name}: expected a square grid for {self.point_group.name}, got {height}x{width}"
            )
        r = self.kernel_size // 2
        if min(height, width) < self.kernel_size:
            raise ShapeError(
                f"{name}: expected a grid of at least {self.kernel_size}x{self.kernel_size}, got {height}x{width}"
            )
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
        return f"{self.in_channels}->{self.dim}, {self.point_group.name}, circular {k}x{k}"


def _group_kernels(weight: torch.Tensor, point_group: PointGroup, module: str) -> torch.Tensor:
    """Kernels ``(O, I, |H|, k, k)`` of a group convolution transformed by every ``h ∈ H``.

    Output slice ``h`` uses ``W_h[o, i, h', u] = W[o, i, h⁻¹h', h⁻¹u]``: the taps rotated
    (reflected) by ``h`` and the input group axis permuted. Returns ``(|H|·O, I·|H|, k, k)``
    (slice-major rows, input channels ``i·|H| + h'``), ready for one ``conv2d``.
    """
    elements = point_group.elements()
    out, inp, order, k, _ = weight.shape
    slices = []
    for h in elements:
        inverse = point_group.inverse(h)
        permutation = [point_group.index(point_group.compose(inverse, g)) for g in elements]
        moved = transform_grid(weight, SpatialElement((0, 0), point_group, h), module)
        slices.append(moved[:, :, permutation])
    return torch.cat(slices).reshape(order * out, inp * order, k, k)


class GroupConvolution(nn.Module):
    """A group convolution on the torus: ``(B, in_channels, |H|, H, W) → (B, dim, |H|, H, W)``.

    The lifted-to-lifted layer of a p4 / p4m group CNN (Cohen & Welling, 2016): output slice
    ``h`` is the circular ``k × k`` convolution (stride 1, optional dilation) of all input
    slices with the kernel transformed by ``h``, ``W_h[·, h', u] = W[·, h⁻¹h', h⁻¹u]``
    (taps rotated / reflected about the kernel's centre, input slices permuted). Rotating
    the input by ``g`` about the grid centre — moving every slice and permuting slices
    ``h ↦ g h`` — does the same to the output; circular padding keeps every translation of
    the torus. One convolution computes all slices. Unlike group attention, it mixes
    orientations with a learned, unconstrained kernel: the cheap way to give a lifted field
    oriented local features (e.g. the stem of [`GSANet`][groupattn.models.GSANet]).

    Contract: equivariant ``LiftedField(H) → LiftedField(H)`` under torus translations,
    ``H`` and its subgroups, and ``T ⋊ H``; *breaks* for point groups larger than ``H``.

    Shapes: ``(B, in_channels, |H|, H, W) → (B, dim, |H|, H, W)``.

    Parameters
    ----------
    in_channels
        Input width per group element.
    dim
        Output width per group element.
    kernel_size
        Odd side ``k``.
    point_group
        ``H`` (instance or name); must act exactly on the grid (C1, C2, C4, D1, D2, D4).
    dilation
        Spacing of the taps (``≥ 1``); the receptive field is ``dilation · (k − 1) + 1``.

    Raises
    ------
    GroupError
        For a point group not acting on the grid.
    ConfigurationError
        For an even or non-positive kernel size, a non-positive width or dilation.
    ShapeError
        In ``forward``: a wrong shape, a non-square grid under quarter turns, or a grid
        smaller than half the receptive field (a window wider than the grid wraps around
        the torus and stays exactly equivariant).
    """

    def __init__(
        self,
        in_channels: int,
        dim: int,
        kernel_size: int,
        point_group: PointGroup | str,
        dilation: int = 1,
    ) -> None:
        super().__init__()
        name = "GroupConvolution"
        self.point_group = resolve_point_group(point_group, name)
        if not self.point_group.acts_exactly_on_grid:
            raise GroupError(
                f"{name}: expected a point group acting exactly on the grid, got {self.point_group.name}"
            )
        for label, value, least in (
            ("in_channels", in_channels, 1),
            ("dim", dim, 1),
            ("kernel_size", kernel_size, 1),
            ("dilation", dilation, 1),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise ConfigurationError(
                    f"{name}: expected {label} as an int >= {least}, got {value!r}"
                )
        if kernel_size % 2 == 0:
            raise ConfigurationError(f"{name}: expected an odd kernel size, got {kernel_size}")
        self.in_channels, self.dim = in_channels, dim
        self.kernel_size, self.dilation = kernel_size, dilation
        order = self.point_group.order()
        bound = (3.0 / (in_channels * order * kernel_size * kernel_size)) ** 0.5
        self.weight = nn.Parameter(
            torch.empty(dim, in_channels, order, kernel_size, kernel_size).uniform_(-bound, bound)
        )
        self.bias = nn.Parameter(torch.zeros(dim))

    def kernels(self) -> torch.Tensor:
        """The transformed kernels of all slices, ``(|H|·dim, in_channels·|H|, k, k)`` (slice-major)."""
        return _group_kernels(self.weight, self.point_group, "GroupConvolution")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        name = "GroupConvolution"
        g = self.point_group.order()
        if x.dim() != 5 or x.shape[1] != self.in_channels or x.shape[2] != g:
            raise ShapeError(
                f"{name}: expected a lifted field (B, C={self.in_channels}, |{self.point_group.name}|={g}, H, W), "
                f"got {tuple(x.shape)}"
            )
        check_floating_input(x, name)
        height, width = x.shape[-2:]
        if height != width and g > 2:
            raise ShapeError(
                f"{name}: expected a square grid for {self.point_group.name}, got {height}x{width}"
            )
        r = self.dilation * (self.kernel_size // 2)
        if min(height, width) < r:  # a wider window wraps around the torus, which is fine
            raise ShapeError(
                f"{name}: expected a grid of at least {r}x{r} (kernel {self.kernel_size}, dilation "
                f"{self.dilation}), got {height}x{width}"
            )
        flat = x.reshape(x.shape[0], self.in_channels * g, height, width)
        padded = F.pad(flat, (r, r, r, r), mode="circular")
        out = F.conv2d(
            padded,
            self.kernels().to(x.dtype),
            self.bias.repeat(g).to(x.dtype),
            dilation=self.dilation,
        )
        return rearrange(out, "b (g o) y x -> b o g y x", g=g)

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """See the class docstring."""
        t = LiftedField(self.point_group)
        try:
            acting = point_group_of(group)
        except GroupError as err:
            return Contract.unknown(f"GroupConvolution: {err}", t)
        if acting is not None:
            try:
                for gen in acting.generators():
                    embed_point_element(gen, self.point_group, "GroupConvolution")
            except GroupError:
                return Contract.breaks(
                    f"GroupConvolution: kernels are only transformed by {self.point_group.name}, "
                    f"not {acting.name}-equivariant",
                    t,
                    t,
                )
        return Contract.equivariant(t, t)

    def extra_repr(self) -> str:
        k = self.kernel_size
        extra = f", dilation {self.dilation}" if self.dilation != 1 else ""
        return f"{self.in_channels}->{self.dim}, {self.point_group.name}, circular {k}x{k}{extra}"
