"""Evaluation metrics: accuracy, and how predictions react to shifts and quarter turns."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from ..data import random_shifts, rotate_quarter_turns

if TYPE_CHECKING:
    from ._robustness import Robustness

__all__ = [
    "Evaluation",
    "accuracy",
    "accuracy_by_rotation",
    "accuracy_by_shift",
    "evaluate",
    "predict",
    "rotation_consistency",
    "shift_consistency",
]


def _logits(output: Any) -> torch.Tensor:
    if isinstance(output, torch.Tensor):
        return output
    if hasattr(output, "output"):
        return output.output
    if isinstance(output, tuple | list) and output and isinstance(output[0], torch.Tensor):
        return output[0]
    raise TypeError(
        f"predict: expected the model to return logits (B, classes), got {type(output).__name__}"
    )


def predict(model: nn.Module, images: torch.Tensor, batch_size: int = 256) -> torch.Tensor:
    """Top-1 classes ``(N,)`` of ``images`` ``(N, C, H, W)`` (evaluation mode, no gradients).

    The images are moved to the model's device; the result is on the CPU.
    """
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    was_training = model.training
    model.eval()
    out = []
    with torch.no_grad():
        for start in range(0, images.shape[0], batch_size):
            chunk = images[start : start + batch_size].to(device)
            out.append(_logits(model(chunk)).argmax(dim=-1).cpu())
    model.train(was_training)
    return torch.cat(out) if out else torch.empty(0, dtype=torch.long)


def accuracy(
    model: nn.Module, images: torch.Tensor, labels: torch.Tensor, batch_size: int = 256
) -> float:
    """Fraction of ``images`` classified as ``labels``."""
    return float((predict(model, images, batch_size) == labels.cpu()).float().mean())


def shift_consistency(
    model: nn.Module, images: torch.Tensor, max_shift: int = 8, seed: int = 0, batch_size: int = 256
) -> float:
    """Fraction of inputs whose top-1 class is unchanged under a random circular shift.

    Each image is rolled by a seeded random offset in ``[-max_shift, max_shift]²``
    ([`groupattn.data.random_shifts`][groupattn.data.random_shifts]). A translation-invariant model scores 1.0.
    """
    shifted, _ = random_shifts(images, max_shift, seed)
    return float(
        (predict(model, images, batch_size) == predict(model, shifted, batch_size)).float().mean()
    )


def rotation_consistency(model: nn.Module, images: torch.Tensor, batch_size: int = 256) -> float:
    """Fraction of inputs predicted identically in all four 90° rotations.

    A model invariant to quarter turns (e.g. p4-equivariant with invariant pooling)
    scores 1.0.
    """
    predictions = [predict(model, rotate_quarter_turns(images, k), batch_size) for k in range(4)]
    same = torch.ones_like(predictions[0], dtype=torch.bool)
    for p in predictions[1:]:
        same &= p == predictions[0]
    return float(same.float().mean())


def accuracy_by_shift(
    model: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    distances: Sequence[int] = (0, 2, 4, 6, 8, 10, 12, 14, 16),
    batch_size: int = 256,
) -> dict[int, float]:
    """Accuracy against shift distance ``d``: the mean over the circular shifts
    ``(d, 0)`` (down) and ``(0, d)`` (right).

    On a circular ``H × W`` image a shift by ``−d`` is the shift by ``H − d``, so
    distances ``0 … H/2`` in these two directions cover every axis-aligned shift.
    """
    out: dict[int, float] = {}
    for d in distances:
        offsets = ((0, 0),) if d == 0 else ((d, 0), (0, d))
        accs = [
            accuracy(model, torch.roll(images, shifts=offset, dims=(-2, -1)), labels, batch_size)
            for offset in offsets
        ]
        out[int(d)] = sum(accs) / len(accs)
    return out


def accuracy_by_rotation(
    model: nn.Module, images: torch.Tensor, labels: torch.Tensor, batch_size: int = 256
) -> dict[int, float]:
    """Accuracy against rotation angle: ``{0: …, 90: …, 180: …, 270: …}`` (counter-clockwise)."""
    return {
        90 * k: accuracy(model, rotate_quarter_turns(images, k), labels, batch_size)
        for k in range(4)
    }


@dataclass
class Evaluation:
    """Every metric of one model on one test set (fractions in ``[0, 1]``).

    Attributes
    ----------
    accuracy
        Clean test accuracy.
    shifted_accuracy
        Accuracy on the test images under random circular shifts.
    shift_consistency
        See [`shift_consistency`][groupattn.training.shift_consistency].
    rotated_accuracy
        Mean accuracy over the four 90° rotations.
    rotation_consistency
        See [`rotation_consistency`][groupattn.training.rotation_consistency].
    accuracy_by_shift, accuracy_by_rotation
        See [`accuracy_by_shift`][groupattn.training.accuracy_by_shift] and [`accuracy_by_rotation`][groupattn.training.accuracy_by_rotation].
    predicted_classes
        How many different classes the model predicts on the clean test images; 1 means
        a constant prediction, whose consistency says nothing about invariance.
    robustness
        With ``evaluate(..., robustness=True)``: the papers' protocols by name,
        ``"rotation"`` (any angle), ``"circular_shift"`` and ``"crop_shift"`` (see
        [`rotation_robustness`][groupattn.training.rotation_robustness], [`circular_shift_robustness`][groupattn.training.circular_shift_robustness] and
        [`crop_shift_robustness`][groupattn.training.crop_shift_robustness]); empty otherwise.
    """

    accuracy: float
    shifted_accuracy: float
    shift_consistency: float
    rotated_accuracy: float
    rotation_consistency: float
    accuracy_by_shift: dict[int, float] = field(default_factory=dict)
    accuracy_by_rotation: dict[int, float] = field(default_factory=dict)
    predicted_classes: int = 0
    robustness: dict[str, Robustness] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dictionary (dictionary keys become strings; ``robustness`` only if measured)."""
        data = asdict(self)
        data["accuracy_by_shift"] = {str(k): v for k, v in self.accuracy_by_shift.items()}
        data["accuracy_by_rotation"] = {str(k): v for k, v in self.accuracy_by_rotation.items()}
        if not self.robustness:
            del data["robustness"]
        return data


def evaluate(
    model: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    max_shift: int = 8,
    seed: int = 0,
    distances: Sequence[int] | None = None,
    batch_size: int = 256,
    robustness: bool = False,
    crop_shift: int = 4,
    fill: float | Sequence[float] = 0.0,
) -> Evaluation:
    """All metrics of [`Evaluation`][groupattn.training.Evaluation] for ``model`` on ``images`` ``(N, C, H, W)``.

    Quarter-turn metrics need square images; for non-square ones they are reported as
    NaN.

    Parameters
    ----------
    model
        A classifier ``(B, C, H, W) → (B, classes)``.
    images, labels
        Test images ``(N, C, H, W)`` and labels ``(N,)``.
    max_shift
        Largest offset of the random circular shifts.
    seed
        Seed of every random transformation.
    distances
        Shift distances of [`accuracy_by_shift`][groupattn.training.accuracy_by_shift] (default every 4th up to ``W / 2``).
    batch_size
        Images per forward pass.
    robustness
        Also measure the papers' protocols ([`Evaluation.robustness`][groupattn.training.Evaluation]): rotations by
        any angle, circular shifts up to ``max_shift``, and crops of the image padded by
        ``crop_shift``.
    crop_shift
        Padding of the non-circular shifts.
    fill
        Value of the pixels brought in by rotations and crops (one, or one per channel;
        [`TrainingData.fill_value`][groupattn.training.TrainingData.fill_value]).
    """
    shifted, _ = random_shifts(images, max_shift, seed)
    clean = predict(model, images, batch_size)
    moved = predict(model, shifted, batch_size)
    labels = labels.cpu()
    if distances is None:
        distances = tuple(range(0, images.shape[-1] // 2 + 1, 4))
    moving = tuple(d for d in distances if d != 0)
    by_shift = accuracy_by_shift(model, images, labels, moving, batch_size)
    if 0 in distances:  # the unshifted images: the clean predictions already computed
        by_shift = {
            d: float((clean == labels).float().mean()) if d == 0 else by_shift[d] for d in distances
        }
    if images.shape[-1] == images.shape[-2]:
        turned = [clean] + [
            predict(model, rotate_quarter_turns(images, k), batch_size) for k in (1, 2, 3)
        ]
        by_rotation = {90 * k: float((p == labels).float().mean()) for k, p in enumerate(turned)}
        rotated = sum(by_rotation.values()) / 4
        same = torch.ones_like(clean, dtype=torch.bool)
        for p in turned[1:]:
            same &= p == clean
        rot_consistency = float(same.float().mean())
    else:
        by_rotation, rotated, rot_consistency = {}, float("nan"), float("nan")
    measured: dict[str, Robustness] = {}
    if robustness:
        from ._robustness import (
            circular_shift_robustness,
            crop_shift_robustness,
            rotation_robustness,
        )

        measured = {
            "rotation": rotation_robustness(
                model, images, labels, seed=seed, fill=fill, batch_size=batch_size
            ),
            "circular_shift": circular_shift_robustness(
                model, images, labels, max_shift, seed, batch_size
            ),
            "crop_shift": crop_shift_robustness(
                model, images, labels, crop_shift, seed, fill, batch_size
            ),
        }
    return Evaluation(
        accuracy=float((clean == labels).float().mean()),
        shifted_accuracy=float((moved == labels).float().mean()),
        shift_consistency=float((clean == moved).float().mean()),
        rotated_accuracy=rotated,
        rotation_consistency=rot_consistency,
        accuracy_by_shift=by_shift,
        accuracy_by_rotation=by_rotation,
        predicted_classes=int(clean.unique().numel()),
        robustness=measured,
    )
