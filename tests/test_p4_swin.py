"""p4_swin: a group Swin exactly invariant to every circular shift and quarter turn together.

An anchor in front of the C4/D4 group Swin: the registry model anchors the whole translation
by the centre of mass (``anchoring="mass"``, ``CentreOfMassAnchor``, body with absolute
positions; more in ``test_centre_of_mass_corner.py``) or the blurred maximum
(``anchoring="centre"``, ``CentreAnchor``; more in ``test_centre_anchor.py``);
``anchoring="patch"`` is ``PatchGridAnchor`` with the period of
the coarsest window (16 px for the preset) and a body without absolute positions. Either
way the windows and the patch merging of every stage see every shifted input partitioned
the same way. Evidence: every element of p4 in float64, p4m over every point element,
float32 and bf16 tolerances, the checker's certificates, why the period of the patch
anchoring is the coarsest window (a finer anchor is caught by the checker and breaks
numerically), the un-anchored group Swin's and the baseline's breaks.
"""

from __future__ import annotations

import pytest
import torch
from anchored_helpers import digit as _digit
from anchored_helpers import max_relative_error as _max_relative_error
from anchored_helpers import moved as _moved
from anchored_helpers import point_elements_with_shifts
from hypothesis import given, settings
from hypothesis import strategies as st

from groupattn import ConfigurationError
from groupattn.actions import GridField, InvariantField
from groupattn.canonical import (
    CentreAnchor,
    CentreOfMassAnchor,
    PatchGridAnchor,
    StridedRotoTranslationGroup,
    patch_grid_anchor,
    record_canonicalizations,
)
from groupattn.check import certify
from groupattn.contracts import Status
from groupattn.groups import CyclicGroup, DihedralGroup, GroupError, TorusTranslations, p4, p4m
from groupattn.models import GroupSwin, P4Swin, create, get_spec
from groupattn.testing import equivariance_error

SIZE, PERIOD = 32, 16
#: A lighter body with the preset's period (two stages, windows of 4 tokens, patch 2).
SMALL = {"dim": 8, "depths": (1, 1), "num_heads": 1}
#: The same with the patch-grid anchor of the coarsest window's period.
PATCH_SMALL = {**SMALL, "anchoring": "patch"}


# ---------------------------------------------------------------- registry and structure


def test_registry_entry_baseline_and_parameters() -> None:
    spec = get_spec("p4_swin")
    assert spec.group == "p4" and spec.input_shape == (1, SIZE, SIZE)
    model = create("p4_swin")
    assert isinstance(model, P4Swin) and isinstance(model, GroupSwin)
    # the default: the whole translation is anchored, the body keeps its absolute positions
    assert model.anchoring == "mass" and model.anchor_period == SIZE
    assert isinstance(model.anchor, CentreOfMassAnchor) and model.anchor.target == "corner"
    assert model.absolute_position
    centre = create("p4_swin", anchoring="centre")
    assert isinstance(centre.anchor, CentreAnchor) and centre.anchor.patch_size == SIZE
    assert centre.anchor_period == SIZE and centre.absolute_position
    body = GroupSwin()
    assert [n for n, _ in model.named_parameters()] == [n for n, _ in body.named_parameters()]
    patch = create("p4_swin", anchoring="patch")
    assert patch.anchor_period == PERIOD
    assert type(patch.anchor) is PatchGridAnchor and patch.anchor.patch_size == PERIOD
    # the group Swin's layers without absolute positions, plus the parameter-free anchor
    body = GroupSwin(absolute_position=False)
    assert [n for n, _ in patch.named_parameters()] == [n for n, _ in body.named_parameters()]
    baseline = create("p4_swin", equivariant=False)
    assert isinstance(baseline.anchor, torch.nn.Identity)
    plain = GroupSwin(equivariant=False)
    assert [n for n, _ in baseline.named_parameters()] == [n for n, _ in plain.named_parameters()]


@pytest.mark.parametrize(
    ("kwargs", "period"),
    [
        ({}, 16),
        ({"depths": (2,)}, 8),
        ({"depths": (1, 1, 1), "image_size": 64}, 32),
        ({"window_size": 2, "patch_size": 4}, 16),
    ],
)
def test_period_is_the_coarsest_window_in_pixels(kwargs: dict, period: int) -> None:
    assert P4Swin(**kwargs, anchoring="patch").anchor_period == period
    assert P4Swin(**kwargs).anchor_period == kwargs.get("image_size", SIZE)  # "mass"


def test_bad_configuration_and_inputs_raise_clear_errors() -> None:
    with pytest.raises(ConfigurationError, match="P4Swin"):
        P4Swin(image_size=(32, 32))  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="GroupSwin"):
        P4Swin(image_size=24)  # stage grids not divisible by the window
    with pytest.raises(ConfigurationError, match="P4Swin: expected anchoring"):
        P4Swin(anchoring="window")
    odd = {"image_size": 27, "patch_size": 3, "window_size": 3, "shift": False, "depths": (1,)}
    with pytest.raises(ConfigurationError, match="P4Swin: expected an even image size"):
        P4Swin(**odd, anchoring="centre")
    # the centre of mass anchors any side: on an odd one, onto the centre pixel
    assert P4Swin(**odd).anchor.target == "pixel"
    model = create("p4_swin", **PATCH_SMALL)
    with pytest.raises(GroupError, match="PatchGridAnchor: expected a square image"):
        model(torch.zeros(1, 1, SIZE, 16))
    with pytest.raises(GroupError, match="CentreOfMassAnchor: expected a square image"):
        create("p4_swin", **SMALL)(torch.zeros(1, 1, SIZE, 16))
    with pytest.raises(GroupError, match="CentreAnchor: expected a square image"):
        create("p4_swin", anchoring="centre", **SMALL)(torch.zeros(1, 1, SIZE, 16))


# ---------------------------------------------------------------- exact invariance


@pytest.mark.parametrize("anchoring", ["centre", "mass", "patch"])
def test_logits_invariant_under_every_element_of_p4_float64(anchoring: str) -> None:
    model = create("p4_swin", anchoring=anchoring, **SMALL).double().eval()
    x = _digit()
    group = p4(SIZE)
    moved = _moved(x, group, group.elements())  # 4 turns x 1,024 shifts
    assert moved.shape[0] == 4 * SIZE * SIZE
    assert _max_relative_error(model, x, moved) <= 1e-10  # measured ~1e-15


def test_preset_logits_invariant_under_p4m_every_point_element_float64() -> None:
    """The registry preset with D4: all 8 point elements x 32 sampled shifts each."""
    model = create("p4_swin", point_group="D4").double().eval()
    x = _digit(1)
    group = p4m(SIZE)
    elements = point_elements_with_shifts(8, 32, SIZE)
    assert _max_relative_error(model, x, _moved(x, group, elements)) <= 1e-10


@settings(max_examples=6)
@given(seed=st.integers(0, 2**16))
def test_logits_invariant_float32(seed: int) -> None:
    """float32 on random images: relative error ≤ 1e-5 (DESIGN tolerance)."""
    torch.manual_seed(seed)
    model = create("p4_swin", **SMALL).eval()
    x = torch.randn(2, 1, SIZE, SIZE)
    group = p4(SIZE)
    report = equivariance_error(model, x, group, elements=group.sample(6, seed=seed))
    assert report.max_error <= 1e-5


def test_logits_invariant_bf16() -> None:
    """bf16 weights and input: the phase is decided in float64 on exactly moved values, so
    the anchored images are exactly related; the bound is one bf16 step (7.8e-3)."""
    x = _digit(2, torch.bfloat16)
    group = p4(SIZE)
    moved = _moved(x, group, group.sample(64, seed=0))
    for anchoring, period in (("centre", SIZE), ("mass", SIZE), ("patch", PERIOD)):
        model = create("p4_swin", anchoring=anchoring, **SMALL).eval().to(torch.bfloat16)
        assert _max_relative_error(model, x, moved) <= 7.9e-3
        strided = StridedRotoTranslationGroup(CyclicGroup(4), SIZE, period)
        assert model.anchor.contract(group).output_group == strided
        orbit = _moved(model.anchor(x).output, strided, strided.elements())
        for image in model.anchor(moved[:16]).output:
            assert (orbit == image).flatten(1).all(dim=1).any()


@pytest.mark.parametrize("image", ["constant", "symmetric"])
def test_full_ties_are_reported_and_invariance_holds(image: str) -> None:
    x = torch.full((1, 1, SIZE, SIZE), 0.5, dtype=torch.float64)
    if image == "symmetric":
        torch.manual_seed(3)
        base = torch.randint(0, 8, (1, 1, SIZE, SIZE)).to(torch.float64)  # exact sums
        x = sum(torch.rot90(base, k, (-2, -1)) for k in range(4))
    with record_canonicalizations() as rec:
        patch_grid_anchor(x, PERIOD)
    assert rec.events[0].num_tied == 1
    model = create("p4_swin", **PATCH_SMALL).double().eval()
    group = p4(SIZE)
    assert _max_relative_error(model, x, _moved(x, group, group.sample(64, seed=1))) <= 1e-10


# ---------------------------------------------------------------- the checker


@pytest.mark.parametrize(("point_group", "group"), [("C4", "p4"), ("D4", "p4m")])
def test_checker_certifies_p4_swin_with_patch_anchoring(point_group: str, group: str) -> None:
    """The registry default (``anchoring="centre"``) is certified in ``test_centre_anchor.py``."""
    x = torch.randn(2, 1, SIZE, SIZE)
    model = create("p4_swin", point_group=point_group, **PATCH_SMALL)
    cert = certify(model, x, group, verify=True)
    assert cert.verdict == Status.INVARIANT, cert.reason


@pytest.mark.parametrize("anchoring", ["centre", "mass", "patch"])
def test_contract_covers_p4_translations_and_turns_only(anchoring: str) -> None:
    model = create("p4_swin", point_group="D4", anchoring=anchoring)
    for group in (
        p4(SIZE),
        p4m(SIZE),
        TorusTranslations(SIZE, SIZE),
        CyclicGroup(4),
        DihedralGroup(4),
    ):
        assert model.contract(group).kind == Status.INVARIANT, group.name
    assert model.contract(p4(64)).kind == Status.UNKNOWN
    assert model.contract(TorusTranslations(SIZE, SIZE, stride=2)).kind == Status.UNKNOWN
    assert create("p4_swin", equivariant=False).contract(p4(SIZE)).kind == Status.BROKEN


class _FinerAnchor(torch.nn.Module):
    """An anchor whose period (8 px: the first stage's windows) is finer than the coarsest window's."""

    def __init__(self) -> None:
        super().__init__()
        self.anchor = PatchGridAnchor(8, SIZE)
        self.body = GroupSwin(absolute_position=False, **SMALL)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(self.anchor(x).output)


def test_the_period_must_be_the_coarsest_window() -> None:
    """Soundness: with the first stage's period the second stage's windows are not anchored;
    the checker does not certify it, and it is not invariant."""
    torch.manual_seed(0)
    model = _FinerAnchor().eval()
    x = torch.randn(2, 1, SIZE, SIZE)
    assert certify(model, x, "p4").verdict != Status.INVARIANT
    body = model.body.double()
    y = _digit()
    with torch.no_grad():
        ref = body(y)
        moved = body(torch.roll(y, (8, 0), (-2, -1)))  # a shift by the finer period
    assert float((moved - ref).abs().max() / ref.abs().max()) > 1e-4
    report = equivariance_error(
        model.double(),
        x.double(),
        p4(SIZE),
        elements=[((8, 0), 0), ((3, 5), 1), ((8, 8), 2)],
        input_type=GridField(),
        output_type=InvariantField(),
    )
    assert report.max_error > 1e-4


def test_unanchored_group_swin_breaks_under_shifts_and_the_baseline_everywhere() -> None:
    x = _digit()
    group_swin = create("group_swin", **SMALL).double().eval()
    baseline = create("p4_swin", equivariant=False, **SMALL).double().eval()
    with torch.no_grad():
        for model, moves in (
            (group_swin, [lambda v: torch.roll(v, (1, 0), (-2, -1))]),
            (
                baseline,
                [
                    lambda v: torch.roll(v, (1, 0), (-2, -1)),
                    lambda v: torch.rot90(v, 1, (-2, -1)),
                ],
            ),
        ):
            y = model(x)
            for move in moves:
                assert float((model(move(x)) - y).abs().max() / y.abs().max()) > 1e-4
    cert = certify(create("p4_swin", equivariant=False, **SMALL), x.float(), "p4")
    assert cert.verdict == Status.BROKEN and "embed" in str(cert.first_break)
    assert "plain Swin baseline" in str(
        create("p4_swin", equivariant=False).contract(p4(SIZE)).reason
    )
    assert certify(create("group_swin", **SMALL), x.float(), "p4").verdict != Status.INVARIANT
