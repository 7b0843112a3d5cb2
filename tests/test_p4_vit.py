"""p4_vit: a patch ViT exactly invariant to every circular shift and quarter turn together.

An anchor followed by the C4/D4 group ViT; the baseline is the plain ViT. The registry
model anchors the whole translation by the centre of mass (``anchoring="mass"``,
``CentreOfMassAnchor``, body with absolute positions; more in
``test_centre_of_mass_corner.py``) or the blurred maximum (``anchoring="centre"``,
``CentreAnchor``; more in ``test_centre_anchor.py``); ``anchoring="patch"`` anchors the
phase of the patch grid (``groupattn.canonical.PatchGridAnchor``, body without absolute
positions). Evidence: invariance over every element of p4 (and p4m for D4) in float64 on
the registry's 32x32 input, float32 and bf16 tolerances, the checker's certificates, the
baseline's break, and the patch-grid anchor's tie rule on constructed inputs.
"""

from __future__ import annotations

import copy

import pytest
import torch
from anchored_helpers import digit as _digit
from anchored_helpers import max_relative_error as _max_relative_error
from anchored_helpers import moved as _moved
from anchored_helpers import point_elements_with_shifts
from hypothesis import given, settings
from hypothesis import strategies as st

from groupattn.actions import GridField, InvariantField
from groupattn.canonical import (
    CentreAnchor,
    CentreOfMassAnchor,
    PatchGridAnchor,
    StridedRotoTranslationGroup,
    num_patch_grid_scores,
    patch_grid_anchor,
    patch_grid_phase,
    patch_grid_scores,
    patch_rings,
    record_canonicalizations,
)
from groupattn.check import certify
from groupattn.contracts import Status
from groupattn.groups import CyclicGroup, DihedralGroup, GroupError, TorusTranslations, p4, p4m
from groupattn.models import GroupViT, P4ViT, create, get_spec
from groupattn.testing import equivariance_error

SIZE, PATCH = 32, 4
#: A narrower patch-grid-anchored model for the tie tests (the ties are the anchoring's; any
#: body invariant to the strided group shows them): every element of p4 in a few seconds.
SMALL = {"dim": 8, "depth": 1, "anchoring": "patch"}


def _orbit(x: torch.Tensor, group) -> torch.Tensor:  # type: ignore[no-untyped-def]
    """``g·x`` for every element of ``group``, stacked ``(|G|·B, C, S, S)`` (exact permutations)."""
    return _moved(x, group, group.elements())


def _phase_orbit(x: torch.Tensor) -> torch.Tensor:
    """``g·x`` for every turn and every shift in ``[0, 2p)²``: every phase class, 256 elements."""
    group = p4(SIZE)
    elements = [((dy, dx), h) for h in range(4) for dy in range(8) for dx in range(8)]
    return torch.cat([GridField().act(group, g, x) for g in elements])


# ---------------------------------------------------------------- registry and contracts


def test_registry_entry_and_baseline() -> None:
    spec = get_spec("p4_vit")
    assert spec.group == "p4" and spec.input_shape == (1, SIZE, SIZE)
    model = create("p4_vit")
    assert isinstance(model, P4ViT) and isinstance(model.anchor, CentreOfMassAnchor)
    assert model.anchoring == "mass" and model.absolute_position  # the default
    assert model.anchor.target == "corner"
    centre = create("p4_vit", anchoring="centre")
    assert isinstance(centre.anchor, CentreAnchor) and centre.absolute_position
    assert isinstance(model, GroupViT) and model.equivariant
    patch = create("p4_vit", anchoring="patch")
    assert type(patch.anchor) is PatchGridAnchor and patch.anchor.patch_size == PATCH
    assert not patch.absolute_position
    baseline = create("p4_vit", equivariant=False)
    assert isinstance(baseline.anchor, torch.nn.Identity) and not baseline.equivariant
    assert baseline.point_group.order() == 1  # the plain ViT: trivial point group
    assert model.contract(p4(SIZE)).kind == Status.INVARIANT
    assert model.contract(TorusTranslations(SIZE, SIZE)).kind == Status.INVARIANT
    assert model.contract(CyclicGroup(4)).kind == Status.INVARIANT
    assert model.contract(p4m(SIZE)).kind == Status.UNVERIFIED  # a C4 body: no reflections
    assert model.contract(p4(16)).kind == Status.UNVERIFIED
    for group in (p4(SIZE), TorusTranslations(SIZE, SIZE), CyclicGroup(4)):
        assert patch.contract(group).kind == Status.INVARIANT
    d4 = create("p4_vit", point_group="D4")
    assert d4.contract(p4m(SIZE)).kind == Status.INVARIANT
    assert create("p4_vit", point_group="D4", anchoring="patch").contract(p4m(SIZE)).kind == (
        Status.INVARIANT
    )
    broken = baseline.contract(p4(SIZE))
    assert broken.kind == Status.BROKEN
    assert (broken.reason or "").startswith("plain ViT baseline")


def test_anchor_contract_names_the_strided_output_group() -> None:
    anchor = PatchGridAnchor(PATCH, SIZE)
    c = anchor.contract(p4(SIZE))
    assert c.kind == Status.CANONICALIZING
    assert c.output_group == StridedRotoTranslationGroup(CyclicGroup(4), SIZE, PATCH)
    c = anchor.contract(p4m(SIZE))
    assert c.output_group == StridedRotoTranslationGroup(DihedralGroup(4), SIZE, PATCH)
    c = anchor.contract(TorusTranslations(SIZE, SIZE))
    assert c.kind == Status.CANONICALIZING
    assert c.output_group == TorusTranslations(SIZE // PATCH, SIZE // PATCH, stride=PATCH)
    c = anchor.contract(CyclicGroup(4))
    assert c.kind == Status.CANONICALIZING
    for other in (p4(16), CyclicGroup(8), TorusTranslations(8, 8, stride=4)):
        assert anchor.contract(other).kind == Status.UNVERIFIED


def test_strided_roto_translation_group() -> None:
    group = StridedRotoTranslationGroup(CyclicGroup(4), SIZE, PATCH)
    assert group.order() == 4 * (SIZE // PATCH) ** 2 == len(group.elements())
    assert group != p4(SIZE) and group == StridedRotoTranslationGroup(CyclicGroup(4), SIZE, PATCH)
    assert group.name == "p4(32x32)*4"
    assert copy.deepcopy(group) == group
    gens = group.generators()
    for g in group.elements()[::17]:
        word = group.word(g)
        acc = group.identity()
        for k in word:
            acc = group.compose(acc, gens[k])
        assert acc == g
        # it moves images exactly as the same element of p4
        x = torch.randn(1, 2, SIZE, SIZE)
        assert torch.equal(GridField().act(group, g, x), GridField().act(p4(SIZE), g.value, x))
    for a in group.elements()[::31]:
        for b in group.elements()[::29]:
            assert group.contains(group.compose(a, b).value)
    with pytest.raises(GroupError):
        group.element(((1, 0), 0))
    with pytest.raises(GroupError):
        StridedRotoTranslationGroup(CyclicGroup(4), 30, 4)


def test_patch_rings_are_the_d4_orbits_of_a_patch() -> None:
    assert patch_rings(4) == ((5, 6, 9, 10), (1, 2, 4, 7, 8, 11, 13, 14), (0, 3, 12, 15))
    assert patch_rings(1) == ((0,),)
    assert num_patch_grid_scores(4) == 7
    assert sorted(i for ring in patch_rings(8) for i in ring) == list(range(64))


# ---------------------------------------------------------------- exact invariance


@pytest.mark.parametrize("anchoring", ["centre", "mass"])
def test_logits_invariant_under_every_element_of_p4_float64(anchoring: str) -> None:
    model = create("p4_vit", anchoring=anchoring).double().eval()
    x = _digit()
    moved = _orbit(x, p4(SIZE))  # 4 turns x 1,024 shifts
    assert moved.shape[0] == 4 * SIZE * SIZE
    assert _max_relative_error(model, x, moved) <= 1e-10  # measured 6.8e-16


@pytest.mark.slow
def test_logits_invariant_under_every_element_of_p4m_float64() -> None:
    model = create("p4_vit", point_group="D4").double().eval()
    x = _digit(1)
    moved = _orbit(x, p4m(SIZE))  # 8 point elements x 1,024 shifts
    assert _max_relative_error(model, x, moved) <= 1e-10


def test_logits_invariant_under_p4m_every_point_element_and_shift_sample_float64() -> None:
    """The fast companion of the slow full-p4m test: all 8 point elements x 64 shifts each."""
    model = create("p4_vit", point_group="D4").double().eval()
    x = _digit(1)
    group = p4m(SIZE)
    elements = point_elements_with_shifts(8, 64, SIZE)
    moved = torch.cat([GridField().act(group, g, x) for g in elements])
    assert _max_relative_error(model, x, moved) <= 1e-10


@settings(max_examples=10)
@given(seed=st.integers(0, 2**16))
def test_logits_invariant_float32(seed: int) -> None:
    """float32: relative error ≤ 1e-5 (DESIGN tolerance); measured ≤ 1e-6."""
    torch.manual_seed(seed)
    model = create("p4_vit").eval()
    x = torch.randn(2, 1, SIZE, SIZE)
    group = p4(SIZE)
    report = equivariance_error(model, x, group, elements=group.sample(6, seed=seed))
    assert report.max_error <= 1e-5


def test_logits_invariant_bf16() -> None:
    """bf16 weights and input: the anchoring decides in float64 on exactly moved values, so
    the phase is the same; the body's own bf16 rounding is the only error (measured 0.0 on
    this digit over 256 elements with the patch anchor; bound: one bf16 step, 7.8e-3)."""
    x = _digit(2, torch.bfloat16)
    group = p4(SIZE)
    elements = group.sample(256, seed=0)
    moved = torch.cat([GridField().act(group, g, x) for g in elements])
    for anchoring in ("centre", "mass", "patch"):
        model = create("p4_vit", anchoring=anchoring).eval().to(torch.bfloat16)
        assert _max_relative_error(model, x, moved) <= 7.9e-3
        # the anchored images are exactly related (no rounding in the decision)
        anchored = model.anchor(moved[:16]).output
        strided = model.anchor.contract(group).output_group
        orbit = _orbit(model.anchor(x).output, strided)
        for image in anchored:
            assert (orbit == image).flatten(1).all(dim=1).any()


@settings(max_examples=8)
@given(seed=st.integers(0, 2**16), dihedral=st.booleans())
def test_anchor_is_canonicalizing_onto_the_strided_group(seed: int, dihedral: bool) -> None:
    torch.manual_seed(seed)
    x = torch.randn(2, 3, SIZE, SIZE)
    group = p4m(SIZE) if dihedral else p4(SIZE)
    anchor = PatchGridAnchor(PATCH, SIZE)
    report = equivariance_error(anchor, x, group, elements=group.sample(3, seed=seed))
    assert report.max_error == 0.0
    # the scores of a moved image are the same numbers in another order, bit for bit
    scores = patch_grid_scores(x, PATCH)
    for g in group.sample(3, seed=seed + 1):
        moved = patch_grid_scores(GridField().act(group, g, x), PATCH)
        assert torch.equal(scores.sort(dim=2).values, moved.sort(dim=2).values)


@pytest.mark.parametrize(("patch", "size"), [(1, 6), (2, 8), (3, 12), (5, 10), (8, 16)])
def test_scores_are_permuted_exactly_for_every_patch_size(patch: int, size: int) -> None:
    """Even and odd patches (a centre pixel), one and many rings: bit-for-bit permuted scores."""
    x = torch.randn(2, 3, size, size)
    group = p4m(size)
    scores = patch_grid_scores(x, patch)
    assert scores.shape == (2, num_patch_grid_scores(patch), patch * patch)
    for g in group.sample(6, seed=patch):
        moved = patch_grid_scores(GridField().act(group, g, x), patch)
        assert torch.equal(scores.sort(dim=2).values, moved.sort(dim=2).values)


# ---------------------------------------------------------------- the checker


@pytest.mark.parametrize(("point_group", "group"), [("C4", "p4"), ("D4", "p4m")])
def test_checker_certifies_p4_vit_with_patch_anchoring(point_group: str, group: str) -> None:
    """The registry default (``anchoring="centre"``) is certified in ``test_centre_anchor.py``."""
    x = torch.randn(2, 1, SIZE, SIZE)
    model = create("p4_vit", point_group=point_group, anchoring="patch")
    cert = certify(model, x, group, verify=True)
    assert cert.verdict == Status.INVARIANT, cert.reason


class _AnchoredAbsoluteViT(torch.nn.Module):
    """The anchor in front of a body that is *not* invariant to shifts by the patch size."""

    def __init__(self) -> None:
        super().__init__()
        self.anchor = PatchGridAnchor(PATCH, SIZE)
        self.body = GroupViT(absolute_position=True)  # absolute positions about the centre

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(self.anchor(x).output)


class _TwoFrames(torch.nn.Module):
    """Multiplies the input by the anchored image: two frames combined (their correlation)."""

    def __init__(self) -> None:
        super().__init__()
        self.anchor = PatchGridAnchor(PATCH, SIZE)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x * self.anchor(x).output).sum(dim=(1, 2, 3))


@pytest.mark.parametrize("build", [_AnchoredAbsoluteViT, _TwoFrames])
def test_checker_does_not_certify_misuse_of_the_anchor(build: type) -> None:
    """Soundness: the strided output group is all the checker assumes after the anchor."""
    torch.manual_seed(0)
    model = build().eval()
    x = torch.randn(2, 1, SIZE, SIZE)
    cert = certify(model, x, "p4")
    assert cert.verdict != Status.INVARIANT
    report = equivariance_error(
        model.double(),
        x.double(),
        p4(SIZE),
        elements=[((1, 0), 0), ((0, 3), 1)],
        input_type=GridField(),
        output_type=InvariantField(),
    )
    assert report.max_error > 1e-6  # and it really is not invariant


def test_baseline_breaks_numerically_and_by_the_checker() -> None:
    baseline = create("p4_vit", equivariant=False).double().eval()
    x = _digit()
    with torch.no_grad():
        y = baseline(x)
        shifted = baseline(torch.roll(x, (1, 0), (-2, -1)))
        turned = baseline(torch.rot90(x, 1, (-2, -1)))
    assert float((shifted - y).abs().max() / y.abs().max()) > 1e-3
    assert float((turned - y).abs().max() / y.abs().max()) > 1e-3
    cert = certify(create("p4_vit", equivariant=False), x.float(), "p4")
    assert cert.verdict == Status.BROKEN and cert.first_break is not None
    assert "embed" in str(cert.first_break)
    assert "windows do not move onto windows" in (cert.reason or str(cert))


# ---------------------------------------------------------------- ties


def test_primary_tie_is_broken_by_a_later_score_consistently() -> None:
    """Two single bright pixels: every phase ties on the patch-sum scores (each phase sees
    two patches of sum 1); the ring scores single out the phase that puts both on central
    pixels. Lowest-index tie-breaking would pick phase 0 for every moved copy; the cascade's
    choice moves with the image, and the logits are invariant over every turn and every
    phase class of shifts."""
    x = torch.zeros(1, 1, SIZE, SIZE, dtype=torch.float64)
    x[0, 0, 5, 9] = 1.0
    x[0, 0, 20, 20] = 1.0
    scores = patch_grid_scores(x, PATCH)[0]
    assert torch.equal(scores[0], scores[0, :1].expand(PATCH * PATCH))  # primary: all tied
    with record_canonicalizations() as rec:
        frame, margin = patch_grid_phase(x, PATCH)
    assert frame.tolist() == [[3, 3]] and float(margin[0]) > 0
    assert rec.events[0].num_tied == 0
    model = create("p4_vit", **SMALL).double().eval()
    assert _max_relative_error(model, x, _phase_orbit(x)) <= 1e-10


@pytest.mark.parametrize("image", ["pixel", "constant", "symmetric"])
def test_harmless_full_ties_are_reported_and_invariance_holds(image: str) -> None:
    """Full ties between phases whose anchored images the strided group relates: reported as
    ties (margin 0; the lowest index wins), and still exactly invariant over every turn and
    every phase class of shifts."""
    x = torch.zeros(1, 1, SIZE, SIZE, dtype=torch.float64)
    if image == "pixel":
        x[0, 0, 5, 9] = 1.0
    elif image == "constant":
        x += 0.5
    else:
        torch.manual_seed(3)  # its best phases are not fixed by the turn: they tie
        base = torch.randint(0, 8, (1, 1, SIZE, SIZE)).to(torch.float64)  # exact sums
        x = sum(torch.rot90(base, k, (-2, -1)) for k in range(4))
        assert torch.equal(x, torch.rot90(x, 1, (-2, -1)))  # equal to its quarter turn
    with record_canonicalizations() as rec:
        out = patch_grid_anchor(x, PATCH)
    assert float(out.margin[0]) == 0.0 and rec.events[0].num_tied == 1
    model = create("p4_vit", **SMALL).double().eval()
    assert _max_relative_error(model, x, _phase_orbit(x)) <= 1e-10


def test_non_finite_scores_are_reported() -> None:
    x = torch.zeros(1, 1, SIZE, SIZE)
    x[0, 0, 3, 3] = float("nan")
    with record_canonicalizations() as rec:
        patch_grid_anchor(x, PATCH)
    assert rec.events[0].num_non_finite == 1


def test_bad_inputs_raise_clear_errors() -> None:
    with pytest.raises(GroupError, match="PatchGridAnchor"):
        PatchGridAnchor(PATCH)(torch.zeros(1, 1, 32, 16))
    with pytest.raises(GroupError, match="divisible"):
        PatchGridAnchor(PATCH)(torch.zeros(1, 1, 30, 30))
    with pytest.raises(GroupError):
        PatchGridAnchor(0)
