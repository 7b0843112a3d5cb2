"""Accuracy and consistency as the papers measure them: random rotations by any angle,
random circular shifts, and random non-circular shifts (crops of a padded image).

Consistency follows Zhang (2019), "Making convolutional networks shift-invariant again":
every test image is transformed twice, by two independent random transformations, and
consistency is the fraction of images whose two copies get the same predicted class.
Accuracy is the mean accuracy over both copies. Everything is seeded, and the
transformations of an image do not depend on the batch size.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import nn

from ..data import RotationMask, rotate, translate
from ._metrics import _logits

__all__ = [
    "Robustness",
    "accuracy_by_angle",
    "circular_shift_robustness",
    "crop_shift_robustness",
    "rotation_robustness",
]

#: Maps a batch of images ``(b, C, H, W)`` and the batch's slice of the draws to transformed images.
_Transform = Callable[[torch.Tensor, slice], torch.Tensor]


@dataclass
class Robustness:
    """Accuracy and consistency of a classifier under one family of random transformations.

    Attributes
    ----------
    transform
        ``"rotation"``, ``"circular_shift"`` or ``"crop_shift"``.
    accuracy
        Mean accuracy over the two transformed copies of every image.
    consistency
        Fraction of images whose two copies (independent random transformations) get
        the same predicted class.
    num_images
        How many images were measured.
    seed
        The seed of the random transformations.
    settings
        The protocol's parameters (``max_shift``, ``mask``, ``fill``, …).
    """

    transform: str
    accuracy: float
    consistency: float
    num_images: int
    seed: int
    settings: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dictionary."""
        return asdict(self)


def _check(where: str, images: torch.Tensor, labels: torch.Tensor) -> None:
    if images.dim() != 4:
        raise ValueError(
            f"{where}: expected images of shape (N, C, H, W), got {tuple(images.shape)}"
        )
    if labels.shape != (images.shape[0],):
        raise ValueError(
            f"{where}: expected labels of shape ({images.shape[0]},), got {tuple(labels.shape)}"
        )


def _predict_transformed(
    model: nn.Module, images: torch.Tensor, transform: _Transform, batch_size: int
) -> torch.Tensor:
    """Top-1 classes ``(N,)`` of the transformed images, transformed one batch at a time."""
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    was_training = model.training
    model.eval()
    out = []
    try:
        with torch.no_grad():
            for start in range(0, images.shape[0], batch_size):
                part = slice(start, start + batch_size)
                moved = transform(images[part].to(device), part)
                out.append(_logits(model(moved)).argmax(dim=-1).cpu())
    finally:
        model.train(was_training)
    return torch.cat(out) if out else torch.empty(0, dtype=torch.long)


def _pairs(
    transform_name: str,
    model: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    first: _Transform,
    second: _Transform,
    seed: int,
    settings: dict[str, Any],
    batch_size: int,
) -> Robustness:
    a = _predict_transformed(model, images, first, batch_size)
    b = _predict_transformed(model, images, second, batch_size)
    labels = labels.cpu()
    n = images.shape[0]
    accuracy = (
        float(((a == labels).double().sum() + (b == labels).double().sum()) / (2 * n))
        if n
        else float("nan")
    )
    consistency = float((a == b).double().mean()) if n else float("nan")
    return Robustness(transform_name, accuracy, consistency, n, seed, settings)


def _fill_setting(fill: float | Sequence[float]) -> float | list[float]:
    return float(fill) if isinstance(fill, int | float) else [float(v) for v in fill]


def rotation_robustness(
    model: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    seed: int = 0,
    mask: RotationMask = "disc",
    fill: float | Sequence[float] = 0.0,
    batch_size: int = 256,
) -> Robustness:
    """Accuracy and consistency under rotations by random angles, uniform in ``[0, 2π)``.

    Every image is rotated twice, by two independent seeded angles, with
    [`groupattn.data.rotate`][groupattn.data.rotate]: bilinear interpolation about the image centre, and
    (``mask="disc"``, the default) ``fill`` outside the inscribed disc, at every angle —
    so both copies show the same disc of content. A rotation-invariant model scores a
    consistency near 1 (not exactly: interpolation is not an exact group action, except
    at quarter turns).

    Parameters
    ----------
    model
        A classifier ``(B, C, H, W) → (B, classes)``.
    images, labels
        Test images ``(N, C, H, W)`` and labels ``(N,)``.
    seed
        Seed of the angles.
    mask, fill
        See [`groupattn.data.rotate`][groupattn.data.rotate].
    batch_size
        Images per forward pass (does not change the result).

    Returns
    -------
    Robustness
        ``transform="rotation"``.
    """
    _check("rotation_robustness", images, labels)
    gen = torch.Generator().manual_seed(seed)
    angles = torch.rand(2, images.shape[0], generator=gen, dtype=torch.float64) * (2 * math.pi)

    def turn(k: int) -> _Transform:
        return lambda batch, part: rotate(batch, angles[k, part], mask=mask, fill=fill)

    settings = {
        "angles": "uniform in [0, 2π)",
        "interpolation": "bilinear",
        "mask": mask,
        "fill": _fill_setting(fill),
    }
    return _pairs("rotation", model, images, labels, turn(0), turn(1), seed, settings, batch_size)


def circular_shift_robustness(
    model: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    max_shift: int | None = None,
    seed: int = 0,
    batch_size: int = 256,
) -> Robustness:
    """Accuracy and consistency under random circular shifts (``torch.roll``).

    Every image is rolled twice, by two independent seeded offsets uniform in
    ``[-max_shift, max_shift]²`` — or, with ``max_shift=None``, uniform over all
    ``H × W`` offsets of the torus. A model invariant to circular translations scores a
    consistency of exactly 1.

    Parameters
    ----------
    model, images, labels, seed, batch_size
        As in [`rotation_robustness`][groupattn.training.rotation_robustness].
    max_shift
        The largest offset per axis, or ``None`` for every offset.

    Returns
    -------
    Robustness
        ``transform="circular_shift"``.
    """
    _check("circular_shift_robustness", images, labels)
    if max_shift is not None and max_shift < 0:
        raise ValueError(
            f"circular_shift_robustness: expected max_shift >= 0 or None, got {max_shift}"
        )
    n, _, h, w = images.shape
    gen = torch.Generator().manual_seed(seed)
    if max_shift is None:
        offsets = torch.stack(
            [
                torch.randint(0, h, (2, n), generator=gen),
                torch.randint(0, w, (2, n), generator=gen),
            ],
            dim=-1,
        )
    else:
        offsets = torch.randint(-max_shift, max_shift + 1, (2, n, 2), generator=gen)

    def roll(k: int) -> _Transform:
        def apply(batch: torch.Tensor, part: slice) -> torch.Tensor:
            shift = offsets[k, part].to(
                batch.device
            )  # per image, torch.roll(img, (dy, dx), dims=(-2, -1))
            rows = (torch.arange(h, device=batch.device)[None, :] - shift[:, :1]) % h
            cols = (torch.arange(w, device=batch.device)[None, :] - shift[:, 1:]) % w
            index = torch.arange(batch.shape[0], device=batch.device)[:, None, None]
            return batch[index, :, rows[:, :, None], cols[:, None, :]].permute(0, 3, 1, 2)

        return apply

    settings = {
        "max_shift": max_shift,
        "offsets": "uniform over the torus" if max_shift is None else "uniform",
    }
    return _pairs(
        "circular_shift", model, images, labels, roll(0), roll(1), seed, settings, batch_size
    )


def crop_shift_robustness(
    model: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    max_shift: int = 4,
    seed: int = 0,
    fill: float | Sequence[float] = 0.0,
    batch_size: int = 256,
) -> Robustness:
    """Accuracy and consistency under random non-circular shifts: random crops of a padded image.

    The protocol of the shift-invariance literature (Zhang 2019): every image is padded
    by ``max_shift`` pixels of ``fill`` on each side and cropped back to ``H × W`` twice,
    at two independent seeded positions — a shift by an offset uniform in
    ``[-max_shift, max_shift]²`` that loses what leaves the image
    ([`groupattn.data.translate`][groupattn.data.translate]). Even a circularly shift-invariant model can
    change its mind here, where content crosses the border.

    Parameters
    ----------
    model, images, labels, seed, batch_size
        As in [`rotation_robustness`][groupattn.training.rotation_robustness].
    max_shift
        The padding, and the largest offset per axis.
    fill
        The padding's value: one number or one per channel.

    Returns
    -------
    Robustness
        ``transform="crop_shift"``.
    """
    _check("crop_shift_robustness", images, labels)
    if max_shift < 0:
        raise ValueError(f"crop_shift_robustness: expected max_shift >= 0, got {max_shift}")
    gen = torch.Generator().manual_seed(seed)
    offsets = torch.randint(-max_shift, max_shift + 1, (2, images.shape[0], 2), generator=gen)

    def crop(k: int) -> _Transform:
        return lambda batch, part: translate(batch, offsets[k, part], fill=fill)

    settings = {"max_shift": max_shift, "padding": "constant", "fill": _fill_setting(fill)}
    return _pairs("crop_shift", model, images, labels, crop(0), crop(1), seed, settings, batch_size)


def accuracy_by_angle(
    model: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    degrees: Sequence[float] = tuple(range(0, 360, 30)),
    mask: RotationMask = "disc",
    fill: float | Sequence[float] = 0.0,
    batch_size: int = 256,
) -> dict[float, float]:
    """Accuracy against rotation angle: ``{degrees: accuracy}``, every image turned by each angle.

    Angles are in degrees, counter-clockwise; rotation as in [`groupattn.data.rotate`][groupattn.data.rotate].
    """
    _check("accuracy_by_angle", images, labels)
    labels = labels.cpu()
    out: dict[float, float] = {}

    def turn(theta: float) -> _Transform:
        return lambda batch, part: rotate(batch, theta, mask=mask, fill=fill)

    for angle in degrees:
        predicted = _predict_transformed(
            model, images, turn(math.radians(float(angle))), batch_size
        )
        out[angle] = float((predicted == labels).double().mean())
    return out
