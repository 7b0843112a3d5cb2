"""The bundled real dataset: scikit-learn's 8×8 handwritten digits, on a larger canvas."""

from __future__ import annotations

import gzip
from dataclasses import dataclass
from importlib import resources

import numpy as np
import torch
import torch.nn.functional as F

__all__ = ["DigitsSplit", "load_digits", "random_shifts", "rotate_quarter_turns"]


@dataclass
class DigitsSplit:
    """Train and test tensors of the digits dataset.

    Attributes
    ----------
    train_images, test_images
        Float tensors ``(N, 1, canvas, canvas)`` with values in ``[0, 1]``.
    train_labels, test_labels
        Long tensors ``(N,)`` with classes ``0 … 9``.
    """

    train_images: torch.Tensor
    train_labels: torch.Tensor
    test_images: torch.Tensor
    test_labels: torch.Tensor


def _read_raw() -> tuple[np.ndarray, np.ndarray]:
    with resources.files("groupattn.data").joinpath("digits.csv.gz").open("rb") as fh:
        data = np.loadtxt(gzip.open(fh), delimiter=",")
    return data[:, :-1].reshape(-1, 8, 8) / 16.0, data[:, -1].astype(np.int64)


def load_digits(
    canvas: int = 32,
    upscale: int = 2,
    test_fraction: float = 0.25,
    seed: int = 0,
    limit: int | None = None,
) -> DigitsSplit:
    """Load the 1,797 bundled digits, upscaled and centred on a ``canvas × canvas`` image.

    The data ship inside the package (scikit-learn's copy of the UCI optical digits);
    nothing is downloaded.

    Parameters
    ----------
    canvas
        Side of the output images; must be at least ``8 · upscale``.
    upscale
        Bilinear magnification of the 8×8 digits (2 gives 16×16 glyphs). Not
        nearest-neighbour: duplicated pixels make polyphase components tie exactly
        (equal norms on every image at stride 4), which polyphase anchoring can only
        break by index, not equivariantly.
    test_fraction
        Share of the (seeded, shuffled) samples held out for testing.
    seed
        Seed of the shuffle.
    limit
        Keep only the first ``limit`` samples after shuffling (for quick runs).

    Returns
    -------
    DigitsSplit
    """
    if canvas < 8 * upscale:
        raise ValueError(f"load_digits: expected canvas >= 8*upscale = {8 * upscale}, got {canvas}")
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"load_digits: expected 0 < test_fraction < 1, got {test_fraction}")
    images, labels = _read_raw()
    order = np.random.default_rng(seed).permutation(len(labels))
    if limit is not None:
        order = order[:limit]
    x = torch.from_numpy(images[order]).float().unsqueeze(1)
    y = torch.from_numpy(labels[order])
    if upscale > 1:
        x = F.interpolate(x, scale_factor=upscale, mode="bilinear", align_corners=False).clamp(
            0.0, 1.0
        )
    side = x.shape[-1]
    pad0 = (canvas - side) // 2
    pad1 = canvas - side - pad0
    x = F.pad(x, (pad0, pad1, pad0, pad1))
    n_test = max(1, round(len(y) * test_fraction))
    return DigitsSplit(x[n_test:], y[n_test:], x[:n_test], y[:n_test])


def random_shifts(
    images: torch.Tensor, max_shift: int, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Circularly shift each image by a seeded random offset in ``[-max_shift, max_shift]²``.

    Returns
    -------
    tuple of torch.Tensor
        The shifted images ``(N, C, H, W)`` and the offsets ``(N, 2)``.
    """
    gen = torch.Generator().manual_seed(seed)
    offsets = torch.randint(-max_shift, max_shift + 1, (images.shape[0], 2), generator=gen)
    out = torch.stack(
        [
            torch.roll(img, shifts=(int(dy), int(dx)), dims=(-2, -1))
            for img, (dy, dx) in zip(images, offsets)
        ]
    )
    return out, offsets


def rotate_quarter_turns(images: torch.Tensor, k: int) -> torch.Tensor:
    """Rotate images ``(N, C, H, W)`` by ``k`` quarter turns (``torch.rot90`` on the last two axes)."""
    return torch.rot90(images, k, dims=(-2, -1))
