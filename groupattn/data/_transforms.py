"""Geometric transformations of image batches: arbitrary rotations, non-circular shifts, flips.

All of them act on float tensors ``(N, C, H, W)``, one transformation per image, in
PyTorch only (no NumPy), and read ``fill`` wherever the result needs a pixel from
outside the image.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import torch

__all__ = [
    "RotationMask",
    "disc_mask",
    "flip_horizontal",
    "random_angles",
    "random_rotations",
    "random_translations",
    "rotate",
    "translate",
]

RotationMask = Literal["disc", "image"]
"""Where a rotated image keeps its pixels ([`rotate`][groupattn.data.rotate]): ``"disc"`` (inside the inscribed
disc, [`disc_mask`][groupattn.data.disc_mask]) or ``"image"`` (everywhere)."""

#: Rotated images are computed in chunks of this many images (bounds the index tensors' memory).
_CHUNK = 512


def _check_images(where: str, images: torch.Tensor) -> None:
    if not isinstance(images, torch.Tensor) or images.dim() != 4:
        got = tuple(images.shape) if isinstance(images, torch.Tensor) else type(images).__name__
        raise ValueError(f"{where}: expected images of shape (N, C, H, W), got {got}")
    if not images.is_floating_point():
        raise ValueError(f"{where}: expected a floating-point image tensor, got {images.dtype}")


def _fill(where: str, fill: float | Sequence[float], images: torch.Tensor) -> torch.Tensor:
    """``fill`` as a ``(1, C, 1, 1)`` tensor of the images' dtype and device."""
    values = [float(fill)] if isinstance(fill, int | float) else [float(v) for v in fill]
    channels = images.shape[1]
    if len(values) == 1:
        values = values * channels
    if len(values) != channels:
        raise ValueError(
            f"{where}: expected a fill value per channel ({channels}) or one for all, got {len(values)}"
        )
    return torch.tensor(values, dtype=images.dtype, device=images.device).view(1, channels, 1, 1)


def disc_mask(height: int, width: int, device: torch.device | str | None = None) -> torch.Tensor:
    """The pixels of an ``height × width`` image inside its inscribed disc.

    A pixel is inside when its centre lies at most ``(min(height, width) − 1) / 2`` from
    the image centre ``((height − 1) / 2, (width − 1) / 2)``: the largest disc that any
    rotation about the centre maps into the square spanned by the pixel centres, so a
    rotated pixel inside it interpolates real pixels only. The disc is symmetric under
    quarter turns and reflections of a square image.

    Returns
    -------
    torch.Tensor
        A boolean mask ``(height, width)``.
    """
    if height < 1 or width < 1:
        raise ValueError(f"disc_mask: expected a positive image size, got {height}x{width}")
    rows = torch.arange(height, dtype=torch.float64, device=device) - (height - 1) / 2
    cols = torch.arange(width, dtype=torch.float64, device=device) - (width - 1) / 2
    radius = (min(height, width) - 1) / 2
    return rows[:, None] ** 2 + cols[None, :] ** 2 <= radius**2


def _angles(where: str, angles: float | Sequence[float] | torch.Tensor, n: int) -> torch.Tensor:
    theta = torch.as_tensor(angles, dtype=torch.float64).reshape(-1)
    if theta.numel() == 1:
        theta = theta.expand(n)
    if theta.numel() != n:
        raise ValueError(f"{where}: expected one angle or one per image ({n}), got {theta.numel()}")
    if not bool(torch.isfinite(theta).all()):
        raise ValueError(
            f"{where}: expected finite angles (radians), got {theta[~torch.isfinite(theta)][:3].tolist()}"
        )
    return theta.cpu()


def _snap(values: torch.Tensor) -> torch.Tensor:
    """Round cosines and sines within 1e-12 of −1, 0 or 1 to them: quarter turns become exact."""
    rounded = values.round()
    return torch.where((values - rounded).abs() < 1e-12, rounded, values)


def _rotate_chunk(
    images: torch.Tensor, theta: torch.Tensor, fill: torch.Tensor, mask: torch.Tensor | None
) -> torch.Tensor:
    n, c, h, w = images.shape
    device = images.device
    cos = _snap(torch.cos(theta)).to(device)[:, None, None]
    sin = _snap(torch.sin(theta)).to(device)[:, None, None]
    cy, cx = (h - 1) / 2, (w - 1) / 2
    # output pixel (i, j) at x' = j − cx (right), y' = cy − i (up); it reads the input at
    # R(−θ)(x', y') = (cos·x' + sin·y', −sin·x' + cos·y'), i.e. row cy − y, column cx + x.
    up = (cy - torch.arange(h, dtype=torch.float64, device=device))[None, :, None]
    right = (torch.arange(w, dtype=torch.float64, device=device) - cx)[None, None, :]
    src_col = cx + (cos * right + sin * up)
    src_row = cy - (cos * up - sin * right)
    row0, col0 = src_row.floor(), src_col.floor()
    frac_row, frac_col = src_row - row0, src_col - col0
    flat = images.reshape(n, c, h * w)
    out = torch.zeros_like(images)
    for d_row, d_col in ((0, 0), (0, 1), (1, 0), (1, 1)):
        rows, cols = row0 + d_row, col0 + d_col
        inside = (rows >= 0) & (rows <= h - 1) & (cols >= 0) & (cols <= w - 1)
        index = (rows.clamp(0, h - 1) * w + cols.clamp(0, w - 1)).long().reshape(n, 1, h * w)
        values = flat.gather(2, index.expand(n, c, h * w)).reshape(n, c, h, w)
        values = torch.where(inside[:, None], values, fill)
        weight = (frac_row if d_row else 1.0 - frac_row) * (frac_col if d_col else 1.0 - frac_col)
        out = out + weight.to(images.dtype)[:, None] * values
    if mask is not None:
        out = torch.where(mask, out, fill)
    return out


def rotate(
    images: torch.Tensor,
    angles: float | Sequence[float] | torch.Tensor,
    mask: RotationMask = "disc",
    fill: float | Sequence[float] = 0.0,
) -> torch.Tensor:
    """Rotate each image by its angle about the image centre, with bilinear interpolation.

    Positive angles turn the picture counter-clockwise as displayed (row 0 at the top),
    the direction of ``torch.rot90(x, 1, dims=(-2, -1))``. Each output pixel reads the
    input, by bilinear interpolation of its four neighbours, at its own position turned
    back by the angle about the centre ``((H − 1) / 2, (W − 1) / 2)``; neighbours
    outside the image read ``fill``. With ``mask="disc"`` (the default) every output
    pixel outside the inscribed disc ([`disc_mask`][groupattn.data.disc_mask]) is then set to ``fill`` — at
    every angle, 0 included — so that all rotations of one image show the same disc of
    content and nothing from the corners. With ``mask="image"`` the corners are kept
    (and the corners turned in from outside the image are ``fill``).

    Multiples of a quarter turn are exact permutations of the pixels of a square image
    (equal to [`rotate_quarter_turns`][groupattn.data.rotate_quarter_turns], then the mask).

    Parameters
    ----------
    images
        Float tensor ``(N, C, H, W)``.
    angles
        Radians: one for all images or one per image ``(N,)``.
    mask
        ``"disc"`` or ``"image"`` (see above).
    fill
        The value outside the image and the disc: one number or one per channel (for
        normalised images, the normalised value of black).

    Returns
    -------
    torch.Tensor
        The rotated images ``(N, C, H, W)``, same dtype and device.
    """
    _check_images("rotate", images)
    if mask not in ("disc", "image"):
        raise ValueError(f"rotate: expected mask 'disc' or 'image', got {mask!r}")
    n, _, h, w = images.shape
    theta = _angles("rotate", angles, n)
    fill_t = _fill("rotate", fill, images)
    inside = disc_mask(h, w, images.device)[None, None] if mask == "disc" else None
    chunks = [
        _rotate_chunk(images[start : start + _CHUNK], theta[start : start + _CHUNK], fill_t, inside)
        for start in range(0, n, _CHUNK)
    ]
    return torch.cat(chunks) if chunks else images.clone()


def random_angles(n: int, seed: int = 0) -> torch.Tensor:
    """``n`` seeded angles drawn uniformly from ``[0, 2π)``, float64 ``(n,)`` radians."""
    if n < 0:
        raise ValueError(f"random_angles: expected a non-negative count, got {n}")
    gen = torch.Generator().manual_seed(seed)
    return torch.rand(n, generator=gen, dtype=torch.float64) * (2 * math.pi)


def random_rotations(
    images: torch.Tensor,
    seed: int = 0,
    mask: RotationMask = "disc",
    fill: float | Sequence[float] = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate each image by a seeded angle drawn uniformly from ``[0, 2π)`` (see [`rotate`][groupattn.data.rotate]).

    Returns
    -------
    tuple of torch.Tensor
        The rotated images ``(N, C, H, W)`` and the angles ``(N,)`` (float64 radians).
    """
    _check_images("random_rotations", images)
    theta = random_angles(images.shape[0], seed)
    return rotate(images, theta, mask, fill), theta


def translate(
    images: torch.Tensor, offsets: torch.Tensor, fill: float | Sequence[float] = 0.0
) -> torch.Tensor:
    """Shift each image by its integer offset, *not* circularly: what leaves is lost.

    ``out[n, :, i, j] = images[n, :, i − dy, j − dx]`` where that pixel exists and
    ``fill`` elsewhere — the direction of ``torch.roll(x, (dy, dx), dims=(-2, -1))``,
    without the wrap-around. A shift by ``(dy, dx)`` with ``|dy|, |dx| ≤ p`` is the
    crop at ``(p − dy, p − dx)`` of the image padded by ``p`` pixels of ``fill``: the
    random-crop augmentation and the non-circular shifts of the shift-invariance
    literature.

    Parameters
    ----------
    images
        Float tensor ``(N, C, H, W)``.
    offsets
        Integer tensor ``(N, 2)`` of ``(dy, dx)`` (down, right).
    fill
        One value, or one per channel.

    Returns
    -------
    torch.Tensor
        The shifted images ``(N, C, H, W)``.
    """
    _check_images("translate", images)
    n, _, h, w = images.shape
    if offsets.shape != (n, 2) or offsets.is_floating_point():
        raise ValueError(
            f"translate: expected integer offsets of shape ({n}, 2), got {offsets.dtype} {tuple(offsets.shape)}"
        )
    offsets = offsets.to(images.device).long()
    rows = torch.arange(h, device=images.device)[None, :] - offsets[:, :1]  # (N, H)
    cols = torch.arange(w, device=images.device)[None, :] - offsets[:, 1:]  # (N, W)
    inside = ((rows >= 0) & (rows < h))[:, :, None] & ((cols >= 0) & (cols < w))[:, None, :]
    batch = torch.arange(n, device=images.device)[:, None, None]
    moved = images[
        batch, :, rows.clamp(0, h - 1)[:, :, None], cols.clamp(0, w - 1)[:, None, :]
    ]  # (N, H, W, C)
    return torch.where(inside[:, None], moved.permute(0, 3, 1, 2), _fill("translate", fill, images))


def random_translations(
    images: torch.Tensor, max_shift: int, seed: int = 0, fill: float | Sequence[float] = 0.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Shift each image non-circularly by a seeded offset uniform in ``[-max_shift, max_shift]²``.

    The same as taking a uniformly random ``H × W`` crop of the image padded by
    ``max_shift`` pixels of ``fill`` on every side (see [`translate`][groupattn.data.translate]).

    Returns
    -------
    tuple of torch.Tensor
        The shifted images ``(N, C, H, W)`` and the offsets ``(N, 2)``.
    """
    _check_images("random_translations", images)
    if max_shift < 0:
        raise ValueError(f"random_translations: expected max_shift >= 0, got {max_shift}")
    gen = torch.Generator().manual_seed(seed)
    offsets = torch.randint(-max_shift, max_shift + 1, (images.shape[0], 2), generator=gen)
    return translate(images, offsets, fill), offsets


def flip_horizontal(images: torch.Tensor, flips: torch.Tensor | None = None) -> torch.Tensor:
    """Mirror images left to right: all of them, or those where ``flips`` ``(N,)`` is true."""
    _check_images("flip_horizontal", images)
    if flips is None:
        return images.flip(-1)
    if flips.shape != (images.shape[0],):
        raise ValueError(
            f"flip_horizontal: expected flips of shape ({images.shape[0]},), got {tuple(flips.shape)}"
        )
    return torch.where(
        flips.to(images.device, torch.bool)[:, None, None, None], images.flip(-1), images
    )
