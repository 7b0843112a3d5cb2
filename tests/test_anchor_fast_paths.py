"""The anchors' fast paths compute the same numbers as the plain ones.

The centre anchor is the shift models' whole overhead, so its pieces were rewritten for
speed: the per-sample roll copies rows of overlapping windows instead of gathering
elements, the margin comes from ``torch.max`` and the best of the others instead of
``argmax`` and ``topk``, the quantization divides a narrow input by a float64 divisor
instead of copying it to float64 first, and a single deciding score is NaN-filled in
place. Each must give *the same bits* as the plain computation — the anchors' decisions,
and the records trained with them, depend on it — for every shift, dtype, tie, NaN and
infinity. And on a device without float64 the centre anchor scores on the CPU, because its
float32 blur would be flat.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from groupattn import DtypeError
from groupattn.canonical import (
    CentreAnchor,
    PatchGridAnchor,
    PolyphaseAnchor,
    argmax_with_margin,
    polyphase_anchor,
    polyphase_norms,
)
from groupattn.canonical._exact_blur import quantize_per_sample
from groupattn.canonical._patch_grid import (
    _centre_score_device,
    _centre_scores,
    _lexicographic,
)
from groupattn.canonical._polyphase import _gather_roll, _window_roll

_SPECIAL = [0.0, -0.0, 1.0, -1.0, 2.0, 0.5, float("nan"), float("inf"), float("-inf")]


def _rolled_one_by_one(
    x: torch.Tensor, shift_y: torch.Tensor, shift_x: torch.Tensor
) -> torch.Tensor:
    return torch.stack(
        [
            torch.roll(x[i], (-int(shift_y[i]), -int(shift_x[i])), dims=(1, 2))
            for i in range(x.shape[0])
        ]
    )


@settings(max_examples=60)
@given(
    batch=st.integers(1, 4),
    channels=st.integers(1, 3),
    height=st.integers(1, 9),
    width=st.integers(1, 9),
    seed=st.integers(0, 2**16),
    layout=st.sampled_from(["contiguous", "channels_last", "strided"]),
)
def test_window_roll_is_the_per_sample_roll_values_and_gradients(
    batch: int, channels: int, height: int, width: int, seed: int, layout: str
) -> None:
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(batch, channels, height, 2 * width, generator=g, dtype=torch.float64)
    x = base[..., ::2] if layout == "strided" else base[..., :width].contiguous()
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    x.requires_grad_(True)
    # shifts of any sign and size (the polyphase un-roll passes negative ones)
    shift_y = torch.randint(-3 * height, 3 * height + 1, (batch,), generator=g)
    shift_x = torch.randint(-3 * width, 3 * width + 1, (batch,), generator=g)
    out = _window_roll(x, shift_y, shift_x)
    expected = _rolled_one_by_one(x, shift_y, shift_x)
    assert torch.equal(out, expected)
    assert torch.equal(_gather_roll(x, shift_y, shift_x, None), expected)
    weights = torch.randn(out.shape, generator=g, dtype=torch.float64)
    (grad,) = torch.autograd.grad(out, x, weights)
    (grad_expected,) = torch.autograd.grad(expected, x, weights)
    assert torch.equal(grad, grad_expected)


def test_window_roll_of_an_empty_batch() -> None:
    empty = torch.zeros(0, 2, 4, 4)
    none = torch.zeros(0, dtype=torch.long)
    assert _window_roll(empty, none, none).shape == (0, 2, 4, 4)


def _argmax_and_topk(scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The plain computation: first maximum's index and top-1 minus top-2."""
    top = torch.topk(scores, 2, dim=1).values
    return torch.argmax(scores, dim=1), top[:, 0] - top[:, 1]


@settings(max_examples=200)
@given(
    rows=st.lists(
        st.lists(st.sampled_from(_SPECIAL), min_size=2, max_size=6).map(tuple),
        min_size=1,
        max_size=4,
    ).filter(lambda r: len({len(row) for row in r}) == 1)
)
def test_margin_is_top_two_difference_bit_for_bit_with_ties_nan_and_inf(
    rows: list[tuple[float, ...]],
) -> None:
    scores = torch.tensor(rows, dtype=torch.float64)
    index, margin = argmax_with_margin(scores)
    expected_index, expected_margin = _argmax_and_topk(scores)
    assert torch.equal(index, expected_index)
    # NaN == NaN here: the same bits wherever either is NaN
    assert torch.equal(margin.isnan(), expected_margin.isnan())
    assert torch.equal(margin.nan_to_num(0.5), expected_margin.nan_to_num(0.5))


def test_margin_of_wide_rows_and_low_precision_scores() -> None:
    g = torch.Generator().manual_seed(0)
    for dtype in (torch.float64, torch.float32, torch.bfloat16):
        # few distinct values: every row ties on its best but those given a single 5
        scores = torch.randint(0, 4, (64, 1024), generator=g).to(dtype)
        scores[torch.arange(0, 64, 2), torch.randint(0, 1024, (32,), generator=g)] = 5
        index, margin = argmax_with_margin(scores)
        expected_index, expected_margin = _argmax_and_topk(scores.double())
        assert torch.equal(index, expected_index)
        assert torch.equal(margin, expected_margin)
        assert (margin == 0).any() and (margin > 0).any()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_quantization_of_a_narrow_input_is_that_of_its_float64_copy(dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(1)
    x = (torch.randn(6, 2, 8, 8, generator=g) * 3).to(dtype)
    x[1] = 0.0  # all zeros: stays zeros
    x[2, 0, 1, 1] = float("nan")
    x[3, 1, 2, 2] = float("inf")
    x[4] = x[4] * 1e-3  # small values: the levels are relative to the sample's maximum
    for levels in (2.0**24, 2.0**9):
        fast = quantize_per_sample(x, levels, torch.float64)
        plain = quantize_per_sample(x.double(), levels)
        assert fast.dtype == torch.float64
        assert torch.equal(fast.nan_to_num(7.0), plain.nan_to_num(7.0))
        assert torch.equal(fast.isnan(), plain.isnan())
        assert fast[0].abs().max() == levels and torch.equal(fast[1], torch.zeros_like(fast[1]))


def test_single_score_is_nan_filled_in_place_and_out_of_place_alike() -> None:
    g = torch.Generator().manual_seed(2)
    scores = torch.rand(5, 1, 16, generator=g, dtype=torch.float64)
    scores[1, 0, 3] = float("nan")
    scores[3, 0, 0] = float("inf")
    plain = scores.clone()
    plain[1] = float("nan")  # a NaN anywhere makes the row NaN
    leaf = scores.clone().requires_grad_(True)
    out_of_place = _lexicographic(leaf)
    assert out_of_place.data_ptr() != leaf.data_ptr()  # a leaf that requires grad is not written
    assert torch.equal(out_of_place.detach().nan_to_num(9.0), plain[:, 0].nan_to_num(9.0))
    in_place = _lexicographic(scores)
    assert in_place.data_ptr() == scores.data_ptr()
    assert torch.equal(in_place.nan_to_num(9.0), plain[:, 0].nan_to_num(9.0))


def test_centre_anchor_scores_on_the_cpu_where_the_device_has_no_float64() -> None:
    assert _centre_score_device(torch.device("mps")) == torch.device("cpu")
    assert _centre_score_device(torch.device("cpu")) == torch.device("cpu")
    assert _centre_score_device(torch.device("cuda", 1)) == torch.device("cuda", 1)
    # why: in float32 the presets' blur (σ = 9.6 on 32 × 32) is flat, every phase ties
    g = torch.Generator().manual_seed(3)
    x = torch.rand(4, 1, 32, 32, generator=g)
    flat = _centre_scores(x, 9.6, 2, torch.float32)
    assert torch.equal(flat, flat[..., :1].expand_as(flat))
    exact = _centre_scores(x, 9.6, 2, torch.float64)
    _, margin = argmax_with_margin(exact[:, 0])
    assert (margin > 0).all()
    assert torch.equal(CentreAnchor(32, sigma=9.6, window=2)(x).margin, margin)


@pytest.mark.parametrize("scale", [1e-300, 1e-310, 1e-318, 1e-322])
def test_tiny_images_are_quantized_to_full_scale_and_anchored_exactly(scale: float) -> None:
    # a subnormal maximum: dividing by maximum / levels would underflow to a zero divisor
    # (found by an adversarial review: margin NaN, the lowest phase, invariance lost)
    g = torch.Generator().manual_seed(4)
    x = torch.rand(2, 1, 8, 8, generator=g, dtype=torch.float64) * scale
    q = quantize_per_sample(x, 2.0**24)
    assert torch.isfinite(q).all()
    assert torch.equal(q.abs().amax(dim=(1, 2, 3)), torch.full((2,), 2.0**24, dtype=torch.float64))
    anchor = CentreAnchor(8, sigma=2.0, window=2)
    reference = anchor(x)
    assert torch.isfinite(reference.margin).all() and (reference.margin > 0).all()
    for shift in ((1, 2), (7, 5), (4, 0)):
        moved = anchor(torch.roll(x, shift, dims=(2, 3)))
        assert torch.equal(moved.output, reference.output)
        assert torch.equal(moved.margin, reference.margin)


@pytest.mark.parametrize(
    "anchor",
    [CentreAnchor(8, sigma=2.0, window=2), PolyphaseAnchor(2), PatchGridAnchor(2, 8)],
    ids=["CentreAnchor", "PolyphaseAnchor", "PatchGridAnchor"],
)
def test_complex_inputs_are_refused_naming_the_anchor(anchor: torch.nn.Module) -> None:
    # casting to the float64 score dtype would silently drop the imaginary part
    name = type(anchor).__name__
    with pytest.raises(DtypeError, match=f"{name}: expected a real input .* got torch.complex64"):
        anchor(torch.randn(2, 1, 8, 8, dtype=torch.complex64))


@settings(max_examples=40)
@given(seed=st.integers(0, 2**16), stride=st.sampled_from([2, 4]), decades=st.integers(0, 16))
def test_polyphase_components_with_the_same_values_tie_exactly_wherever_they_sit(
    seed: int, stride: int, decades: int
) -> None:
    # two components hold the same values in a different order (found by an adversarial
    # review: raster-order float sums rounded them apart, and the winner moved with the
    # input's position); values spread over up to 16 decades
    g = torch.Generator().manual_seed(seed)
    side = 4 * stride
    count = (side // stride) ** 2
    spread = torch.logspace(-decades / 2, decades / 2, count, dtype=torch.float64)
    values = torch.randn(count, generator=g, dtype=torch.float64) * spread
    x = torch.randn(1, 1, side, side, generator=g, dtype=torch.float64) * 1e-3
    x[0, 0, 0::stride, 0::stride] = values.view(side // stride, side // stride)
    x[0, 0, 1::stride, 1::stride] = values[torch.randperm(count, generator=g)].view(
        side // stride, side // stride
    )
    for norm in ("l1", "l2", "l4"):
        reference = polyphase_anchor(x, stride, norm)
        assert reference.margin.item() == 0.0  # the two components tie, exactly
        for _ in range(4):
            shift = tuple(
                int(v) * stride for v in torch.randint(0, side // stride, (2,), generator=g)
            )
            moved = polyphase_anchor(torch.roll(x, shift, dims=(2, 3)), stride, norm)
            assert torch.equal(moved.margin, reference.margin)
            # the norms are permuted exactly: the same multiset, bit for bit
            norms = polyphase_norms(torch.roll(x, shift, dims=(2, 3)), stride, norm)
            assert torch.equal(norms.sort().values, polyphase_norms(x, stride, norm).sort().values)


def test_polyphase_norms_are_exact_sums_up_to_the_quantization() -> None:
    g = torch.Generator().manual_seed(5)
    x = torch.rand(3, 2, 8, 8, generator=g, dtype=torch.float64)
    x[2] = 0.0
    norms = polyphase_norms(x, 2, "l2")
    plain = torch.stack(
        [x[:, :, py::2, px::2].pow(2).sum(dim=(1, 2, 3)) for py in range(2) for px in range(2)], 1
    ).sqrt()
    torch.testing.assert_close(norms, plain, rtol=1e-12, atol=0.0)
    assert torch.equal(norms[2], torch.zeros(4, dtype=torch.float64))
    bad = x.clone()
    bad[0, 0, 0, 0] = float("nan")
    bad[1, 0, 0, 1] = float("inf")
    out = polyphase_norms(bad, 2, "l2")
    # a non-finite value spoils its own component only, as a plain sum does
    assert out[0].isnan().tolist() == [True, False, False, False]
    assert out[1].isinf().tolist() == [False, True, False, False]
    assert torch.equal(out[2], norms[2])
