"""Swin-style building blocks on lifted fields: window block, patch merging, up-sampling."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from .._errors import ConfigurationError, ShapeError
from ..actions import LiftedField, embed_point_element, point_group_of
from ..attention._group_attention import resolve_point_group
from ..attention._group_window import GroupWindowAttention
from ..contracts import Contract
from ..contracts._module import check_floating_input
from ..groups import Group, GroupError, PointGroup, RotoTranslationGroup, TorusTranslations
from ._group import GroupLayerNorm, GroupMLP
from ._group_patch import _group_kernels

__all__ = ["GroupPatchMerging", "GroupWindowBlock", "LiftedUpsample"]


def _strided_contract(
    module: str, point_group: PointGroup, group: Group, stride: int, up: bool
) -> Contract:
    """Contract of a layer that maps ``s × s`` cells aligned with the grid onto points (or back).

    Equivariant under the subgroups of ``H`` (about the grid centre; the side is a
    multiple of ``s``); under torus translations by multiples of ``s`` (down-sampling:
    onto translations of the coarse grid; up-sampling: translations ``t`` of the coarse
    grid onto ``s·t``); *breaks* under other translations and under ``T ⋊ H``.
    """
    t = LiftedField(point_group)
    if isinstance(group, TorusTranslations):
        if up:
            out = TorusTranslations(group.height, group.width, stride=group.stride * stride)
            return Contract.equivariant(t, t, output_group=out)
        if group.stride % stride == 0:
            out = TorusTranslations(group.height, group.width, stride=group.stride // stride)
            return Contract.equivariant(t, t, output_group=out)
        return Contract.breaks(
            f"{module}: stride-{stride} cells are equivariant only to translations by multiples of "
            f"{stride}, got {group.name}",
            t,
            t,
        )
    if isinstance(group, RotoTranslationGroup):
        return Contract.breaks(
            f"{module}: fixed {stride}x{stride} cells are not equivariant to all translations of {group.name}",
            t,
            t,
        )
    try:
        acting = point_group_of(group)
    except GroupError as err:
        return Contract.unknown(f"{module}: {err}", t)
    if acting is None:
        return Contract.unknown(f"{module}: no rule for {group.name}", t)
    try:
        for gen in acting.generators():
            embed_point_element(gen, point_group, module)
    except GroupError:
        return Contract.breaks(
            f"{module}: kernels are only transformed by {point_group.name}, not {acting.name}-equivariant",
            t,
            t,
        )
    if not acting.acts_exactly_on_grid:
        return Contract.unknown(f"{module}: {acting.name} does not map the pixel grid to itself", t)
    return Contract.equivariant(t, t)


class GroupWindowBlock(nn.Module):
    """A pre-norm Swin block on lifted fields.

    ``x + GroupWindowAttention(GroupLayerNorm(x))`` then ``x + GroupMLP(GroupLayerNorm(x))``.

    Contract: that of its [`GroupWindowAttention`][groupattn.attention.GroupWindowAttention]
    (norms and MLP are equivariant wherever it is).

    Shapes: ``(B, dim, |H|, S, S) → (B, dim, |H|, S, S)``.

    Parameters
    ----------
    dim
        ``C`` (in and out).
    point_group
        ``H`` (instance or name).
    num_heads, window_size, shift
        Passed to [`GroupWindowAttention`][groupattn.attention.GroupWindowAttention].
    mlp_ratio
        Hidden width of the MLP relative to ``C``.
    mix_orientations
        Passed to [`GroupMLP`][groupattn.nn.GroupMLP]: learned mixing of the group axis.
    """

    def __init__(
        self,
        dim: int,
        point_group: PointGroup | str,
        num_heads: int = 1,
        window_size: int = 4,
        shift: int = 0,
        mlp_ratio: float = 2.0,
        mix_orientations: bool = False,
    ) -> None:
        super().__init__()
        self.point_group = resolve_point_group(point_group, "GroupWindowBlock")
        self.dim = dim
        self.norm1 = GroupLayerNorm(dim, self.point_group)
        self.attention = GroupWindowAttention(
            dim, self.point_group, num_heads=num_heads, window_size=window_size, shift=shift
        )
        self.norm2 = GroupLayerNorm(dim, self.point_group)
        self.mlp = GroupMLP(
            dim,
            max(1, int(dim * mlp_ratio)),
            self.point_group,
            mix_orientations=mix_orientations,
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_floating_input(x, "GroupWindowBlock")
        x = x + self.attention(self.norm1(x))
        return x + self.mlp(self.norm2(x))

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """That of the attention."""
        return self.attention.contract(group, input_type)


class GroupPatchMerging(nn.Module):
    """Equivariant 2 × 2 patch merging of lifted fields: ``(B, C, |H|, S, S) → (B, C_out, |H|, S/s, S/s)``.

    ``GroupLayerNorm`` then a group convolution with an ``s × s`` kernel and stride ``s``
    over the aligned cells (no padding, no bias): output slice ``h`` uses the kernel
    transformed by ``h``, ``W_h[·, h', u] = W[·, h⁻¹h', h⁻¹u]`` (taps rotated about the
    cell's centre, input slices permuted). Swin's merging (concatenate the ``2 × 2``
    neighbours, a linear map ``4C → 2C``) is the case ``H = C1``. With ``s`` dividing the
    side, a rotation or reflection about the grid centre maps cells onto cells and acts
    inside each cell about its centre, so the layer is exactly ``H``-equivariant; it mixes
    orientations with a learned kernel.

    Contract: equivariant ``LiftedField(H) → LiftedField(H)`` under the subgroups of
    ``H`` and under torus translations by multiples of ``s`` (onto translations of the
    coarse grid); *breaks* under other translations, ``T ⋊ H``, and point groups larger
    than ``H``.

    Shapes: ``(B, dim, |H|, S, S) → (B, out_dim, |H|, S/s, S/s)``.

    Parameters
    ----------
    dim, out_dim
        Input and output widths per group element (Swin: ``out_dim = 2 · dim``).
    point_group
        ``H`` (instance or name); must act exactly on the grid.
    stride
        Cell side ``s`` (2 in Swin).

    Raises
    ------
    ConfigurationError
        For non-positive widths or stride.
    GroupError
        For a point group not acting exactly on the grid.
    ShapeError
        In ``forward``: a wrong shape, a non-square grid under quarter turns, or a side
        not divisible by ``s``.
    """

    def __init__(
        self, dim: int, out_dim: int, point_group: PointGroup | str, stride: int = 2
    ) -> None:
        super().__init__()
        name = "GroupPatchMerging"
        self.point_group = resolve_point_group(point_group, name)
        if not self.point_group.acts_exactly_on_grid:
            raise GroupError(
                f"{name}: expected a point group acting exactly on the grid, got {self.point_group.name}"
            )
        if dim < 1 or out_dim < 1 or stride < 1:
            raise ConfigurationError(
                f"{name}: expected positive dim, out_dim and stride, got {dim}, {out_dim}, {stride}"
            )
        self.dim, self.out_dim, self.stride = dim, out_dim, stride
        self.norm = GroupLayerNorm(dim, self.point_group)
        order = self.point_group.order()
        bound = (3.0 / (dim * order * stride * stride)) ** 0.5
        self.weight = nn.Parameter(
            torch.empty(out_dim, dim, order, stride, stride).uniform_(-bound, bound)
        )

    def kernels(self) -> torch.Tensor:
        """The transformed kernels ``(|H|·out_dim, dim·|H|, s, s)`` (slice-major)."""
        return _group_kernels(self.weight, self.point_group, "GroupPatchMerging")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        name = "GroupPatchMerging"
        LiftedField(self.point_group).check(x, name, channels=self.dim)
        check_floating_input(x, name)
        b, c, g, height, width = x.shape
        s = self.stride
        if height % s or width % s:
            raise ShapeError(
                f"{name}: expected a grid divisible by the stride {s}, got {height}x{width}"
            )
        if height != width and g > 2:
            raise ShapeError(
                f"{name}: expected a square grid for {self.point_group.name}, got {height}x{width}"
            )
        flat = self.norm(x).reshape(b, c * g, height, width)
        out = F.conv2d(flat, self.kernels().to(x.dtype), stride=s)
        return rearrange(out, "b (g o) y x -> b o g y x", g=g)

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """See the class docstring."""
        return _strided_contract("GroupPatchMerging", self.point_group, group, self.stride, False)

    def extra_repr(self) -> str:
        return f"{self.dim}->{self.out_dim}, {self.point_group.name}, stride={self.stride}"


class LiftedUpsample(nn.Module):
    """Nearest-neighbour up-sampling of lifted fields: ``(B, C, |H|, h, w) → (B, C, |H|, s·h, s·w)``.

    Every coarse position becomes an ``s × s`` cell of the fine grid (the group axis is
    untouched). Rotations and reflections about the centre map fine cells onto fine cells
    exactly as they map coarse positions (``⌊(s·h − 1 − y)/s⌋ = h − 1 − ⌊y/s⌋``), so the
    layer is exactly ``H``-equivariant, and a coarse translation by ``t`` becomes a fine
    translation by ``s·t``: the inverse of [`GroupPatchMerging`][groupattn.nn.GroupPatchMerging]'s
    grid map, for dense (per-pixel) heads on top of a hierarchical lifted backbone.

    Contract: equivariant ``LiftedField(H) → LiftedField(H)`` under the subgroups of
    ``H`` and under torus translations (``TorusTranslations(h, w, stride=t)`` onto
    ``TorusTranslations(h, w, stride=s·t)`` of the fine grid); *breaks* under ``T ⋊ H``
    of the coarse grid (its output group is not a roto-translation group of the fine grid)
    and under point groups larger than ``H``.

    Shapes: ``(B, C, |H|, h, w) → (B, C, |H|, s·h, s·w)``.

    Parameters
    ----------
    point_group
        ``H`` (instance or name).
    stride
        ``s``.

    Raises
    ------
    ConfigurationError
        For a stride below 1.
    ShapeError
        In ``forward``, for an input that is not a lifted field of ``H``.
    """

    def __init__(self, point_group: PointGroup | str, stride: int = 2) -> None:
        super().__init__()
        self.point_group = resolve_point_group(point_group, "LiftedUpsample")
        if not isinstance(stride, int) or isinstance(stride, bool) or stride < 1:
            raise ConfigurationError(
                f"LiftedUpsample: expected a stride as an int >= 1, got {stride!r}"
            )
        self.stride = stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        LiftedField(self.point_group).check(x, "LiftedUpsample")
        check_floating_input(x, "LiftedUpsample")
        s = self.stride
        return x.repeat_interleave(s, dim=3).repeat_interleave(s, dim=4)

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """See the class docstring."""
        return _strided_contract("LiftedUpsample", self.point_group, group, self.stride, True)

    def extra_repr(self) -> str:
        return f"{self.point_group.name}, stride={self.stride}"
