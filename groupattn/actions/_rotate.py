"""Rotations by arbitrary angles (interpolated) and smooth test images sampled analytically.

Point groups finer than C4 (C8, C16, …) do not map the pixel grid onto itself, so their
action on images can only be approximated. These helpers give that approximation —
bilinear resampling about the image centre — and a way to avoid it for inputs: sample
an analytic function (a sum of Gaussians) on the grid, and its exactly rotated version
by sampling the rotated function.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from .._errors import ConfigurationError, ShapeError
from ..groups import PointGroup

__all__ = ["gaussian_mixture_image", "rotate_image", "rotate_lifted"]


def _center(height: int, width: int) -> tuple[float, float]:
    return ((height - 1) / 2.0, (width - 1) / 2.0)


def rotate_image(x: torch.Tensor, angle: float) -> torch.Tensor:
    """Rotate images about their centre by ``angle`` radians (bilinear, zeros outside).

    The sense matches [`groupattn.groups.real_matrix`][groupattn.groups.real_matrix] and ``torch.rot90``: the
    result is ``out(p) = x(R(−angle)(p − c) + c)`` on ``(y, x)`` coordinates, so
    ``angle = π/2`` reproduces ``torch.rot90(x, 1, (-2, -1))`` exactly at the pixels.

    Parameters
    ----------
    x
        ``(..., H, W)`` floating tensor.
    angle
        Radians.

    Returns
    -------
    torch.Tensor
        Same shape as ``x``.
    """
    if x.dim() < 2 or not x.is_floating_point():
        raise ShapeError(
            f"rotate_image: expected a floating tensor (..., H, W), got {x.dtype} {tuple(x.shape)}"
        )
    lead, (h, w) = x.shape[:-2], x.shape[-2:]
    cy, cx = _center(h, w)
    ys, xs = torch.meshgrid(
        torch.arange(h, dtype=torch.float64), torch.arange(w, dtype=torch.float64), indexing="ij"
    )
    c, s = math.cos(angle), math.sin(angle)
    dy, dx = ys - cy, xs - cx
    # R(−θ): y' = y c + x s, x' = −y s + x c
    src_y = dy * c + dx * s + cy
    src_x = -dy * s + dx * c + cx
    grid = torch.stack([2 * src_x / max(w - 1, 1) - 1, 2 * src_y / max(h - 1, 1) - 1], -1).to(
        x.dtype
    )
    flat = x.reshape(-1, 1, h, w)
    out = F.grid_sample(
        flat, grid.expand(flat.shape[0], h, w, 2), mode="bilinear", align_corners=True
    )
    return out.reshape(*lead, h, w)


def rotate_lifted(x: torch.Tensor, point_group: PointGroup, rotation: int) -> torch.Tensor:
    """Act on a lifted field ``(B, C, |H|, H, W)`` by the rotation ``rotation`` of a cyclic ``H``.

    Spatial axes are rotated by ``2π·rotation/n`` with [`rotate_image`][groupattn.actions.rotate_image] and the group
    axis is rolled by ``rotation`` (the left-regular action of a cyclic group).
    """
    n = point_group.order()
    if x.dim() != 5 or x.shape[2] != n or point_group.n != n:
        raise ShapeError(
            f"rotate_lifted: expected a lifted field (B, C, |{point_group.name}|={n}, H, W) of a cyclic group, "
            f"got shape {tuple(x.shape)}"
        )
    rotated = rotate_image(x, 2 * math.pi * rotation / n)
    return torch.roll(rotated, shifts=rotation, dims=2)


def gaussian_mixture_image(
    size: int,
    centers: Sequence[tuple[float, float]],
    widths: Sequence[float],
    weights: Sequence[float],
    angle: float = 0.0,
    dtype: torch.dtype = torch.float64,
) -> torch.Tensor:
    """Sample ``Σ w exp(−|p − c|² / 2σ²)`` rotated by ``angle`` on a ``size × size`` grid.

    Centres are ``(y, x)`` offsets from the image centre; the rotated image is the
    function ``f(R(−angle) p)`` sampled exactly, i.e. the ideal rotation of the sampled
    image, with no interpolation.

    Returns
    -------
    torch.Tensor
        ``(size, size)``.
    """
    if not (len(centers) == len(widths) == len(weights)):
        raise ConfigurationError(
            f"gaussian_mixture_image: expected as many centres, widths and weights, got "
            f"{len(centers)}, {len(widths)}, {len(weights)}"
        )
    c0 = (size - 1) / 2.0
    ys, xs = torch.meshgrid(
        torch.arange(size, dtype=torch.float64) - c0,
        torch.arange(size, dtype=torch.float64) - c0,
        indexing="ij",
    )
    c, s = math.cos(angle), math.sin(angle)
    py, px = ys * c + xs * s, -ys * s + xs * c
    out = torch.zeros(size, size, dtype=torch.float64)
    for (cy, cx), sigma, weight in zip(centers, widths, weights):
        out += weight * torch.exp(-((py - cy) ** 2 + (px - cx) ** 2) / (2 * sigma**2))
    return out.to(dtype)
