"""The bundled digits: identical to scikit-learn's copy; canvas placement; shifted / rotated variants."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from groupattn.data import DigitsSplit, load_digits, random_shifts, rotate_quarter_turns


@pytest.fixture(scope="module")
def full_split() -> DigitsSplit:
    return load_digits(canvas=8, upscale=1, test_fraction=0.25, seed=0)


def _rows(images: torch.Tensor, labels: torch.Tensor) -> np.ndarray:
    """(pixel values in 0..16, label) per sample, sorted lexicographically."""
    data = np.concatenate([np.rint(images.reshape(len(labels), -1).numpy() * 16), labels.numpy()[:, None]], axis=1)
    return data[np.lexsort(data.T[::-1])]


def test_bundled_digits_match_scikit_learn(full_split: DigitsSplit) -> None:
    sklearn_datasets = pytest.importorskip("sklearn.datasets")
    reference = sklearn_datasets.load_digits()
    ours = _rows(
        torch.cat([full_split.train_images, full_split.test_images]),
        torch.cat([full_split.train_labels, full_split.test_labels]),
    )
    theirs = reference.data.astype(np.float64)
    theirs = np.concatenate([theirs, reference.target[:, None]], axis=1)
    theirs = theirs[np.lexsort(theirs.T[::-1])]
    assert ours.shape == theirs.shape == (1797, 65)
    np.testing.assert_array_equal(ours, theirs)


def test_split_shapes_types_and_determinism(full_split: DigitsSplit) -> None:
    n_test = round(1797 * 0.25)
    assert full_split.test_images.shape == (n_test, 1, 8, 8)
    assert full_split.train_images.shape == (1797 - n_test, 1, 8, 8)
    assert full_split.train_images.dtype == torch.float32 and full_split.train_labels.dtype == torch.int64
    assert 0.0 <= float(full_split.train_images.min()) and float(full_split.train_images.max()) <= 1.0
    assert set(full_split.train_labels.tolist()) == set(range(10))
    again = load_digits(canvas=8, upscale=1, seed=0)
    assert torch.equal(again.test_images, full_split.test_images)
    other = load_digits(canvas=8, upscale=1, seed=1)
    assert not torch.equal(other.test_labels, full_split.test_labels)
    small = load_digits(canvas=8, upscale=1, limit=40, test_fraction=0.5)
    assert small.train_images.shape[0] == small.test_images.shape[0] == 20


def test_canvas_placement_and_upscaling(full_split: DigitsSplit) -> None:
    big = load_digits(canvas=32, upscale=2, seed=0)
    assert big.train_images.shape[1:] == (1, 32, 32)
    glyph = big.test_images[:, :, 8:24, 8:24]
    # everything outside the centred 16x16 glyph is zero
    outside = big.test_images.clone()
    outside[:, :, 8:24, 8:24] = 0
    assert float(outside.abs().max()) == 0.0
    # the glyph is the bilinear x2 magnification of the original 8x8 digit (same shuffle)
    original = full_split.test_images
    expected = F.interpolate(original, scale_factor=2, mode="bilinear", align_corners=False).clamp(0.0, 1.0)
    assert torch.allclose(glyph, expected, rtol=0, atol=1e-6)
    # bilinear, not nearest: no image is made of duplicated 2x2 blocks
    assert not torch.equal(glyph[:, :, ::2, ::2], glyph[:, :, 1::2, 1::2])
    odd = load_digits(canvas=19, upscale=1, seed=0, limit=10)
    assert odd.train_images.shape[-2:] == (19, 19)
    assert torch.equal(odd.test_images[:, :, 5:13, 5:13], full_split.test_images[: odd.test_images.shape[0]])


def test_bad_arguments_raise() -> None:
    with pytest.raises(ValueError, match=r"load_digits: expected canvas >= 8\*upscale = 16, got 12"):
        load_digits(canvas=12, upscale=2)
    with pytest.raises(ValueError, match=r"expected 0 < test_fraction < 1, got 1\.0"):
        load_digits(test_fraction=1.0)


def test_random_shifts_roll_each_image_by_its_offset() -> None:
    images = torch.randn(6, 2, 7, 7)
    shifted, offsets = random_shifts(images, max_shift=3, seed=5)
    assert shifted.shape == images.shape and offsets.shape == (6, 2)
    assert int(offsets.abs().max()) <= 3
    for img, out, (dy, dx) in zip(images, shifted, offsets.tolist()):
        assert torch.equal(out, torch.roll(img, shifts=(dy, dx), dims=(-2, -1)))
    again, offsets_again = random_shifts(images, max_shift=3, seed=5)
    assert torch.equal(again, shifted) and torch.equal(offsets_again, offsets)
    _, other = random_shifts(images, max_shift=3, seed=6)
    assert not torch.equal(other, offsets)


def test_rotate_quarter_turns() -> None:
    images = torch.randn(3, 1, 5, 5)
    assert torch.equal(rotate_quarter_turns(images, 1), torch.rot90(images, 1, dims=(-2, -1)))
    assert torch.equal(rotate_quarter_turns(images, 4), images)
    assert torch.equal(rotate_quarter_turns(rotate_quarter_turns(images, 1), 3), images)
    assert not torch.equal(rotate_quarter_turns(images, 2), images)
