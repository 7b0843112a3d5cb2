"""OrientationCanonicalizer: any-angle orientation in front of a C4 / D4-invariant body.

Evidence: the canonical image moves bit for bit with every element of D4 (every dtype,
hypothesis over images and sides); the angle follows a rotation by an arbitrary angle of an
analytic image (no interpolation in the input) modulo quarter turns; canonical images of
such rotations agree up to a quarter turn far better than the rotated images themselves;
``group_vit`` / ``p4_vit`` with ``canonicalize_orientation=True`` are invariant under every
element of C4, D4 (float64) and sampled elements of p4, and certified; blank images are
reported as ties; the contract; bad inputs raise errors that name the module.
"""

from __future__ import annotations

import math

import pytest
import torch
from anchored_helpers import digit as _digit
from anchored_helpers import max_relative_error as _max_relative_error
from anchored_helpers import moved as _moved
from anchored_helpers import point_elements_with_shifts
from hypothesis import given, settings
from hypothesis import strategies as st

from groupattn import ConfigurationError, ShapeError
from groupattn.actions import GridField
from groupattn.canonical import (
    CentreAnchor,
    CentreOfMassAnchor,
    OrientationCanonicalizer,
    StridedRotoTranslationGroup,
    orientation_canonicalize,
    record_canonicalizations,
)
from groupattn.check import certify
from groupattn.contracts import Status
from groupattn.groups import CyclicGroup, DihedralGroup, TorusTranslations, p4
from groupattn.models import create

SIZE = 32
SMALL = {"dim": 8, "depth": 1}


def _d4_moves(x: torch.Tensor) -> list[torch.Tensor]:
    """The 8 images of ``x`` under D4 about its centre (rotations of ``x`` and of its mirror)."""
    return [torch.rot90(t, k, (-2, -1)) for t in (x, x.flip(-1)) for k in range(4)]


def _blobs(angle: float, side: int = SIZE, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """An analytic image — three Gaussian blobs of different sizes — turned by ``angle``
    about the image centre, sampled exactly (``(1, 1, S, S)``): no interpolation."""
    c = torch.arange(side, dtype=torch.float64) - (side - 1) / 2
    y, x = c[:, None], c[None, :]
    cos, sin = math.cos(angle), math.sin(angle)
    # the point that lands on (x, y) after the turn: rotate back by -angle
    u, v = cos * x + sin * y, -sin * x + cos * y
    image = torch.zeros(side, side, dtype=torch.float64)
    for (bx, by), width, weight in (
        ((7.0, 1.0), 2.0, 1.0),
        ((-3.0, 6.0), 1.5, 0.7),
        ((-4.0, -5.0), 2.5, 0.5),
    ):
        image += weight * torch.exp(-((u - bx) ** 2 + (v - by) ** 2) / (2 * width**2))
    return image.to(dtype)[None, None]


def _cross(angle: float, side: int = SIZE) -> torch.Tensor:
    """Two perpendicular Gaussian bars through the centre, turned by ``angle``: ``(1, 1, S, S)``."""
    c = torch.arange(side, dtype=torch.float64) - (side - 1) / 2
    y, x = c[:, None], c[None, :]
    u = math.cos(angle) * x + math.sin(angle) * y
    v = -math.sin(angle) * x + math.cos(angle) * y
    bars = torch.exp(-(v**2) / 4 - u**2 / 60) + torch.exp(-(u**2) / 4 - v**2 / 60)
    return bars.to(torch.float64)[None, None]


def _quarter_angle_difference(a: float, b: float) -> float:
    """``|a − b|`` modulo quarter turns, in ``[0, π/4]``."""
    d = (a - b) % (math.pi / 2)
    return min(d, math.pi / 2 - d)


# ---------------------------------------------------------------- exact under D4


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
def test_every_element_of_d4_moves_the_canonical_image_bit_for_bit(dtype: torch.dtype) -> None:
    x = _digit(5, dtype)
    reference = orientation_canonicalize(x)
    assert reference.output.dtype == dtype
    assert abs(float(reference.frame)) != math.pi / 4  # a digit: off the branch cut
    for g, moved in zip(_d4_moves(reference.output), _d4_moves(x), strict=True):
        assert torch.equal(orientation_canonicalize(moved).output, g)


@settings(max_examples=25)
@given(
    side=st.sampled_from([2, 4, 6, 10, 16]),
    channels=st.integers(1, 3),
    seed=st.integers(0, 2**16),
)
def test_equivariance_under_d4_for_random_images(side: int, channels: int, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(2, channels, side, side, generator=gen, dtype=torch.float64)
    canonical = orientation_canonicalize(x)
    at_cut = canonical.frame.abs() == math.pi / 4
    for index, (g, moved) in enumerate(zip(_d4_moves(canonical.output), _d4_moves(x), strict=True)):
        out = orientation_canonicalize(moved)
        if index < 4:  # quarter turns: equivariant, the same angle
            assert torch.equal(out.output, g) and torch.equal(out.frame, canonical.frame)
            continue
        for b in range(
            2
        ):  # reflections: mirrored angle and image, or at the cut a quarter turn more
            if at_cut[b]:
                assert any(
                    torch.allclose(
                        out.output[b], torch.rot90(g[b], k, (-2, -1)), atol=1e-12, rtol=0
                    )
                    for k in range(4)
                )
            else:
                assert torch.equal(out.output[b], g[b])
                assert float(out.frame[b]) == -float(canonical.frame[b])


def test_angle_follows_any_rotation_modulo_quarter_turns() -> None:
    """Rotating the analytic image by α moves θ by α (mod π/2), within the pixel sampling."""
    theta0 = float(orientation_canonicalize(_blobs(0.0)).frame)
    for alpha in (0.1, 0.3, 0.5, 0.77, 1.0, 1.9, 2.6, 4.0):
        theta = float(orientation_canonicalize(_blobs(alpha)).frame)
        assert _quarter_angle_difference(theta, theta0 + alpha) < 0.02, alpha


def test_canonical_images_of_rotations_agree_up_to_a_quarter_turn() -> None:
    """Turned by 30°, 50°, 110°: the canonical images are close up to a quarter turn (the
    error of bilinear interpolation), far closer than the turned images themselves."""
    reference = orientation_canonicalize(_blobs(0.0)).output
    scale = reference.abs().max()
    for degrees in (30, 50, 110):
        turned = _blobs(math.radians(degrees))
        canonical = orientation_canonicalize(turned).output
        best = min((canonical - torch.rot90(reference, k, (-2, -1))).abs().max() for k in range(4))
        raw = min((turned - torch.rot90(_blobs(0.0), k, (-2, -1))).abs().max() for k in range(4))
        assert best / scale < 0.05, degrees
        assert raw / scale > 0.3, degrees


def test_an_image_symmetric_about_a_diagonal_sits_on_the_branch_cut() -> None:
    """Its reflection in the other diagonal gives the canonical image turned by a quarter
    turn (the contract's canonicalizing case under reflections); the D4 model is still
    exactly invariant."""
    x = torch.zeros(1, 1, 8, 8, dtype=torch.float64)
    x[0, 0, 1, 1] = x[0, 0, 6, 6] = 1.0
    x[0, 0, 2, 5] = x[0, 0, 5, 2] = 0.25
    out = orientation_canonicalize(x)
    assert abs(float(out.frame)) == math.pi / 4
    mirrored = orientation_canonicalize(x.flip(-1))
    # cos(π/4) and sin(π/4) differ in the last bit: equal to rounding, not bit for bit
    assert any(
        torch.allclose(
            mirrored.output, torch.rot90(out.output.flip(-1), k, (-2, -1)), atol=1e-12, rtol=0
        )
        for k in (1, 3)
    )
    torch.manual_seed(0)
    model = create(
        "group_vit",
        point_group="D4",
        canonicalize_orientation=True,
        image_size=8,
        patch_size=2,
        **SMALL,
    )
    model = model.double().eval()
    assert _max_relative_error(model, x, torch.cat(_d4_moves(x))) <= 1e-10


def test_an_upright_image_is_turned_by_its_angle() -> None:
    """The output is the input sampled at R_θ q: a plus sign along the axes has θ = 0 (its
    mass lies where e^{4iφ} = 1) and is returned unchanged; turned by 45° (an ×) it has
    θ = π/4 and comes out as a plus sign again."""
    x = torch.zeros(1, 1, 8, 8, dtype=torch.float64)
    x[..., 3:5, :] = 1.0
    x[..., :, 3:5] = 1.0
    out = orientation_canonicalize(x)
    assert float(out.frame) == 0.0 and float(out.margin) > 0.2
    assert torch.equal(out.output, x)
    cross = orientation_canonicalize(_cross(math.pi / 4))
    plus = orientation_canonicalize(_cross(0.0))
    assert abs(abs(float(cross.frame)) - math.pi / 4) < 1e-9
    assert (cross.output - plus.output).abs().mean() < 0.1 * plus.output.abs().mean()


# ---------------------------------------------------------------- ties, gradients, compile


def test_a_blank_image_is_reported_as_a_tie() -> None:
    """No orientation (m = 0): θ = 0, margin 0, reported; a square has one (mod 90°)."""
    x = torch.zeros(2, 1, 8, 8)
    x[1, :, 2:6, 3:5] = 1.0  # a centred bar: oriented
    with record_canonicalizations() as recording:
        out = orientation_canonicalize(x)
    assert float(out.margin[0]) == 0.0 and float(out.frame[0]) == 0.0
    assert float(out.margin[1]) > 0
    assert torch.equal(out.output[0], x[0])
    assert len(recording.events) == 1 and recording.events[0].num_tied == 1


def test_margin_is_the_strength_of_the_orientation() -> None:
    out = orientation_canonicalize(_blobs(0.4))
    assert 0.05 < float(out.margin) <= 1.0


def test_gradients_reach_the_input_through_the_values() -> None:
    x = _digit(2).requires_grad_(True)
    orientation_canonicalize(x).output.sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0


def test_exports_and_matches_eager() -> None:
    module = OrientationCanonicalizer(SIZE)
    x = _digit(1, torch.float32)
    program = torch.export.export(module, (x,))
    assert torch.equal(program.module()(x).output, module(x).output)


# ---------------------------------------------------------------- contract and errors


def test_contract() -> None:
    module = OrientationCanonicalizer(SIZE)
    for group in (CyclicGroup(4), CyclicGroup(2), CyclicGroup(1)):
        contract = module.contract(group)
        assert contract.kind == Status.CANONICALIZING, group.name
        assert contract.output_group == group
        assert isinstance(contract.output_type, GridField)
    for group in (DihedralGroup(4), DihedralGroup(2), DihedralGroup(1)):
        contract = module.contract(group)
        assert contract.kind == Status.CANONICALIZING, group.name
        assert contract.output_group == DihedralGroup(4)
    left = StridedRotoTranslationGroup(CyclicGroup(4), SIZE, stride=SIZE)
    assert module.contract(left).kind == Status.CANONICALIZING
    left_m = StridedRotoTranslationGroup(DihedralGroup(4), SIZE, stride=SIZE)
    assert module.contract(left_m).kind == Status.CANONICALIZING
    broken = module.contract(TorusTranslations(SIZE, SIZE))
    assert broken.kind == Status.BROKEN and "CentreAnchor" in (broken.reason or "")
    assert module.contract(p4(SIZE)).kind == Status.BROKEN
    assert module.contract(CyclicGroup(8)).kind == Status.UNVERIFIED


@pytest.mark.parametrize(
    ("x", "error", "words"),
    [
        (torch.zeros(1, 1, 8, 6), ShapeError, "square"),
        (torch.zeros(1, 1, 7, 7), ShapeError, "even"),
        (torch.zeros(8, 8), ShapeError, "(B, C, S, S)"),
        (torch.zeros(1, 1, 8, 8, dtype=torch.long), TypeError, "floating"),
    ],
)
def test_bad_inputs_name_the_module(x: torch.Tensor, error: type, words: str) -> None:
    with pytest.raises(error, match="OrientationCanonicalizer") as info:
        OrientationCanonicalizer()(x)
    assert words in str(info.value)


def test_bad_arguments() -> None:
    for size in (7, 0, -2, 3.0, True):
        with pytest.raises(ConfigurationError, match="OrientationCanonicalizer"):
            OrientationCanonicalizer(size)  # type: ignore[arg-type]
    with pytest.raises(ShapeError, match="image_size=32"):
        OrientationCanonicalizer(32)(torch.zeros(1, 1, 16, 16))
    with pytest.raises(ConfigurationError, match=r"GroupViT.*even"):
        create("group_vit", canonicalize_orientation=True, image_size=15, patch_size=5)


# ---------------------------------------------------------------- the models


@pytest.mark.parametrize("point_group", ["C4", "D4"])
def test_group_vit_with_orientation_is_invariant_under_every_point_element(
    point_group: str,
) -> None:
    torch.manual_seed(0)
    model = create("group_vit", point_group=point_group, canonicalize_orientation=True, **SMALL)
    model = model.double().eval()
    x = _digit(7)
    moves = _d4_moves(x)[: 4 if point_group == "C4" else 8]
    assert _max_relative_error(model, x, torch.cat(moves)) <= 1e-10


def test_p4_vit_with_orientation_is_invariant_under_sampled_p4_elements() -> None:
    torch.manual_seed(0)
    model = create("p4_vit", canonicalize_orientation=True, **SMALL).double().eval()
    x = _digit(4)
    group = p4(SIZE)
    elements = point_elements_with_shifts(4, 6, SIZE)
    assert _max_relative_error(model, x, _moved(x, group, elements)) <= 1e-10
    assert isinstance(model.anchor, CentreOfMassAnchor)
    centre = create("p4_vit", canonicalize_orientation=True, anchoring="centre", **SMALL)
    centre = centre.double().eval()
    assert isinstance(centre.anchor, CentreAnchor)
    assert _max_relative_error(centre, x, _moved(x, group, elements)) <= 1e-10


def test_the_baseline_ignores_the_option() -> None:
    model = create("group_vit", equivariant=False, canonicalize_orientation=True)
    assert model.orientation is None
    assert not any(isinstance(m, OrientationCanonicalizer) for m in model.modules())


def test_models_with_orientation_are_certified() -> None:
    torch.manual_seed(0)
    x = torch.rand(2, 1, SIZE, SIZE)
    model = create("group_vit", point_group="D4", canonicalize_orientation=True, **SMALL)
    assert certify(model, x, "d4").verdict == Status.INVARIANT
    model = create("p4_vit", canonicalize_orientation=True, **SMALL)
    assert certify(model, x, "p4").verdict == Status.INVARIANT


def test_p4_vit_with_orientation_is_invariant_under_every_element_of_p4_on_16x16() -> None:
    """All 1,024 elements of p4 on a 16x16 torus (float64)."""
    torch.manual_seed(0)
    model = create("p4_vit", image_size=16, canonicalize_orientation=True, **SMALL).double().eval()
    x = torch.nn.functional.interpolate(_digit(4), size=(16, 16), mode="bilinear")
    group = p4(16)
    assert _max_relative_error(model, x, _moved(x, group, list(group.elements()))) <= 1e-10


def test_orientation_needs_a_whole_translation_anchor() -> None:
    with pytest.raises(ConfigurationError, match="P4ViT: expected anchoring='mass' or 'centre'"):
        create("p4_vit", anchoring="patch", canonicalize_orientation=True)
    assert create("p4_vit", anchoring="patch").orientation is None  # the preset does not ask


def test_the_registry_presets_leave_the_orientation_out() -> None:
    """The presets are the exact C4 / p4 models (on upright digits the canonicalizer costs
    clean accuracy); the canonicalizer is one argument away."""
    for name in ("group_vit", "p4_vit"):
        assert create(name).orientation is None
        assert isinstance(
            create(name, canonicalize_orientation=True).orientation, OrientationCanonicalizer
        )


# ---------------------------------------------------------------- GSA-Net

GSA_SMALL = {"dim": 4, "stem_channels": 4, "stem_dilations": (1, 2), "num_heads": 1}


def test_gsa_with_orientation_is_invariant_under_every_element_of_p4_on_16x16() -> None:
    """All 1,024 elements of p4 on a 16x16 torus (float64): the centre anchor, then the
    canonicalizer, then the p4-invariant GSA-Net."""
    torch.manual_seed(0)
    model = create("gsa", image_size=16, canonicalize_orientation=True, **GSA_SMALL)
    model = model.double().eval()
    assert isinstance(model.anchor, CentreAnchor)
    assert isinstance(model.orientation, OrientationCanonicalizer)
    x = torch.nn.functional.interpolate(_digit(3), size=(16, 16), mode="bilinear")
    group = p4(16)
    assert _max_relative_error(model, x, _moved(x, group, list(group.elements()))) <= 1e-10


def test_gsa_with_orientation_is_invariant_under_every_element_of_d4_and_certified() -> None:
    torch.manual_seed(0)
    model = create(
        "gsa", point_group="D4", image_size=16, canonicalize_orientation=True, **GSA_SMALL
    )
    model = model.double().eval()
    x = torch.nn.functional.interpolate(_digit(5), size=(16, 16), mode="bilinear")
    assert _max_relative_error(model, x, torch.cat(_d4_moves(x))) <= 1e-10
    model = model.float()
    for group in ("p4", "p4m"):
        assert certify(model, x.float(), group).verdict == Status.INVARIANT


def test_gsa_with_orientation_brings_arbitrary_angles_near_a_quarter_turn() -> None:
    """The point of the option: images turned by angles between the quarter turns reach
    the body (after the anchor and the canonicalizer) close to a quarter turn of the
    upright image's canonical form — far closer than the turned images are to the upright
    one (analytic blobs, no interpolation in the input; what is left is the anchor's
    whole-pixel roll and the canonicalizer's bilinear resampling)."""
    torch.manual_seed(0)
    model = create("gsa", image_size=SIZE, canonicalize_orientation=True, **GSA_SMALL).double()
    assert model.anchor is not None and model.orientation is not None
    anchor, orientation = model.anchor, model.orientation

    def body_input(x: torch.Tensor) -> torch.Tensor:
        return orientation(anchor(x).output).output

    upright = _blobs(0.0)
    reference = body_input(upright)
    for angle in (0.3, 0.6, 1.0):
        turned = _blobs(angle)
        raw = float((turned - upright).abs().max())
        seen = min(
            float((torch.rot90(body_input(turned), k, (-2, -1)) - reference).abs().max())
            for k in range(4)
        )
        assert seen < 0.4 * raw, (angle, seen, raw)


def test_gsa_orientation_option_arguments() -> None:
    assert create("gsa").orientation is None and create("gsa").anchor is None  # the preset
    baseline = create("gsa", equivariant=False, canonicalize_orientation=True)
    assert baseline.orientation is None and baseline.anchor is None
    with pytest.raises(ConfigurationError, match=r"GSANet: expected an even image_size"):
        create("gsa", image_size=15, canonicalize_orientation=True)
    with pytest.raises(ConfigurationError, match=r"GSANet: expected canonicalize_orientation"):
        create("gsa", canonicalize_orientation="yes")
