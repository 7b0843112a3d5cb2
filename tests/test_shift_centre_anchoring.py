"""``anchoring="centre"`` and ``anchoring="mass"`` for the shift-equivariant ViT, Swin and Twins.

A ``CentreAnchor`` (the blurred maximum) or a ``CentreOfMassAnchor`` (the centre of mass,
the registry presets' choice) anchors the whole translation first, so the body can be the baseline's
(zero padding, clipped bias: tokens know where they sit). Evidence: exact invariance under
every circular shift (float64, every shift of a 16×16 torus for the ViT and sampled shifts
of the 32×32 presets), float32 within DESIGN's tolerance, certified by the checker, the
declared contract, the body is the baseline's, and bad configurations raise clear errors.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from groupattn import ConfigurationError
from groupattn.check import certify
from groupattn.contracts import Status
from groupattn.groups import TorusTranslations
from groupattn.models import ShiftSwin, ShiftTwins, ShiftViT, create
from groupattn.models._shift_common import AnchorOutput

SIZE = 32
MODELS = ("vit", "swin", "twins")
ANCHORINGS = ("centre", "mass")


def _digit(dtype: torch.dtype = torch.float64) -> torch.Tensor:
    from groupattn.data import load_digits

    return load_digits().test_images[3:5].to(dtype)


def _max_relative_error(
    model: torch.nn.Module, x: torch.Tensor, shifts: list[tuple[int, int]]
) -> float:
    with torch.no_grad():
        reference = model(x)
        moved = torch.cat([torch.roll(x, s, (-2, -1)) for s in shifts])
        out = model(moved).reshape(len(shifts), *reference.shape)
    return float((out - reference).abs().amax() / reference.abs().amax())


@pytest.mark.parametrize("anchoring", ANCHORINGS)
@pytest.mark.parametrize("name", MODELS)
def test_invariant_under_sampled_shifts_in_float64(name: str, anchoring: str) -> None:
    torch.manual_seed(0)
    model = create(name, anchoring=anchoring).double().eval()
    gen = torch.Generator().manual_seed(1)
    shifts = [tuple(int(v) for v in s) for s in torch.randint(0, SIZE, (24, 2), generator=gen)]
    assert _max_relative_error(model, _digit(), shifts) <= 1e-10


@pytest.mark.parametrize("anchoring", ANCHORINGS)
def test_vit_is_invariant_under_every_shift_of_a_small_torus(anchoring: str) -> None:
    torch.manual_seed(0)
    model = (
        ShiftViT(image_size=16, patch_size=4, dim=8, depth=1, anchoring=anchoring)  # type: ignore[arg-type]
        .double()
        .eval()
    )
    x = torch.nn.functional.interpolate(_digit(), size=(16, 16), mode="bilinear")
    shifts = [(a, b) for a in range(16) for b in range(16)]
    assert _max_relative_error(model, x, shifts) <= 1e-10


@settings(max_examples=10)
@given(
    seed=st.integers(0, 2**16),
    dy=st.integers(0, SIZE - 1),
    dx=st.integers(0, SIZE - 1),
    anchoring=st.sampled_from(ANCHORINGS),
)
def test_float32_within_tolerance(seed: int, dy: int, dx: int, anchoring: str) -> None:
    torch.manual_seed(seed)
    model = create("vit", anchoring=anchoring).eval()
    x = _digit(torch.float32) + 0.01 * torch.rand(
        2, 1, SIZE, SIZE, generator=torch.Generator().manual_seed(seed)
    )
    assert _max_relative_error(model, x, [(dy, dx)]) <= 1e-5


@pytest.mark.parametrize("anchoring", ANCHORINGS)
@pytest.mark.parametrize("name", MODELS)
def test_certified_and_declared_invariant(name: str, anchoring: str) -> None:
    torch.manual_seed(0)
    model = create(name, anchoring=anchoring)
    cert = certify(model, torch.rand(2, 1, SIZE, SIZE), "translations")
    assert cert.verdict == Status.INVARIANT, cert.reason
    assert model.contract(TorusTranslations(SIZE, SIZE)).kind == Status.INVARIANT


@pytest.mark.parametrize("anchoring", ANCHORINGS)
@pytest.mark.parametrize("name", MODELS)
def test_the_body_is_the_baselines(name: str, anchoring: str) -> None:
    torch.manual_seed(0)
    anchored = create(name, anchoring=anchoring)
    torch.manual_seed(0)
    baseline = create(name, equivariant=False)
    children = list(anchored.named_children())
    assert isinstance(children[0][1], AnchorOutput)
    assert [(n, type(m)) for n, m in children[1:]] == [
        (n, type(m)) for n, m in baseline.named_children()
    ]
    assert not anchored.patch_embed.anchored
    # same weights: the anchored model is the baseline on centred images
    anchored.anchor = torch.nn.Identity()  # type: ignore[assignment]
    x = torch.rand(2, 1, SIZE, SIZE)
    with torch.no_grad():
        assert torch.equal(anchored(x), baseline(x))


@pytest.mark.parametrize("anchoring", ANCHORINGS)
def test_the_baseline_is_unchanged_by_the_option(anchoring: str) -> None:
    baseline = create("vit", equivariant=False, anchoring=anchoring)
    assert not any(isinstance(m, AnchorOutput) for m in baseline.modules())
    assert certify(baseline, torch.rand(2, 1, SIZE, SIZE), "translations").verdict == Status.BROKEN


@pytest.mark.parametrize(
    ("cls", "kwargs"),
    [
        (ShiftViT, {"image_size": (32, 16)}),
        (ShiftSwin, {"image_size": (32, 16)}),
        (ShiftTwins, {"image_size": (32, 16)}),
    ],
)
def test_non_square_images_are_refused(cls: type, kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError, match=f"{cls.__name__}.*square image with an even side"):
        cls(anchoring="centre", **kwargs)
    with pytest.raises(
        ConfigurationError, match=f"{cls.__name__}.*square image for anchoring='mass'"
    ):
        cls(anchoring="mass", **kwargs)


def test_an_odd_side_is_refused_by_the_centre_anchor_and_taken_by_the_mass_anchor() -> None:
    """A 21x21 ViT (3x3 tokens of 7 pixels): ``"centre"`` needs an even side,
    ``"mass"`` anchors any side, invariant under sampled shifts (float64)."""
    with pytest.raises(ConfigurationError, match=r"ShiftViT.*even side"):
        ShiftViT(anchoring="centre", image_size=21, patch_size=7)
    torch.manual_seed(0)
    model = ShiftViT(anchoring="mass", image_size=21, patch_size=7, dim=8, depth=1).double().eval()
    x = torch.rand(2, 1, 21, 21, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    shifts = [(a, b) for a in range(0, 21, 4) for b in range(0, 21, 5)]
    assert _max_relative_error(model, x, shifts) <= 1e-10


def test_unknown_anchoring_names_the_model() -> None:
    with pytest.raises(
        ConfigurationError,
        match="ShiftViT: expected anchoring 'input', 'centre' or 'mass', got 'layers'",
    ):
        ShiftViT(anchoring="layers")  # type: ignore[arg-type]


@pytest.mark.parametrize("anchoring", ANCHORINGS)
@pytest.mark.parametrize("name", ["swin", "twins"])
def test_invariant_under_every_shift_of_the_preset(name: str, anchoring: str) -> None:
    """All 1,024 circular shifts of the 32x32 torus (float64)."""
    torch.manual_seed(0)
    model = create(name, anchoring=anchoring).double().eval()
    shifts = [(a, b) for a in range(SIZE) for b in range(SIZE)]
    assert _max_relative_error(model, _digit()[:1], shifts) <= 1e-10


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_exact_in_half_precision(name: str, dtype: torch.dtype) -> None:
    """The anchor decides in float64 on exactly moved values: the body sees the same image,
    so the logits of shifted copies are equal bit for bit (the registry presets, each in
    bf16, fp16 and float32)."""
    torch.manual_seed(0)
    model = create(name).to(dtype).eval()
    x = _digit(dtype)
    gen = torch.Generator().manual_seed(2)
    shifts = [tuple(int(v) for v in s) for s in torch.randint(0, SIZE, (16, 2), generator=gen)]
    with torch.no_grad():
        reference = model(x)
        for s in shifts:
            assert torch.equal(model(torch.roll(x, s, (-2, -1))), reference), s


def test_the_registry_preset_sizes_the_clipped_bias_before_building_it() -> None:
    from groupattn.models._vit import CENTRE_MAX_TOKENS

    assert create("vit").anchoring == "mass"
    assert (256 // 4) ** 2 == CENTRE_MAX_TOKENS
    assert create("vit", image_size=256, dim=8, depth=1).anchoring == "mass"
    assert create("vit", image_size=260, dim=8, depth=1).anchoring == "input"  # 65 x 65 tokens
    assert create("vit", image_size=30, patch_size=3).anchoring == "mass"  # 100 tokens
    assert create("vit", image_size=31, patch_size=1, dim=8, depth=1).anchoring == "mass"  # odd
    assert create("vit", image_size=65, patch_size=1, dim=8, depth=1).anchoring == "input"


@pytest.mark.parametrize("name", MODELS)
def test_the_registry_presets_anchor_the_whole_translation_where_it_fits(name: str) -> None:
    """Square images (an int or an (H, W) pair): the centre-of-mass anchoring; anything
    else: the literature's input anchoring. The classes keep the input anchoring as their
    default; ``anchoring="centre"`` keeps the p4 models' wide blur."""
    from groupattn.canonical import CentreAnchor, CentreOfMassAnchor

    model = create(name)
    assert model.anchoring == "mass"
    assert type(model.anchor.canonicalizer) is CentreOfMassAnchor
    assert model.anchor.canonicalizer.image_size == SIZE
    anchor = create(name, anchoring="centre").anchor.canonicalizer
    assert type(anchor) is CentreAnchor
    assert anchor.sigma == pytest.approx(0.3 * SIZE) and anchor.window == 2
    assert create(name, image_size=(SIZE, SIZE)).anchoring == "mass"
    kwargs = {"dim": 8, "depth": 1} if name == "vit" else {}
    assert create(name, image_size=(SIZE, SIZE // 2), **kwargs).anchoring == "input"
    assert create(name, anchoring="input").anchoring == "input"  # an explicit choice wins
    cls = {"vit": ShiftViT, "swin": ShiftSwin, "twins": ShiftTwins}[name]
    assert cls().anchoring == "input"
