"""Canonicalizers: arg-max over a finite group, polyphase anchoring, un-anchoring, APS / APS-U."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from groupattn.actions import GridField, TokenField
from groupattn.canonical import (
    AdaptivePolyphaseDownsample,
    AdaptivePolyphaseUpsample,
    ArgmaxCanonicalizer,
    Canonicalized,
    PolyphaseAnchor,
    PolyphaseUnanchor,
    argmax_with_margin,
    gather_tokens,
    polyphase_anchor,
    polyphase_norms,
    polyphase_phase,
    polyphase_unanchor,
    shifted_token_index,
)
from groupattn.contracts import Status
from groupattn.groups import CyclicGroup, DihedralGroup, GroupError, TorusTranslations
from groupattn.testing import assert_equivariant, equivariance_error

NORMS = ["l2", "l1", "l4", "max"]


def _roll(x: torch.Tensor, shift: tuple[int, int]) -> torch.Tensor:
    return torch.roll(x, shifts=shift, dims=(-2, -1))


# ----------------------------------------------------------------------------- arg-max
def test_argmax_with_margin_picks_best_and_lowest_on_tie() -> None:
    scores = torch.tensor([[0.0, 3.0, 1.0], [2.0, 2.0, 1.0], [5.0, 5.0, 5.0]])
    index, margin = argmax_with_margin(scores)
    assert index.tolist() == [1, 0, 0]
    assert margin.tolist() == [2.0, 0.0, 0.0]


def test_argmax_with_margin_single_candidate_and_bad_shape() -> None:
    index, margin = argmax_with_margin(torch.tensor([[1.0], [2.0]]))
    assert index.tolist() == [0, 0] and torch.isinf(margin).all()
    with pytest.raises(GroupError, match="argmax_with_margin: expected scores of shape"):
        argmax_with_margin(torch.ones(3))


@pytest.mark.parametrize("group", [CyclicGroup(4), DihedralGroup(4)], ids=["C4", "D4"])
def test_argmax_canonicalizer_output_is_invariant_for_every_element(group) -> None:
    weights = torch.randn(1, 1, 6, 6)

    def score(x: torch.Tensor) -> torch.Tensor:
        return (x * weights).sum(dim=(1, 2, 3))

    canon = ArgmaxCanonicalizer(group, score)
    x = torch.randn(3, 1, 6, 6)
    reference = canon(x)
    assert isinstance(reference, Canonicalized) and reference.frame.shape == (3,)
    assert (reference.margin > 0).all()
    for g in group.elements():
        moved = canon(GridField().act(group, g, x))
        assert torch.equal(moved.output, reference.output), g
    contract = canon.contract(group)
    assert contract.kind == Status.CANONICALIZING
    assert canon.contract(CyclicGroup(2)).kind == Status.UNVERIFIED


def test_argmax_canonicalizer_errors() -> None:
    with pytest.raises(GroupError, match="expected a finite group"):
        ArgmaxCanonicalizer(object(), lambda x: x)  # type: ignore[arg-type]
    canon = ArgmaxCanonicalizer(CyclicGroup(4), lambda x: x.sum(dim=(1, 2)))
    with pytest.raises(
        GroupError, match="ArgmaxCanonicalizer: expected the score function to return shape"
    ):
        canon(torch.randn(2, 1, 4, 4))
    with pytest.raises(GroupError, match="ArgmaxCanonicalizer: expected an image batch"):
        canon(torch.randn(4, 4))


# ----------------------------------------------------------------------------- anchoring
@settings(max_examples=12)
@given(
    stride=st.integers(1, 4),
    cells=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    norm=st.sampled_from(NORMS),
    shift=st.tuples(st.integers(0, 11), st.integers(0, 11)),
    seed=st.integers(0, 1000),
)
def test_anchoring_moves_only_by_multiples_of_the_stride(stride, cells, norm, shift, seed) -> None:
    height, width = cells[0] * stride, cells[1] * stride
    x = torch.randn(4, 3, height, width, generator=torch.Generator().manual_seed(seed))
    shift = (shift[0] % height, shift[1] % width)
    base = polyphase_anchor(x, stride, norm)
    moved = polyphase_anchor(_roll(x, shift), stride, norm)
    # g·x anchors to the anchored x rolled by t + phase(x) − phase(g·x), a multiple of s.
    offset = torch.tensor(shift) + base.frame - moved.frame
    assert (offset % stride == 0).all()
    for b in range(x.shape[0]):
        expected = _roll(base.output[b], (int(offset[b, 0]), int(offset[b, 1])))
        assert torch.equal(moved.output[b], expected)
    assert torch.equal(polyphase_unanchor(base.output, base.frame), x)


@pytest.mark.parametrize("stride", [2, 4])
def test_anchor_module_is_canonicalizing_with_strided_output_group(stride: int) -> None:
    anchor = PolyphaseAnchor(stride, image_size=(8, 8))
    group = TorusTranslations(8, 8)
    contract = anchor.contract(group)
    assert contract.kind == Status.CANONICALIZING
    assert contract.output_group == TorusTranslations(8 // stride, 8 // stride, stride=stride)
    # Every element of the torus, compared up to the frame: exact (a pure permutation).
    assert_equivariant(anchor, torch.randn(1, 2, 8, 8), group, exact=True)
    # Shifts by multiples of s never change the phase: plain equivariance.
    subgroup = TorusTranslations(8 // stride, 8 // stride, stride=stride)
    assert anchor.contract(subgroup).kind == Status.EQUIVARIANT
    assert_equivariant(anchor, torch.randn(3, 2, 8, 8), subgroup, exact=True, up_to_frame=False)


def test_unanchoring_is_frame_restoring_around_an_equivariant_map(float_dtype) -> None:
    conv = torch.nn.Conv2d(2, 2, 3, padding=1, padding_mode="circular").to(float_dtype)
    anchor, unanchor = PolyphaseAnchor(4), PolyphaseUnanchor()
    assert unanchor.contract(TorusTranslations(8, 8)).kind == Status.FRAME_RESTORING

    def wrapped(x: torch.Tensor) -> torch.Tensor:
        anchored = anchor(x)
        return unanchor(conv(anchored.output), anchored.frame)

    x = torch.randn(3, 2, 8, 8, dtype=float_dtype)
    assert_equivariant(
        wrapped, x, TorusTranslations(8, 8), input_type=GridField(), output_type=GridField()
    )


def test_token_layout_matches_image_layout() -> None:
    x = torch.randn(3, 5, 8, 12)
    tokens = x.flatten(2).transpose(1, 2)
    for norm in NORMS:
        image = polyphase_anchor(x, 4, norm)
        token = polyphase_anchor(tokens, 4, norm, grid=(8, 12))
        assert torch.equal(image.frame, token.frame)
        assert torch.equal(image.output.flatten(2).transpose(1, 2), token.output)
        torch.testing.assert_close(
            polyphase_norms(x, 4, norm), polyphase_norms(tokens, 4, norm, (8, 12))
        )
        assert torch.equal(polyphase_unanchor(token.output, token.frame, (8, 12)), tokens)
    anchor = PolyphaseAnchor(2, grid=(8, 12))
    assert anchor.contract(TorusTranslations(8, 12)).input_type == TokenField((8, 12))
    assert_equivariant(anchor, tokens[:1], TorusTranslations(8, 12), exact=True)


def test_polyphase_norms_match_the_definition() -> None:
    x = torch.randn(2, 3, 6, 9)
    norms = polyphase_norms(x, 3, "l2")
    assert norms.dtype == torch.float64  # scores at a fixed precision, whatever the input's
    for py in range(3):
        for px in range(3):
            component = x[:, :, py::3, px::3].reshape(2, -1).double()
            torch.testing.assert_close(norms[:, py * 3 + px], component.norm(dim=1))
            torch.testing.assert_close(
                polyphase_norms(x, 3, "l1")[:, py * 3 + px], component.abs().sum(1)
            )
            torch.testing.assert_close(
                polyphase_norms(x, 3, "l4")[:, py * 3 + px], component.norm(p=4, dim=1)
            )
            assert torch.equal(
                polyphase_norms(x, 3, "max")[:, py * 3 + px], component.abs().amax(1)
            )


def test_token_index_helpers_compose_a_roll_with_a_fixed_order() -> None:
    grid = (4, 6)
    tokens = torch.randn(3, 24, 5)
    frame, margin = polyphase_phase(tokens, 2, "l2", grid)
    anchored = polyphase_anchor(tokens, 2, "l2", grid)
    assert torch.equal(frame, anchored.frame) and torch.equal(margin, anchored.margin)
    rows, cols = torch.meshgrid(torch.arange(4), torch.arange(6), indexing="ij")
    order = torch.randperm(24)  # any fixed token order
    index = shifted_token_index(
        frame[:, 0], frame[:, 1], grid, rows.reshape(-1)[order], cols.reshape(-1)[order]
    )
    assert torch.equal(gather_tokens(tokens, index), anchored.output[:, order])


# ----------------------------------------------------------------------------- ties
@pytest.mark.parametrize("norm", NORMS)
def test_ties_are_deterministic_with_zero_margin(norm: str) -> None:
    # Phases (0, 1) and (1, 0) hold the same multiset of integers (exact norms), larger
    # than the other two phases: a two-way tie that the lowest phase index k = 1 wins.
    x = torch.zeros(2, 1, 4, 4)
    values = torch.tensor([[3.0, 1.0], [2.0, 2.0]])
    x[:, 0, 0::2, 1::2] = values
    x[:, 0, 1::2, 0::2] = values.flip(0)
    x[:, 0, 0::2, 0::2] = 1.0
    first = polyphase_anchor(x, 2, norm)
    assert first.frame.tolist() == [[0, 1], [0, 1]]
    assert first.margin.tolist() == [0.0, 0.0]
    again = polyphase_anchor(x.clone(), 2, norm)
    assert torch.equal(again.output, first.output) and torch.equal(again.frame, first.frame)
    constant = polyphase_anchor(torch.ones(1, 2, 6, 6), 3, norm)
    assert constant.frame.tolist() == [[0, 0]] and constant.margin.item() == 0.0
    down = AdaptivePolyphaseDownsample(2, norm)(x)
    assert down.frame.tolist() == [[0, 1], [0, 1]] and (down.margin == 0).all()


def test_symmetric_upsampling_ties_l2_and_l1_but_not_l4() -> None:
    # A bilinear x2 zoom (symmetric kernel) of an image with a zero rim (like the bundled
    # digits) makes the stride-2 polyphase L2/L1 norms tie exactly; the L4 norm separates them.
    small = torch.nn.functional.pad(
        torch.rand(6, 1, 6, 6, dtype=torch.float64), (1, 1, 1, 1)
    )  # zero rim, as digits
    image = torch.nn.functional.pad(
        torch.nn.functional.interpolate(
            small, scale_factor=2, mode="bilinear", align_corners=False
        ),
        (8, 8, 8, 8),
    )
    for norm in ("l2", "l1"):
        scores = polyphase_norms(image, 2, norm)  # type: ignore[arg-type]
        torch.testing.assert_close(scores[:, 0], scores[:, 1], rtol=1e-12, atol=0.0)
    margin = polyphase_anchor(image, 2, "l4").margin
    assert (margin > 1e-6 * polyphase_norms(image, 2, "l4").amax(1)).all()


# ----------------------------------------------------------------------------- APS / APS-U
@pytest.mark.parametrize("stride", [2, 3])
def test_aps_downsampling_maps_translations_onto_coarse_translations(stride: int) -> None:
    size = 4 * stride
    down = AdaptivePolyphaseDownsample(stride, image_size=(size, size))
    group = TorusTranslations(size, size)
    contract = down.contract(group)
    assert contract.kind == Status.CANONICALIZING and contract.output_group == TorusTranslations(
        4, 4
    )
    x = torch.randn(3, 2, size, size)
    result = down(x)
    assert result.output.shape == (3, 2, 4, 4)
    assert torch.equal(result.output, polyphase_anchor(x, stride).output[..., ::stride, ::stride])
    report = equivariance_error(down, x[:1], group)
    assert report.max_error == 0.0 and len(report.errors) == size * size


@pytest.mark.parametrize("stride", [2, 4])
def test_aps_up_after_down_moves_exactly_with_the_input(stride: int) -> None:
    down, up = AdaptivePolyphaseDownsample(stride), AdaptivePolyphaseUpsample(stride)
    assert up.contract(TorusTranslations(2, 2)).kind == Status.FRAME_RESTORING

    def round_trip(x: torch.Tensor) -> torch.Tensor:
        result = down(x)
        return up(result.output, result.frame)

    x = torch.randn(3, 2, 8, 8)
    y = round_trip(x)
    keep = torch.zeros_like(x)
    for b, (py, px) in enumerate(down(x).frame.tolist()):
        keep[b, :, py::stride, px::stride] = 1.0
    assert torch.equal(y, x * keep)
    assert_equivariant(
        round_trip,
        x,
        TorusTranslations(8, 8),
        exact=True,
        input_type=GridField(),
        output_type=GridField(),
    )


# ----------------------------------------------------------------------------- bad input
def test_bad_input_errors() -> None:
    with pytest.raises(
        GroupError, match="polyphase_norms: expected a grid divisible by stride 3, got 32x32"
    ):
        polyphase_anchor(torch.randn(1, 1, 32, 32), 3)
    with pytest.raises(
        GroupError,
        match=r"expected an image batch \(B, C, H, W\), got a tensor of shape \(32, 32\)",
    ):
        PolyphaseAnchor(2)(torch.randn(32, 32))
    with pytest.raises(
        GroupError, match="PolyphaseAnchor: expected a stride as an int >= 1, got 0"
    ):
        PolyphaseAnchor(0)
    with pytest.raises(GroupError, match="expected norm 'l2', 'l1', 'l4' or 'max', got 'l3'"):
        PolyphaseAnchor(2, norm="l3")  # type: ignore[arg-type]
    with pytest.raises(
        GroupError, match="PolyphaseAnchor: expected a grid divisible by stride 4, got 6x8"
    ):
        PolyphaseAnchor(4, grid=(6, 8))
    with pytest.raises(GroupError, match=r"expected tokens \(B, N=64, C\) over a 8x8 grid"):
        PolyphaseAnchor(2, grid=(8, 8))(torch.randn(2, 63, 4))
    with pytest.raises(
        GroupError, match=r"polyphase_unanchor: expected an integer frame of shape \(2, 2\)"
    ):
        polyphase_unanchor(torch.randn(2, 1, 4, 4), torch.zeros(3, 2, dtype=torch.long))
    with pytest.raises(
        GroupError,
        match="AdaptivePolyphaseDownsample: expected a grid divisible by stride 2, got 5x4",
    ):
        AdaptivePolyphaseDownsample(2)(torch.randn(1, 1, 5, 4))
    with pytest.raises(GroupError, match="AdaptivePolyphaseUpsample: expected an integer frame"):
        AdaptivePolyphaseUpsample(2)(torch.randn(2, 1, 4, 4), torch.zeros(2, 2))
    assert PolyphaseAnchor(2).contract(CyclicGroup(4)).kind == Status.UNVERIFIED


def test_polyphase_anchor_refuses_other_groups_with_a_reason_that_names_what_it_expected() -> None:
    """Under a group other than torus translations the anchor promises nothing, and says
    what it expected (not a "0x0 torus" when the group carries no image size)."""
    from groupattn.canonical import PolyphaseAnchor
    from groupattn.contracts import Status
    from groupattn.groups import CyclicGroup, TorusTranslations, p4

    anchor = PolyphaseAnchor(2)
    for group in (CyclicGroup(4), p4(8)):
        contract = anchor.contract(group)
        assert contract.kind == Status.UNVERIFIED
        assert "expected translations of an image torus (TorusTranslations)" in contract.reason
        assert "0x0" not in contract.reason
    assert anchor.contract(TorusTranslations(8, 8)).kind == Status.CANONICALIZING


def test_report_scores_with_a_scale_and_exact_scores() -> None:
    """``scale``: near-ties judged against how much the scores move under rounding of the
    input, not their (cancelled) magnitude; ``exact``: only a zero margin is a tie."""
    from groupattn.canonical import record_canonicalizations, report_scores

    scores = torch.tensor([[1000.0, 996.0], [5.0, 5.0]], dtype=torch.float64)
    margin = torch.tensor([4.0, 0.0], dtype=torch.float64)
    with record_canonicalizations() as rec:
        report_scores(scores, margin, torch.float32)
        report_scores(scores, margin, torch.float32, scale=torch.tensor([1e9, 1e9]))
        report_scores(scores * 1e13, margin, torch.float64)
        report_scores(scores * 1e13, margin, torch.float64, exact=True)
    plain, scaled, rounded, exact = rec.events
    assert plain.near_tied.tolist() == [False, False] and plain.tied.tolist() == [False, True]
    assert scaled.near_tied.tolist() == [True, False]  # 4 < 4 float32 roundings of 1e9
    assert rounded.tied.tolist() == [True, True]  # 4 within 256 float64 roundings of 1e16
    assert exact.tied.tolist() == [False, True]  # integers: only 0 is a tie
