"""The papers' protocols: accuracy and consistency under rotations by any angle, circular
shifts and non-circular shifts (random crops of a padded image), on known models."""

from __future__ import annotations

import json
import math

import pytest
import torch
from torch import nn

from groupattn.data import disc_mask, rotate, translate
from groupattn.training import (
    Robustness,
    TrainingData,
    accuracy_by_angle,
    circular_shift_robustness,
    crop_shift_robustness,
    evaluate,
    load_training_data,
    rotation_robustness,
)


class GlobalMean(nn.Module):
    """Mean of the pixels of each channel → linear: invariant to every permutation of the pixels."""

    def __init__(self, channels: int = 1, classes: int = 10) -> None:
        super().__init__()
        self.head = nn.Linear(channels, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(x.mean(dim=(-2, -1)))


class RadialProfile(nn.Module):
    """Mean intensity on rings around the centre (triangular radial bins) → linear.

    Invariant to rotations about the centre up to interpolation; exactly to quarter turns.
    """

    def __init__(self, side: int = 32, rings: int = 12, classes: int = 10) -> None:
        super().__init__()
        c = (side - 1) / 2
        rows, cols = torch.meshgrid(torch.arange(side) - c, torch.arange(side) - c, indexing="ij")
        radius = (rows**2 + cols**2).sqrt()
        centres = torch.linspace(0, c, rings)
        step = float(centres[1] - centres[0])
        weights = torch.relu(1 - (radius[None] - centres[:, None, None]).abs() / step) * disc_mask(
            side, side
        )
        self.register_buffer("weights", weights / weights.sum(dim=(-2, -1), keepdim=True))
        self.head = nn.Linear(rings, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.einsum("bchw,khw->bk", x, self.weights))


class Flatten(nn.Module):
    """A linear layer on the flattened image: sees absolute positions."""

    def __init__(self, side: int = 32, classes: int = 10) -> None:
        super().__init__()
        self.head = nn.Linear(side * side, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(x.flatten(1))


@pytest.fixture(scope="module")
def digits() -> TrainingData:
    return load_training_data(
        "digits", limit=600
    )  # 200 test digits, 16 × 16 glyphs on a 32 × 32 canvas


def _models() -> tuple[nn.Module, nn.Module, nn.Module]:
    torch.manual_seed(0)
    return GlobalMean(), RadialProfile(), Flatten()


def test_circular_shifts_separate_invariant_and_position_dependent_models(
    digits: TrainingData,
) -> None:
    mean, _, flat = _models()
    x, y = digits.test_images, digits.test_labels
    invariant = circular_shift_robustness(mean, x, y, seed=0)
    assert isinstance(invariant, Robustness) and invariant.transform == "circular_shift"
    assert invariant.consistency == 1.0 and invariant.num_images == 200
    assert invariant.settings["max_shift"] is None
    broken = circular_shift_robustness(flat, x, y, seed=0)
    assert broken.consistency < 0.6
    assert (
        circular_shift_robustness(flat, x, y, max_shift=1, seed=0).consistency > broken.consistency
    )


def test_crop_shifts_lose_content_at_the_border(digits: TrainingData) -> None:
    mean, _, flat = _models()
    x, y = digits.test_images, digits.test_labels
    # the digits have an 8-pixel black margin: crops of ±4 px lose nothing, so the mean is unchanged
    inside = crop_shift_robustness(mean, x, y, max_shift=4, seed=0)
    assert inside.consistency == 1.0 and inside.transform == "crop_shift"
    assert crop_shift_robustness(flat, x, y, max_shift=4, seed=0).consistency < 0.8
    # content that crosses the border is lost (not wrapped): the permutation-invariant mean changes
    threshold = GlobalMean(classes=2)  # class 1 iff the mean brightness exceeds 1.2
    with torch.no_grad():
        threshold.head.weight.copy_(torch.tensor([[0.0], [1.0]]))
        threshold.head.bias.copy_(torch.tensor([0.0, -1.2]))
    noise = torch.rand(200, 1, 32, 32) + 1.0  # mean 1.5, no black margin
    circular = circular_shift_robustness(threshold, noise, y, max_shift=12, seed=0)
    cropped = crop_shift_robustness(threshold, noise, y, max_shift=12, seed=0)
    assert circular.consistency == 1.0 and cropped.consistency < 0.9


def test_rotations_by_any_angle(digits: TrainingData) -> None:
    _, radial, flat = _models()
    x, y = digits.test_images, digits.test_labels
    invariant = rotation_robustness(radial, x, y, seed=0)
    assert invariant.transform == "rotation" and invariant.settings["mask"] == "disc"
    assert invariant.consistency >= 0.95
    assert rotation_robustness(flat, x, y, seed=0).consistency < 0.5
    by_angle = accuracy_by_angle(radial, x, y, degrees=(0, 90, 180, 270))
    assert len(set(by_angle.values())) == 1  # exact at quarter turns
    curve = accuracy_by_angle(flat, x, y, degrees=(0, 45))
    assert list(curve) == [0, 45]


def test_accuracy_and_consistency_are_the_documented_pair_statistics(digits: TrainingData) -> None:
    """Re-derive the numbers: two seeded angles per image; accuracy over both copies;
    consistency = same class for both. The batch size changes nothing."""
    _, _, flat = _models()
    x, y = digits.test_images[:50], digits.test_labels[:50]
    gen = torch.Generator().manual_seed(7)
    angles = torch.rand(2, 50, generator=gen, dtype=torch.float64) * (2 * math.pi)
    with torch.no_grad():
        a = flat(rotate(x, angles[0])).argmax(-1)
        b = flat(rotate(x, angles[1])).argmax(-1)
    report = rotation_robustness(flat, x, y, seed=7, batch_size=16)
    assert report.accuracy == pytest.approx(float(((a == y).sum() + (b == y).sum()) / 100))
    assert report.consistency == pytest.approx(float((a == b).float().mean()))
    assert rotation_robustness(flat, x, y, seed=7, batch_size=50) == report
    assert rotation_robustness(flat, x, y, seed=8) != report

    gen = torch.Generator().manual_seed(3)
    offsets = torch.randint(-2, 3, (2, 50, 2), generator=gen)
    with torch.no_grad():
        a = flat(translate(x, offsets[0])).argmax(-1)
        b = flat(translate(x, offsets[1])).argmax(-1)
    crops = crop_shift_robustness(flat, x, y, max_shift=2, seed=3, batch_size=7)
    assert crops.consistency == pytest.approx(float((a == b).float().mean()))


def test_evaluate_reports_the_protocols_on_request(digits: TrainingData) -> None:
    mean, _, _ = _models()
    x, y = digits.test_images[:40], digits.test_labels[:40]
    plain = evaluate(mean, x, y, distances=(0,))
    assert plain.robustness == {} and "robustness" not in plain.as_dict()
    full = evaluate(mean, x, y, distances=(0,), robustness=True, crop_shift=3, fill=0.0)
    assert set(full.robustness) == {"rotation", "circular_shift", "crop_shift"}
    assert full.robustness["circular_shift"].consistency == 1.0
    assert full.robustness["crop_shift"].settings["max_shift"] == 3
    as_json = json.loads(json.dumps(full.as_dict()))
    assert as_json["robustness"]["rotation"]["transform"] == "rotation"


def test_rgb_fill_and_bad_input() -> None:
    torch.manual_seed(0)
    model = GlobalMean(channels=3)
    x = torch.rand(8, 3, 16, 16)
    y = torch.zeros(8, dtype=torch.long)
    report = rotation_robustness(model, x, y, fill=(0.1, 0.2, 0.3))
    assert report.settings["fill"] == [0.1, 0.2, 0.3]
    with pytest.raises(
        ValueError, match=r"rotation_robustness: expected labels of shape \(8,\), got \(7,\)"
    ):
        rotation_robustness(model, x, y[:7])
    with pytest.raises(ValueError, match="crop_shift_robustness: expected max_shift >= 0, got -1"):
        crop_shift_robustness(model, x, y, max_shift=-1)
