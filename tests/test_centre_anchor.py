"""CentreAnchor: anchoring the whole translation, exactly under p4 / p4m, and the models built on it.

``CentreAnchor`` is ``PatchGridAnchor`` with ``patch_size = image_size``: every translation
is a phase, chosen by the ring energies of the central block of a D4-symmetric Gaussian
blur, so what is left of p4 / p4m is the turns about the centre, and ``p4_vit`` /
``p4_swin`` (``anchoring="centre"``, the default) keep their rotation-invariant absolute
positions. Evidence: the blur and the scores move bit for bit under every element of p4m,
the anchor is canonicalizing with max error exactly 0, the models are invariant under every
element of p4 (float64), the registry models are certified, a digit is centred, ties are
reported, and bad arguments raise clear errors.
"""

from __future__ import annotations

import pytest
import torch
from anchored_helpers import digit as _digit
from anchored_helpers import max_relative_error as _max_relative_error
from anchored_helpers import moved as _moved
from hypothesis import given, settings
from hypothesis import strategies as st

from groupattn import ConfigurationError
from groupattn.actions import GridField
from groupattn.canonical import (
    CentreAnchor,
    PatchGridAnchor,
    StridedRotoTranslationGroup,
    centre_anchor,
    patch_rings,
    record_canonicalizations,
)
from groupattn.canonical._patch_grid import _blur_matrices, _centre_scores, _integer_blur
from groupattn.check import certify
from groupattn.contracts import Status
from groupattn.groups import CyclicGroup, DihedralGroup, GroupError, TorusTranslations, p4, p4m
from groupattn.models import GroupSwin, GroupViT, P4Swin, P4ViT, create

SIZE = 32
#: Narrow bodies for the tests of every element (the anchor is the subject; any body
#: invariant to the turns about the centre shows the same).
SMALL_VIT = {"dim": 8, "depth": 1}
SMALL_SWIN = {"dim": 8, "depths": (1, 1), "num_heads": 1}


def _turns(x: torch.Tensor) -> list[torch.Tensor]:
    return [torch.rot90(x, k, (-2, -1)) for k in range(4)]


def _related_by_a_turn(a: torch.Tensor, b: torch.Tensor) -> bool:
    return any(torch.equal(a, t) for t in _turns(b))


# ---------------------------------------------------------------- the blur and the scores


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_blur_moves_with_every_element_of_p4m_bit_for_bit(dtype: torch.dtype) -> None:
    """A 6x6 torus (r = 4 for sigma 1.2: the blur wraps), every one of the 288 elements;
    float32 is the score dtype on devices without float64 (fewer quantization levels)."""
    x = torch.rand(2, 2, 6, 6, dtype=dtype)
    group = p4m(6)
    blurred = _integer_blur(x, 1.2)
    assert blurred.dtype == dtype
    for g in group.elements():
        moved = GridField().act(group, g, x)
        assert torch.equal(_integer_blur(moved, 1.2), GridField().act(group, g, blurred)), g


def test_blur_is_exact_on_32x32_for_sampled_elements() -> None:
    x = _digit(3)
    group = p4m(SIZE)
    for sigma, offset, box in ((6.0, 0, 1), (3.0, 15, 2), (40.0, 3, 2), (0.3, 0, 1)):
        blurred = _integer_blur(x, sigma, offset, box)
        if offset == 0 and box == 1:
            for g in group.sample(24, seed=0):
                moved = GridField().act(group, g, x)
                assert torch.equal(_integer_blur(moved, sigma), GridField().act(group, g, blurred))
        # the reference: the plain blur K q K of the same quantized image, rolled, block-summed
        kernel, _, _ = _blur_matrices(SIZE, sigma, 0, 1, 53)
        levels = _blur_matrices(SIZE, sigma, offset, box, 53)[2]
        q = torch.round(x / x.abs().amax() * levels)
        rolled = torch.roll(kernel @ q @ kernel, (-offset, -offset), (-2, -1))
        block = sum(torch.roll(rolled, (-u, -v), (-2, -1)) for u in range(box) for v in range(box))
        assert torch.equal(blurred, block), (sigma, offset, box)


@pytest.mark.parametrize("sigma", [0.2, 1.0, 3.0, 6.0, 40.0, 1e4])
def test_blur_is_exact_integer_arithmetic_and_close_to_the_gaussian(sigma: float) -> None:
    """Every value is an integer below 2**52 (so every sum was exact), even for the worst
    input (all pixels at the largest magnitude) and a blur that wraps the torus many
    times; and the result is the circular Gaussian of the image up to the quantization."""
    size = 16
    worst = torch.full((1, 1, size, size), -3.0, dtype=torch.float64)
    for box in (1, 2):
        out = _integer_blur(worst, sigma, 0, box)
        assert torch.equal(out, out.round()) and float(out.abs().max()) < 2.0**52
    x = torch.rand(2, 3, size, size, dtype=torch.float64)
    out = _integer_blur(x, sigma)
    assert torch.equal(out, out.round()) and float(out.abs().max()) < 2.0**52
    # the float reference: a folded Gaussian row, applied along both axes
    r = max(1, int(torch.tensor(3 * sigma).ceil()))
    d = torch.arange(-r, r + 1, dtype=torch.float64)
    row = torch.zeros(size, dtype=torch.float64).index_add_(
        0, d.long() % size, torch.exp(-d * d / (2 * sigma * sigma))
    )
    index = (torch.arange(size)[:, None] - torch.arange(size)) % size
    kernel = row[index] / row.sum()
    expected = kernel @ x @ kernel
    got = out / out.sum(dim=(2, 3), keepdim=True) * x.sum(dim=(2, 3), keepdim=True)
    assert float((got - expected).abs().max() / expected.abs().max()) < 2e-3


def test_blur_matrices_are_cached_and_samples_are_independent() -> None:
    x = torch.rand(3, 1, 8, 8, dtype=torch.float64)
    ref = _integer_blur(x, 1.5)
    info = _blur_matrices.cache_info()
    _integer_blur(x, 1.5)
    assert _blur_matrices.cache_info().hits == info.hits + 1
    # a non-finite sample and a zero sample leave the others alone
    bad = x.clone()
    bad[0, 0, 2, 2] = float("nan")
    bad[1] = 0.0
    out = _integer_blur(bad, 1.5)
    assert out[0].isnan().all() and torch.equal(out[1], torch.zeros_like(out[1]))
    assert torch.equal(out[2], ref[2])


def test_scores_are_permuted_exactly() -> None:
    """Sorted scores equal bit for bit: every element of p4m on 8x8 (window 4), samples on 32x32."""
    for size, window, sigma, elements in (
        (8, 4, 1.0, p4m(8).elements()),
        (SIZE, 8, 6.0, p4m(SIZE).sample(12, seed=1)),
    ):
        group = p4m(size)
        x = torch.randn(2, 3, size, size, dtype=torch.float64)
        scores = _centre_scores(x, sigma, window)
        assert scores.shape == (2, len(patch_rings(window)), size * size)
        for g in elements:
            moved = _centre_scores(GridField().act(group, g, x), sigma, window)
            assert torch.equal(scores.sort(dim=2).values, moved.sort(dim=2).values), g


def test_column_a_s_plus_b_scores_phase_a_b() -> None:
    """The reference: roll the blurred image by the phase, cut the central block, sum its rings."""
    size, window, sigma = 12, 6, 1.5
    x = torch.rand(1, 2, size, size, dtype=torch.float64)
    blurred = _integer_blur(x, sigma)
    scores = _centre_scores(x, sigma, window)
    o = (size - window) // 2
    for a, b in ((0, 0), (3, 7), (11, 1), (6, 6)):
        block = torch.roll(blurred, (-a, -b), (-2, -1))[0, :, o : o + window, o : o + window]
        flat = block.reshape(2, window * window)
        expected = [
            float((flat[:, list(ring)].sum(dim=1) ** 2).sum()) for ring in patch_rings(window)
        ]
        assert scores[0, :, a * size + b].tolist() == pytest.approx(expected, rel=1e-12)


# ---------------------------------------------------------------- the anchor


def test_centre_anchor_is_the_patch_grid_anchor_with_p_equal_to_s() -> None:
    anchor = CentreAnchor(SIZE)
    assert isinstance(anchor, PatchGridAnchor)
    assert anchor.patch_size == anchor.image_size == SIZE
    assert (anchor.sigma, anchor.window) == (6.0, 8)
    assert "sigma=6" in repr(anchor)
    for group, point in ((p4(SIZE), CyclicGroup(4)), (p4m(SIZE), DihedralGroup(4))):
        c = anchor.contract(group)
        assert c.kind == Status.CANONICALIZING
        assert c.output_group == StridedRotoTranslationGroup(point, SIZE, SIZE)
        assert c.output_group.order() == point.order()  # the turns about the centre alone
    c = anchor.contract(TorusTranslations(SIZE, SIZE))
    assert c.kind == Status.CANONICALIZING and c.output_group.order() == 1
    assert anchor.contract(CyclicGroup(4)).kind == Status.CANONICALIZING
    for other in (p4(16), CyclicGroup(8), TorusTranslations(8, 8, stride=4)):
        c = anchor.contract(other)
        assert c.kind == Status.UNVERIFIED and "CentreAnchor" in (c.reason or "")


@settings(max_examples=8)
@given(seed=st.integers(0, 2**16), dihedral=st.booleans())
def test_anchor_is_canonicalizing_with_error_exactly_zero(seed: int, dihedral: bool) -> None:
    from groupattn.testing import equivariance_error

    torch.manual_seed(seed)
    x = torch.randn(2, 3, SIZE, SIZE)
    group = p4m(SIZE) if dihedral else p4(SIZE)
    report = equivariance_error(CentreAnchor(SIZE), x, group, elements=group.sample(4, seed=seed))
    assert report.max_error == 0.0


def test_functional_and_module_agree_and_keep_the_dtype() -> None:
    x = _digit(4, torch.bfloat16)
    out = CentreAnchor(SIZE)(x)
    ref = centre_anchor(x)
    assert torch.equal(out.output, ref.output) and torch.equal(out.frame, ref.frame)
    assert out.output.dtype == torch.bfloat16 and out.margin.dtype == torch.float64
    a, b = out.frame[0].tolist()
    assert torch.equal(out.output, torch.roll(x, (-a, -b), (-2, -1)))
    # bf16: decided in float64 on exactly moved values, so moved copies anchor exactly
    group = p4(SIZE)
    for g in group.sample(8, seed=2):
        moved = centre_anchor(GridField().act(group, g, x)).output
        assert _related_by_a_turn(moved, out.output), g


def test_a_shifted_and_turned_digit_is_anchored_to_the_same_image_up_to_a_turn() -> None:
    x = _digit(0)
    ref = centre_anchor(x)
    assert float(ref.margin[0]) > 0  # no tie
    for shift in ((0, 0), (5, -3), (-7, 11), (13, 2), (16, 16)):
        for k in range(4):
            moved = torch.rot90(torch.roll(x, shift, (-2, -1)), k, (-2, -1))
            assert _related_by_a_turn(centre_anchor(moved).output, ref.output), (shift, k)


def test_digits_are_centred() -> None:
    """The anchored digits' centroids sit at the image centre (15.5) within a pixel on
    average, with a spread below the raw canvas's (measured: std 0.45 / 0.31 px after
    anchoring, 0.75 / 0.58 px raw, over the 449 test digits)."""
    from groupattn.data import load_digits

    x = load_digits().test_images[:128].to(torch.float64)
    out = centre_anchor(x).output
    mass = out.sum(dim=(1, 2, 3))
    pos = torch.arange(SIZE, dtype=torch.float64)
    cy = (out.sum(dim=(1, 3)) * pos).sum(dim=1) / mass
    cx = (out.sum(dim=(1, 2)) * pos).sum(dim=1) / mass
    for c in (cy, cx):
        assert abs(float(c.mean()) - 15.5) < 1.0 and float(c.std()) < 1.0
    # and a digit moved far off-centre comes back
    moved = torch.roll(x[:16], (11, -9), (-2, -1))
    back = centre_anchor(moved).output
    for a, b in zip(back, out[:16], strict=True):
        assert torch.equal(a, b)


# ---------------------------------------------------------------- ties


@pytest.mark.parametrize("image", ["constant", "pixel"])
def test_full_ties_are_reported_and_invariance_holds(image: str) -> None:
    """A constant image (every phase gives the same image) and a single bright pixel (the
    four phases that put it on a central pixel, which quarter turns about the centre
    relate): reported as ties (margin 0), and the models are still exactly invariant."""
    x = torch.full((1, 1, SIZE, SIZE), 0.5, dtype=torch.float64)
    if image == "pixel":
        x = torch.zeros(1, 1, SIZE, SIZE, dtype=torch.float64)
        x[0, 0, 5, 9] = 1.0
    with record_canonicalizations() as rec:
        out = centre_anchor(x)
    assert float(out.margin[0]) == 0.0 and rec.events[0].num_tied == 1
    group = p4(SIZE)
    images = _moved(x, group, group.sample(48, seed=3))
    for name, kwargs in (("p4_vit", SMALL_VIT), ("p4_swin", SMALL_SWIN)):
        model = create(name, **kwargs).double().eval()
        assert _max_relative_error(model, x, images) <= 1e-10, name


def test_non_finite_inputs_are_reported() -> None:
    x = torch.zeros(1, 1, SIZE, SIZE)
    x[0, 0, 3, 3] = float("nan")
    with record_canonicalizations() as rec:
        CentreAnchor(SIZE)(x)
    assert rec.events[0].num_non_finite == 1


# ---------------------------------------------------------------- the models


def test_models_with_centre_anchoring_keep_absolute_positions() -> None:
    """``anchoring="centre"`` (the registry default until the centre of mass replaced it)."""
    vit = create("p4_vit", anchoring="centre")
    assert isinstance(vit, P4ViT) and vit.anchoring == "centre"
    assert isinstance(vit.anchor, CentreAnchor) and vit.absolute_position
    assert [n for n, _ in vit.named_parameters()] == [n for n, _ in GroupViT().named_parameters()]
    swin = create("p4_swin", anchoring="centre")
    assert isinstance(swin, P4Swin) and swin.anchoring == "centre"
    assert isinstance(swin.anchor, CentreAnchor) and swin.absolute_position
    assert swin.anchor_period == SIZE
    assert [n for n, _ in swin.named_parameters()] == [n for n, _ in GroupSwin().named_parameters()]
    patch = P4ViT(anchoring="patch")
    assert type(patch.anchor) is PatchGridAnchor and not patch.absolute_position
    assert P4Swin(anchoring="patch").anchor_period == 16
    for model in (vit, swin, create("p4_vit", point_group="D4", anchoring="centre")):
        for group in (p4(SIZE), TorusTranslations(SIZE, SIZE), CyclicGroup(4)):
            assert model.contract(group).kind == Status.INVARIANT, group.name
    for name in ("p4_vit", "p4_swin"):
        d4 = create(name, point_group="D4", anchoring="centre")
        assert d4.contract(p4m(SIZE)).kind == Status.INVARIANT
        assert d4.contract(DihedralGroup(4)).kind == Status.INVARIANT
        c4 = create(name, anchoring="centre")
        assert c4.contract(p4m(SIZE)).kind == Status.UNVERIFIED  # C4 body


@pytest.mark.parametrize(
    ("build", "size", "point_group"),
    [
        (lambda pg: P4ViT(image_size=12, point_group=pg, **SMALL_VIT), 12, "C4"),
        (lambda pg: P4Swin(image_size=16, point_group=pg, **SMALL_SWIN), 16, "C4"),
        (lambda pg: P4ViT(image_size=12, point_group=pg, **SMALL_VIT), 12, "D4"),
    ],
)
def test_logits_invariant_under_every_element_float64(build, size: int, point_group: str) -> None:  # type: ignore[no-untyped-def]
    """Every element of p4 (p4m for D4) on a small torus, float64: ≤ 1e-10 (measured ~1e-15)."""
    torch.manual_seed(0)
    model = build(point_group).double().eval()
    x = torch.rand(1, 1, size, size, dtype=torch.float64)
    group = p4m(size) if point_group == "D4" else p4(size)
    assert _max_relative_error(model, x, _moved(x, group, group.elements())) <= 1e-10


@pytest.mark.parametrize("name", ["p4_vit", "p4_swin"])
def test_registry_models_invariant_on_a_digit_float64(name: str) -> None:
    model = create(name).double().eval()
    x = _digit(5)
    group = p4(SIZE)
    assert _max_relative_error(model, x, _moved(x, group, group.sample(128, seed=4))) <= 1e-10


@pytest.mark.parametrize(
    ("name", "point_group", "group"),
    [
        ("p4_vit", "C4", "p4"),
        ("p4_vit", "D4", "p4m"),
        ("p4_swin", "C4", "p4"),
        ("p4_swin", "D4", "p4m"),
    ],
)
def test_checker_certifies_the_registry_models(name: str, point_group: str, group: str) -> None:
    from groupattn.check._export import is_trusted_leaf

    # the checker takes the anchor by its contract (its body — a blur and an arg-max — is
    # not something operator rules can follow)
    assert is_trusted_leaf(CentreAnchor(SIZE), False), (
        "groupattn.check should list CentreAnchor among its library leaves"
    )
    x = torch.randn(2, 1, SIZE, SIZE)
    cert = certify(create(name, point_group=point_group), x, group, verify=True)
    assert cert.verdict == Status.INVARIANT, cert.reason


# ---------------------------------------------------------------- bad arguments


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"image_size": 31}, "CentreAnchor: expected an even image size"),
        ({"image_size": 32.0}, "CentreAnchor: expected an even image size"),
        ({"image_size": 32, "sigma": 0}, "CentreAnchor: expected sigma"),
        ({"image_size": 32, "sigma": -1.0}, "CentreAnchor: expected sigma"),
        ({"image_size": 32, "sigma": float("nan")}, "CentreAnchor: expected sigma"),
        ({"image_size": 32, "sigma": True}, "CentreAnchor: expected sigma"),
        ({"image_size": 32, "window": 7}, "CentreAnchor: expected window as an even int"),
        ({"image_size": 32, "window": 0}, "CentreAnchor: expected window as an even int"),
        ({"image_size": 16, "window": 18}, "expected window <= the image size 16"),
    ],
)
def test_bad_arguments_raise_clear_errors(kwargs: dict, match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        CentreAnchor(**kwargs)


def test_bad_inputs_and_model_arguments_raise_clear_errors() -> None:
    with pytest.raises(GroupError, match="CentreAnchor: expected a square image"):
        CentreAnchor(SIZE)(torch.zeros(1, 1, SIZE, 16))
    with pytest.raises(GroupError, match="CentreAnchor: expected images of side image_size=32"):
        CentreAnchor(SIZE)(torch.zeros(1, 1, 16, 16))
    with pytest.raises(GroupError, match="centre_anchor: expected an even image side"):
        centre_anchor(torch.zeros(1, 1, 15, 15))
    with pytest.raises(GroupError, match="centre_anchor: expected an image side >= window=8"):
        centre_anchor(torch.zeros(1, 1, 6, 6))
    with pytest.raises(ConfigurationError, match="centre_anchor: expected sigma"):
        centre_anchor(torch.zeros(1, 1, 8, 8), sigma=0.0)
    for cls in (P4ViT, P4Swin):
        with pytest.raises(ConfigurationError, match=f"{cls.__name__}: expected anchoring"):
            cls(anchoring="grid")
    with pytest.raises(ConfigurationError, match="P4ViT: expected an even image size"):
        P4ViT(image_size=9, patch_size=3, anchoring="centre")
