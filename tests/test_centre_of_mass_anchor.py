"""CentreOfMassAnchor: the whole translation anchored by the centre of mass, exactly.

Evidence: the scores are the circular second moments of the quantized mass profiles
(checked against a direct sum), they move bit for bit under every translation (and, on
an odd side, every element of p4m), the anchor is canonicalizing with error exactly 0 for
every element of small groups, a glyph's centre of mass lands on the centre pixel and an
already centred digit is not moved, ties and non-finite pixels are reported and spoil only
their own sample, every dtype keeps its data path, the declared contract is sound (even
sides promise nothing under turns, and the checker refuses a p4 certificate there), and
bad inputs raise errors that name the anchor.
"""

from __future__ import annotations

import pytest
import torch
from anchored_helpers import centre_of_mass as _centre_of_mass
from anchored_helpers import glyph as _glyph
from hypothesis import given, settings
from hypothesis import strategies as st

from groupattn import ConfigurationError, DtypeError
from groupattn.actions import GridField
from groupattn.canonical import (
    CentreOfMassAnchor,
    StridedRotoTranslationGroup,
    centre_of_mass_anchor,
    centre_of_mass_scores,
    record_canonicalizations,
)
from groupattn.canonical._exact_blur import quantize_per_sample
from groupattn.canonical._mass_centre import _moment_matrix
from groupattn.check import certify
from groupattn.contracts import Status
from groupattn.groups import (
    CyclicGroup,
    DihedralGroup,
    GroupError,
    RotoTranslationGroup,
    TorusTranslations,
    p4,
    p4m,
)
from groupattn.testing import equivariance_error


def _reference_scores(x: torch.Tensor) -> torch.Tensor:
    """``−Σ_n m_n d(n, p)²`` by a plain double loop over the quantized image."""
    b, c, s, _ = x.shape
    _, levels = _moment_matrix(s, c)
    q = quantize_per_sample(x.to(torch.float64), levels)
    rows, cols = q.sum(dim=(1, 3)), q.sum(dim=(1, 2))
    out = torch.zeros(b, 2, s, dtype=torch.float64)
    for p in range(s):
        for n in range(s):
            d = min((n - p) % s, (p - n) % s)
            out[:, 0, p] -= rows[:, n] * d * d
            out[:, 1, p] -= cols[:, n] * d * d
    return out


# ---------------------------------------------------------------- the scores


@pytest.mark.parametrize("side", [1, 2, 5, 6, 9])
def test_scores_are_the_circular_second_moments(side: int) -> None:
    x = torch.randn(3, 2, side, side, generator=torch.Generator().manual_seed(side))
    scores = centre_of_mass_scores(x)
    assert scores.shape == (3, 2, side) and scores.dtype == torch.float64
    assert torch.equal(scores, _reference_scores(x))
    assert torch.equal(scores, scores.round())  # integers


@settings(max_examples=25)
@given(
    side=st.integers(1, 9),
    channels=st.integers(1, 3),
    seed=st.integers(0, 2**16),
    dtype=st.sampled_from([torch.float64, torch.float32, torch.bfloat16, torch.float16]),
)
def test_scores_move_bit_for_bit_under_every_translation(
    side: int, channels: int, seed: int, dtype: torch.dtype
) -> None:
    x = torch.randn(2, channels, side, side, generator=torch.Generator().manual_seed(seed))
    x = (x * 10.0 ** torch.randint(-6, 6, (2, 1, 1, 1))).to(dtype)  # values across decades
    scores = centre_of_mass_scores(x)
    for dy in range(side):
        for dx in range(side):
            moved = centre_of_mass_scores(torch.roll(x, (dy, dx), (2, 3)))
            expected = torch.stack(
                [torch.roll(scores[:, 0], dy, 1), torch.roll(scores[:, 1], dx, 1)], dim=1
            )
            torch.testing.assert_close(moved, expected, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("side", [5, 6])
def test_scores_are_permuted_exactly_by_every_element_of_p4m(side: int) -> None:
    """A turn swaps the profiles (one reversed) and a reflection reverses one: the scores
    permute exactly (on any side; only the anchor's target needs an odd one)."""
    x = torch.rand(2, 2, side, side, dtype=torch.float64)
    scores = centre_of_mass_scores(x)
    group = p4m(side)
    for g in group.elements():
        moved = GridField().act(group, g, x)
        got = centre_of_mass_scores(moved)
        # the scores of the moved image are a permutation of the original ones, bit for bit
        assert torch.equal(got.flatten(1).sort(dim=1).values, scores.flatten(1).sort(dim=1).values)


# ---------------------------------------------------------------- the anchor


@pytest.mark.parametrize("dihedral", [False, True])
def test_canonicalizing_under_every_element_of_p4m_on_an_odd_side(dihedral: bool) -> None:
    """Every one of the 100 (200) elements of p4 (p4m) on the 5x5 torus: error exactly 0."""
    torch.manual_seed(0)
    x = torch.randn(3, 2, 5, 5, dtype=torch.float64)
    group = p4m(5) if dihedral else p4(5)
    anchor = CentreOfMassAnchor(5)
    report = equivariance_error(anchor, x, group, elements=list(group.elements()))
    assert report.max_error == 0.0
    assert anchor.contract(group).output_group == StridedRotoTranslationGroup(
        group.point_group, 5, 5
    )


@pytest.mark.parametrize("side", [6, 7])
def test_output_is_invariant_under_every_translation(side: int) -> None:
    torch.manual_seed(1)
    x = torch.randn(4, 3, side, side)
    anchor = CentreOfMassAnchor(side)
    out = anchor(x)
    for dy in range(side):
        for dx in range(side):
            moved = anchor(torch.roll(x, (dy, dx), (2, 3)))
            assert torch.equal(moved.output, out.output), (dy, dx)
            assert torch.equal(
                moved.frame, torch.remainder(out.frame + torch.tensor([dy, dx]), side)
            )
    report = equivariance_error(anchor, x, TorusTranslations(side, side))
    assert report.max_error == 0.0


@settings(max_examples=10)
@given(seed=st.integers(0, 2**16), k=st.integers(0, 3), flip=st.booleans())
def test_turned_and_reflected_digits_on_a_31_canvas(seed: int, k: int, flip: bool) -> None:
    """MNIST-sized glyphs on the odd 31x31 torus, moved by any element of p4m: the
    anchored image is the anchored original turned (reflected) about the centre pixel."""
    from groupattn.data import load_digits

    digits = load_digits().test_images[seed % 64 : seed % 64 + 2, :, :31, :31].to(torch.float64)
    ref = centre_of_mass_anchor(digits).output
    gen = torch.Generator().manual_seed(seed)
    dy, dx = (int(v) for v in torch.randint(0, 31, (2,), generator=gen))
    moved = torch.rot90(torch.roll(digits, (dy, dx), (2, 3)), k, (2, 3))
    expected = torch.rot90(ref, k, (2, 3))
    if flip:
        moved, expected = moved.flip(3), expected.flip(3)
    assert torch.equal(centre_of_mass_anchor(moved).output, expected)


@pytest.mark.parametrize(("side", "top", "left"), [(31, 2, 20), (32, 25, 3), (9, 0, 4)])
def test_a_glyph_is_rolled_to_its_centre_of_mass_rounded_onto_the_centre_pixel(
    side: int, top: int, left: int
) -> None:
    for seed in range(5):
        x = _glyph(side, top, left, seed)
        cy, cx = _centre_of_mass(x)
        out = CentreOfMassAnchor(side)(x)
        a, b = out.frame[0].tolist()
        assert (a, b) == ((round(cy) - side // 2) % side, (round(cx) - side // 2) % side)
        oy, ox = _centre_of_mass(out.output)
        assert abs(oy - side // 2) <= 0.5 and abs(ox - side // 2) <= 0.5


def test_digits_centred_by_their_centre_of_mass_are_not_moved() -> None:
    """MNIST centres each digit by its centre of mass on a pixel: such a digit is not moved
    (the blurred maximum moves it by half a pixel on average, onto a pixel corner). The
    bundled digits are not centred that way; rolled so that their rounded centre of mass
    is pixel 16 of 32, none of 200 moves, and unrolled each comes back to the same image
    with its centre of mass within half a pixel of the centre."""
    from groupattn.data import load_digits

    x = load_digits().test_images[:200].to(torch.float64)
    centred = []
    for image in x:
        cy, cx = _centre_of_mass(image[None])
        centred.append(torch.roll(image, (16 - round(cy), 16 - round(cx)), (1, 2)))
    out = centre_of_mass_anchor(torch.stack(centred))
    assert int(out.frame.abs().max()) == 0 and torch.equal(out.output, torch.stack(centred))
    assert float(out.margin.min()) > 0  # no tie
    raw = centre_of_mass_anchor(x)
    assert torch.equal(raw.output, out.output)
    for image in raw.output[:20]:
        cy, cx = _centre_of_mass(image[None])
        assert abs(cy - 16) <= 0.5 and abs(cx - 16) <= 0.5


def test_functional_module_and_dtypes_agree() -> None:
    x = torch.rand(3, 2, 8, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    ref = centre_of_mass_anchor(x)
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        cast = x.to(dtype)
        out = CentreOfMassAnchor(8)(cast)
        assert out.output.dtype == dtype and out.margin.dtype == torch.float64
        assert out.frame.dtype == torch.long
        a, b = out.frame[0].tolist()
        assert torch.equal(out.output[:1], torch.roll(cast[:1], (-a, -b), (2, 3)))
        # decided on the exactly cast-up values: a moved copy gives the same image
        moved = CentreOfMassAnchor(8)(torch.roll(cast, (3, 5), (2, 3)))
        assert torch.equal(moved.output, out.output)
    assert ref.frame.shape == (3, 2) and ref.margin.shape == (3,)


def test_an_empty_batch_and_gradients() -> None:
    empty = centre_of_mass_anchor(torch.zeros(0, 1, 6, 6))
    assert empty.output.shape == (0, 1, 6, 6) and empty.frame.shape == (0, 2)
    x = torch.rand(2, 1, 6, 6, requires_grad=True)
    out = centre_of_mass_anchor(x)
    out.output.square().sum().backward()
    assert x.grad is not None
    assert torch.allclose(x.grad, 2 * x.detach())  # a roll: the gradient rolls back


# ---------------------------------------------------------------- ties and non-finite pixels


def test_ties_are_reported_with_margin_zero() -> None:
    constant = torch.full((1, 1, 7, 7), 0.5)
    pair = torch.zeros(1, 1, 8, 8)
    pair[0, 0, 3, 2] = pair[0, 0, 3, 5] = 1.0  # centre of mass between columns 3 and 4
    for x in (constant, pair):
        with record_canonicalizations() as rec:
            out = centre_of_mass_anchor(x)
        assert float(out.margin[0]) == 0.0
        assert sum(e.num_tied for e in rec.events) >= 1


def test_a_non_finite_pixel_spoils_only_its_sample() -> None:
    x = torch.rand(3, 1, 7, 7, generator=torch.Generator().manual_seed(5))
    clean = centre_of_mass_anchor(x)
    x[1, 0, 2, 2] = float("nan")
    with record_canonicalizations() as rec:
        out = centre_of_mass_anchor(x)
    assert sum(e.num_non_finite for e in rec.events) >= 1
    assert bool(out.margin[1].isnan())
    for i in (0, 2):
        assert torch.equal(out.output[i], clean.output[i]) and torch.equal(
            out.frame[i], clean.frame[i]
        )


# ---------------------------------------------------------------- the contract and the checker


def test_contract_kinds() -> None:
    odd, even = CentreOfMassAnchor(7), CentreOfMassAnchor(8)
    for anchor, side in ((odd, 7), (even, 8)):
        c = anchor.contract(TorusTranslations(side, side))
        assert c.kind == Status.CANONICALIZING
        assert c.output_group == TorusTranslations(1, 1, stride=side)
        assert anchor.contract(TorusTranslations(side + 1, side + 1)).kind == Status.UNVERIFIED
        assert anchor.contract(TorusTranslations(side, side, stride=2)).kind == Status.UNVERIFIED
    for group in (p4(7), p4m(7), CyclicGroup(4), DihedralGroup(4)):
        assert odd.contract(group).kind == Status.CANONICALIZING, group.name
    for group in (p4(8), p4m(8), CyclicGroup(4), DihedralGroup(4)):
        contract = even.contract(group)  # turned and shifted: the whole p4 / p4m
        assert contract.kind == Status.CANONICALIZING, group.name
        point = getattr(group, "point_group", group)
        assert contract.output_group == RotoTranslationGroup(point, 8), group.name
    assert odd.contract(p4(9)).kind == Status.UNVERIFIED
    assert odd.contract(CyclicGroup(8)).kind == Status.UNVERIFIED  # not a grid symmetry


def test_an_even_side_leaves_a_shift_after_a_turn() -> None:
    """On 8x8 the output of a turned (reflected) glyph is the turned output *shifted*: the
    anchor is canonicalizing with the whole p4m as output group (error exactly 0 up to it,
    for all 512 elements), but not with the turns alone (the centre pixel is not their
    centre)."""
    x = torch.cat([_glyph(8, 1, 2, seed=3), _glyph(8, 3, 0, seed=4)])
    anchor = CentreOfMassAnchor(8)
    turned = anchor(torch.rot90(x, 1, (2, 3))).output
    assert not torch.equal(turned, torch.rot90(anchor(x).output, 1, (2, 3)))
    group = p4m(8)
    report = equivariance_error(anchor, x, group, elements=list(group.elements()))
    assert report.max_error == 0.0


class _Pool(torch.nn.Module):
    """The p4-invariant sum of an image (declared: a plain sum over pixels and channels)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum(dim=(1, 2, 3))


class _AnchoredSum(torch.nn.Module):
    def __init__(self, side: int) -> None:
        super().__init__()
        self.anchor = CentreOfMassAnchor(side)
        self.pool = _Pool()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(self.anchor(x).output * torch.arange(x.shape[-1], dtype=x.dtype))


@pytest.mark.parametrize("side", [7, 8])
def test_the_checker_certifies_translations_and_refuses_turns_on_an_even_side(side: int) -> None:
    """A position-weighted sum after the anchor: invariant to every translation (the anchor
    fixes them), to turns only through a body that is invariant to them — which this one
    is not (on an odd side the turns about the centre pixel; on an even side turns and
    shifts), so no side certifies p4."""
    model = _AnchoredSum(side)
    x = torch.rand(2, 1, side, side)
    assert certify(model, x, "translations").verdict == Status.INVARIANT
    assert certify(model, x, p4(side)).verdict != Status.INVARIANT


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (
            lambda: CentreOfMassAnchor(0),
            ConfigurationError,
            "CentreOfMassAnchor: expected an image size",
        ),
        (
            lambda: CentreOfMassAnchor(8.0),
            ConfigurationError,
            "CentreOfMassAnchor: expected an image size",
        ),  # type: ignore[arg-type]
        (
            lambda: CentreOfMassAnchor(True),
            ConfigurationError,
            "CentreOfMassAnchor: expected an image size",
        ),  # type: ignore[arg-type]
        (
            lambda: CentreOfMassAnchor(8)(torch.rand(1, 1, 8, 6)),
            GroupError,
            "CentreOfMassAnchor: expected a square image",
        ),
        (
            lambda: CentreOfMassAnchor(8)(torch.rand(1, 1, 6, 6)),
            GroupError,
            "CentreOfMassAnchor: expected images of side image_size=8",
        ),
        (
            lambda: CentreOfMassAnchor(8)(torch.rand(1, 0, 8, 8)),
            GroupError,
            "CentreOfMassAnchor: expected images with at least one channel",
        ),
        (lambda: CentreOfMassAnchor(8)(torch.rand(8, 8)), GroupError, "CentreOfMassAnchor"),
        (
            lambda: CentreOfMassAnchor(8)(torch.rand(1, 1, 8, 8, dtype=torch.complex64)),
            DtypeError,
            "CentreOfMassAnchor: expected a real input",
        ),
        (
            lambda: centre_of_mass_anchor(torch.rand(1, 1, 5, 4)),
            GroupError,
            "centre_of_mass_anchor: expected a square image",
        ),
        (lambda: centre_of_mass_scores(torch.rand(1, 1, 5)), GroupError, "centre_of_mass_scores"),
    ],
)
def test_bad_input_names_the_anchor(make, error: type, match: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(error, match=match):
        make()


def test_an_image_too_large_for_exact_scores_is_refused_before_any_work() -> None:
    """``channels · S · Σ d²`` must leave 8 bits per pixel below ``2**52``: 64 channels of
    2,048 x 2,048 do not (checked on the meta device: nothing is allocated)."""
    x = torch.empty(1, 64, 2048, 2048, device="meta")
    with pytest.raises(GroupError, match=r"small enough for exact scores"):
        centre_of_mass_anchor(x)


# ---------------------------------------------------------------- what a recording sees
# (found by an adversarial review: decisions were reported per axis, near-ties of signed
# images were judged against scores that cancel, and exact integer margins were called
# ties within the float64 rounding allowance)


def test_one_event_per_call_with_one_row_per_sample() -> None:
    x = torch.rand(3, 1, 8, 8, generator=torch.Generator().manual_seed(6))
    x[1] = 0.5  # a constant image: tied on both axes, one tied sample
    with record_canonicalizations() as rec:
        out = centre_of_mass_anchor(x)
    (event,) = rec.events
    assert event.batch == 3 and event.margin.shape == (3,)
    assert event.tied.tolist() == [False, True, False] and event.num_tied == 1
    assert torch.equal(event.margin, out.margin)


def test_exact_integer_margins_are_not_called_ties() -> None:
    """A margin of a few units on scores of about 3e15 is no tie: the scores are exact."""
    x = torch.ones(1, 1, 256, 256, dtype=torch.float64)
    x[0, 0, 40, 200] += 2.0**-20  # margin 8 units: within 256 float64 roundings of the scores
    with record_canonicalizations() as rec:
        out = centre_of_mass_anchor(x)
    margin = float(out.margin[0])
    assert 0 < margin < 1e-9 * float(rec.events[0].scores.abs().max())
    assert not bool(rec.events[0].tied[0])
    gen = torch.Generator().manual_seed(7)
    for dy, dx in torch.randint(0, 256, (6, 2), generator=gen).tolist():
        assert torch.equal(
            centre_of_mass_anchor(torch.roll(x, (dy, dx), (2, 3))).output, out.output
        )


def test_near_ties_of_signed_images_are_judged_against_the_magnitudes() -> None:
    """A ±64 checkerboard (every row and column sums to 0) under a faint glyph: the scores
    cancel, but one bf16 rounding of one pixel moves them by far more than their margin.
    The decision is flagged as a near-tie (and the moved, rounded copy as at risk)."""
    from groupattn.canonical import near_ties_between

    side = 16
    signs = torch.tensor([[(-1.0) ** (i + j) for j in range(side)] for i in range(side)])
    x = 64.0 * signs
    x[6, 6:9] += 0.25
    x = x.view(1, 1, side, side).to(torch.bfloat16)
    moved = torch.roll(x, (3, 5), (2, 3)).clone()
    moved[0, 0, 12, 2] += 0.5 * torch.sign(moved[0, 0, 12, 2])  # one bf16 step at 64
    with record_canonicalizations() as rec:
        centre_of_mass_anchor(x)
        centre_of_mass_anchor(moved)
    first, second = rec.events
    assert bool(first.near_tied[0]) and bool(second.near_tied[0])
    assert bool(near_ties_between(first, second)[0])


def test_non_tensors_and_integer_like_sizes() -> None:
    import numpy as np

    for bad in ([[1.0]], np.zeros((1, 1, 4, 4))):
        with pytest.raises(DtypeError, match=r"CentreOfMassAnchor: expected a torch\.Tensor"):
            CentreOfMassAnchor(4)(bad)  # type: ignore[arg-type]
    anchor = CentreOfMassAnchor(np.int64(8))  # type: ignore[arg-type]
    assert anchor.image_size == 8 and type(anchor.image_size) is int
