"""The exact circular blurs of the anchors: integer images times integer circulant matrices.

The centre anchor's and the smoothed input anchor's blurs are matrix products, which add
their terms in an order tied to absolute positions; they move with the image bit for bit
only because every number is an integer below 2**52. Evidence: the weights are the folded
filter (symmetric exactly), the quantization is per sample and leaves other samples
alone, the patch embedding's blur is the rolled-copies blur up to the quantization and
moves with every circular shift of a rectangular torus exactly, and a blur with the
sums in float (the old arithmetic, in a shifted order) would not.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from groupattn.canonical._exact_blur import (
    circulant_matrix,
    integer_circulant_row,
    quantize_per_sample,
    significand_bits,
)
from groupattn.nn import PatchEmbedding
from groupattn.nn._patch import _blur_operators, _exact_blur, _gaussian_taps


def _gaussian(sigma: float, radius: int) -> list[tuple[int, float]]:
    return [(k, math.exp(-k * k / (2 * sigma * sigma))) for k in range(-radius, radius + 1)]


@settings(max_examples=40)
@given(
    sigma=st.floats(0.1, 50.0),
    size=st.integers(1, 40),
    budget=st.sampled_from([5, 13]),
)
def test_weights_are_the_folded_filter_symmetric_exactly(
    sigma: float, size: int, budget: int
) -> None:
    radius = max(1, math.ceil(3 * sigma))
    taps = _gaussian(sigma, radius)
    row = integer_circulant_row(taps, size, budget)
    assert len(row) == size and all(isinstance(c, int) and c >= 0 for c in row)
    assert all(row[j] == row[(size - j) % size] for j in range(size))  # symmetric, exactly
    total = sum(row)
    assert abs(total - 2**budget) <= size  # rounding: at most 1/2 per weight
    folded = [0.0] * size
    for k, w in taps:
        folded[k % size] += w
    scale = 2**budget / sum(folded)
    assert max(abs(c - f * scale) for c, f in zip(row, folded, strict=True)) <= 0.5 + 1e-9


def test_asymmetric_taps_are_folded_as_given() -> None:
    row = integer_circulant_row([(0, 1.0), (1, 3.0)], 4, 2)
    assert row == [1, 3, 0, 0]
    k = circulant_matrix(row)
    x = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64)
    # out[i] = Σ_j c_{(i−j) mod n} x[j] = x[i] + 3 x[i−1]: the filter Σ_k w_k roll(x, k)
    assert torch.equal(k @ x, x + 3 * torch.roll(x, 1))


def test_quantization_is_per_sample_and_keeps_non_finite_samples_apart() -> None:
    x = torch.tensor([[1.0, -0.5, 0.25], [0.0, 0.0, 0.0], [float("nan"), 1.0, 2.0]])
    q = quantize_per_sample(x.double(), 2.0**24)
    assert q[0].tolist() == [2.0**24, -(2.0**23), 2.0**22]
    assert q[1].tolist() == [0.0, 0.0, 0.0]
    assert q[2].isnan().any()
    assert significand_bits(torch.float64) == 53 and significand_bits(torch.float32) == 24


@pytest.mark.parametrize(("height", "width", "sigma"), [(8, 12, 1.5), (32, 32, 8.0), (6, 10, 4.0)])
def test_patch_embedding_blur_is_exact_and_close_to_the_rolled_blur(
    height: int, width: int, sigma: float
) -> None:
    torch.manual_seed(0)
    taps = (_gaussian_taps(sigma, height), _gaussian_taps(sigma, width))
    energy = torch.rand(3, 1, height, width, dtype=torch.float64) ** 2
    out = _exact_blur(energy, taps)
    assert torch.equal(out, out.round()) and float(out.abs().max()) < 2.0**52
    # the rolled-copies blur, for reference (float weights)
    ref = torch.zeros_like(energy)
    for dy, wy in taps[0]:
        for dx, wx in taps[1]:
            ref = ref + wy * wx * torch.roll(energy, (dy, dx), (2, 3))
    scaled = out / out.amax(dim=(1, 2, 3), keepdim=True) * ref.amax(dim=(1, 2, 3), keepdim=True)
    assert float((scaled - ref).abs().max() / ref.abs().max()) < 2e-3
    # every circular shift of the rectangular torus, bit for bit
    for dy in range(height):
        for dx in range(width):
            moved = _exact_blur(torch.roll(energy, (dy, dx), (2, 3)), taps)
            assert torch.equal(moved, torch.roll(out, (dy, dx), (2, 3))), (dy, dx)
    # a float (non-integer) product in the same matrix order is not exact: the quantization matters
    left, right, _ = _blur_operators(taps, (height, width), 53)
    float_blur = left @ energy @ right
    differs = any(
        not torch.equal(
            left @ torch.roll(energy, (dy, dx), (2, 3)) @ right,
            torch.roll(float_blur, (dy, dx), (2, 3)),
        )
        for dy in range(height)
        for dx in range(width)
    )
    assert differs


def test_smoothed_anchor_is_exact_in_every_input_dtype() -> None:
    embed = PatchEmbedding(1, 8, 2, (16, 16), anchor_stride=8, anchor_sigma=4.0)
    torch.manual_seed(1)
    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.float64):
        x = torch.rand(4, 1, 16, 16).to(dtype)
        score = embed.anchor_score(x.double())
        for shift in ((1, 0), (3, 5), (15, 15)):
            moved = embed.anchor_score(torch.roll(x, shift, (2, 3)).double())
            assert torch.equal(moved, torch.roll(score, shift, (2, 3))), (dtype, shift)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"anchor_sigma": float("inf")}, "expected anchor_sigma as a finite number >= 0"),
        ({"anchor_sigma": float("nan")}, "expected anchor_sigma as a finite number >= 0"),
        ({"anchor_sigma": -1.0}, "expected anchor_sigma as a finite number >= 0"),
        ({"anchor_sigma": 2.0, "anchor_scale": float("nan")}, "expected anchor_scale"),
        ({"anchor_sigma": 2.0, "anchor_scale": -1.0}, "expected anchor_scale"),
        ({"anchor_sigma": 2.0, "anchor_scale": 1e300}, "expected anchor_scale"),
    ],
)
def test_bad_smoothing_arguments_raise_clear_errors(kwargs: dict, match: str) -> None:
    from groupattn import ConfigurationError

    with pytest.raises(ConfigurationError, match=f"PatchEmbedding: {match}"):
        PatchEmbedding(1, 8, 2, (16, 16), anchor_stride=8, **kwargs)


def test_checker_follows_the_exact_blur_operator_by_operator() -> None:
    """No trust needed: the checker proves the smoothed anchor's score equivariant from its
    operators (a per-sample quantization, products with constant circulant matrices), and
    refuses the same network with a matrix that is not circulant."""
    from groupattn.check import certify
    from groupattn.check._export import is_trusted_leaf
    from groupattn.contracts import Status
    from groupattn.groups import TorusTranslations

    class Pooled(torch.nn.Module):
        def __init__(self, embed: PatchEmbedding) -> None:
            super().__init__()
            self.embed = embed

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.embed(x).mean(dim=1)  # tokens (B, N, dim) → (B, dim)

    smoothed = PatchEmbedding(1, 8, 2, (16, 16), anchor_stride=8, anchor_sigma=4.0)
    assert not is_trusted_leaf(smoothed, False)
    x = torch.randn(2, 1, 16, 16)
    cert = certify(Pooled(smoothed), x, TorusTranslations(16, 16), verify=True)
    assert cert.verdict == Status.INVARIANT and not cert.unverified, cert.to_text()

    class Skewed(torch.nn.Module):  # the same steps with a blur that is not circulant
        def __init__(self) -> None:
            super().__init__()
            self.embed = smoothed
            self.register_buffer(
                "skew",
                torch.eye(16, dtype=torch.float64).roll(1, 0) * 2
                + torch.eye(16, dtype=torch.float64).tril(),
            )

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            wide = x.double()
            score = self.skew @ (wide * wide) @ self.skew
            anchored = self.embed.anchor(torch.cat([wide, score], dim=1)).output
            return self.embed.conv(anchored[:, :1].float()).mean(dim=(2, 3))

    cert = certify(Skewed(), x, TorusTranslations(16, 16), verify=True)
    assert cert.verdict != Status.INVARIANT, cert.to_text()


@pytest.mark.parametrize("sigma", [1e-200, 5e-324, 1e-3, 1e6, 1e308])
def test_extreme_sigmas_blur_without_errors(sigma: float) -> None:
    """Any finite σ > 0 builds its weights (a tiny σ is the identity, a huge one flat)."""
    from groupattn.canonical import centre_anchor

    x = torch.rand(2, 1, 8, 8)
    out = centre_anchor(x, sigma=sigma, window=4)
    assert out.output.shape == x.shape
    embed = PatchEmbedding(1, 4, 4, (16, 16), anchor_stride=16, anchor_sigma=sigma)
    assert embed(torch.rand(2, 1, 16, 16)).shape == (2, 16, 4)


def test_quantization_ties_are_reported() -> None:
    """The two ties the integer blur adds (an outlier 2**26 times brighter than the rest;
    a blur far wider than the image) are reported, so the checker's verification sets the
    samples aside instead of certifying a wrong frame."""
    from groupattn.canonical import centre_anchor, record_canonicalizations

    torch.manual_seed(0)
    outlier = torch.rand(1, 1, 8, 8, dtype=torch.float64) + 0.5
    outlier[0, 0, 3, 3] = 2.0**26
    wide = torch.rand(1, 1, 32, 32, dtype=torch.float64)
    for x, sigma, window in ((outlier, 1.0, 4), (wide, 50.0, 8)):
        with record_canonicalizations() as rec:
            out = centre_anchor(x, sigma=sigma, window=window)
        assert float(out.margin[0]) == 0.0 and rec.events[0].num_tied == 1


def test_centre_anchor_window_and_channels_are_checked() -> None:
    from groupattn import ConfigurationError
    from groupattn.canonical import CentreAnchor, centre_anchor
    from groupattn.groups import GroupError

    with pytest.raises(ConfigurationError, match="CentreAnchor: expected window <= 32"):
        CentreAnchor(128, window=34)
    with pytest.raises(
        GroupError, match="centre_anchor: expected images with at least one channel"
    ):
        centre_anchor(torch.rand(2, 0, 8, 8), window=4)
