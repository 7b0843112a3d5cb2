"""Shift-equivariant ViT, Swin and Twins: exact invariance to circular shifts, baselines that break."""

from __future__ import annotations

from collections import OrderedDict

import pytest
import torch
import torch.fx
from torch import nn

from groupattn.actions import GridField, TokenField
from groupattn.contracts import Status
from groupattn.data import load_digits
from groupattn.groups import GroupError, TorusTranslations
from groupattn.models import ShiftSwin, ShiftTwins, ShiftViT, create, get_spec, list_models
from groupattn.nn import chain_contract
from groupattn.testing import default_tolerance, equivariance_error

NAMES = ["vit", "swin", "twins"]
IMAGE = TorusTranslations(32, 32)


def _all_shifts(image: torch.Tensor) -> torch.Tensor:
    """All 1024 circular shifts of one ``(1, C, 32, 32)`` image as one batch (exact copies)."""
    shifts = [torch.roll(image, (dy, dx), dims=(2, 3)) for dy in range(32) for dx in range(32)]
    return torch.cat(shifts)


def _max_relative_spread(logits: torch.Tensor) -> float:
    reference = logits[:1].double()
    return ((logits.double() - reference).abs().max() / reference.abs().max()).item()


@pytest.mark.parametrize(
    ("name", "anchoring"),
    [(name, anchoring) for name in NAMES for anchoring in ("centre", "input")],
)
def test_equivariant_models_are_invariant_under_all_1024_shifts(name: str, anchoring: str) -> None:
    model = create(name, anchoring=anchoring).eval()
    contract = model.contract(IMAGE)
    assert contract.kind == Status.INVARIANT and contract.input_type == GridField()
    image = torch.randn(1, 1, 32, 32)
    with torch.no_grad():
        logits = model(_all_shifts(image))
    assert logits.shape == (1024, 10)
    assert _max_relative_spread(logits) <= default_tolerance(torch.float32)


@pytest.mark.parametrize("name", NAMES)
def test_baselines_break_and_name_the_first_offending_part(name: str) -> None:
    model = create(name, equivariant=False).eval()
    contract = model.contract(IMAGE)
    assert contract.kind == Status.BROKEN
    assert (contract.reason or "").startswith(
        "patch_embed: strided patch embedding without anchoring"
    )
    image = torch.randn(1, 1, 32, 32)
    shifts = torch.cat(
        [torch.roll(image, s, dims=(2, 3)) for s in [(0, 0), (1, 0), (0, 1), (3, 5)]]
    )
    with torch.no_grad():
        assert _max_relative_spread(model(shifts)) > 1e-3


def test_invariance_on_the_bundled_digits_and_the_l2_tie_pitfall() -> None:
    digits = load_digits(limit=200).train_images[:48]
    shifts = [(1, 0), (0, 1), (3, 5), (13, 30)]
    for name in NAMES:
        model = create(name).eval()  # default anchor_norm="l4"
        with torch.no_grad():
            logits = model(digits)
            for shift in shifts:
                moved = model(torch.roll(digits, shift, dims=(2, 3)))
                assert ((moved - logits).abs().amax(1) / logits.abs().amax(1)).max() <= 1e-5, (
                    name,
                    shift,
                )
    # The digits are bilinear x2 zooms: their stride-2 polyphase L2 norms tie exactly, so an
    # L2-anchored stride-2 patch embedding picks phases by rounding noise and breaks.
    model = create("swin", anchor_norm="l2", anchoring="layers").eval()
    with torch.no_grad():
        logits = model(digits)
        worst = max(
            (model(torch.roll(digits, s, dims=(2, 3))) - logits).abs().max().item() for s in shifts
        )
    assert worst / logits.abs().max().item() > 1e-3


@pytest.mark.parametrize("name", ["swin", "twins"])
def test_input_anchoring_is_one_smoothed_anchor_and_plain_layers(name: str) -> None:
    strided = ("WindowAttention", "PatchMerging", "SpatialReductionAttention")
    model = create(name, anchoring="input")
    assert (
        model.patch_embed.anchored and model.patch_embed.anchor_stride == 16
    )  # lcm of the 8 and 16 px periods
    assert not any(m.anchored for m in model.modules() if type(m).__name__ in strided)
    layers = create(name, anchoring="layers")
    assert layers.patch_embed.anchor_stride == 2
    assert all(m.anchored for m in layers.modules() if type(m).__name__ in strided)
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in layers.parameters())
    # the smoothed score moves with the image bit for bit
    digits = load_digits(limit=64).train_images[:16]
    score = model.patch_embed.anchor_score(digits)
    moved = model.patch_embed.anchor_score(torch.roll(digits, (5, 11), dims=(2, 3)))
    assert torch.equal(moved, torch.roll(score, (5, 11), dims=(2, 3)))
    # per-layer anchoring is exact too
    layers.eval()
    with torch.no_grad():
        logits = layers(digits)
        for shift in [(1, 0), (7, 13)]:
            shifted = layers(torch.roll(digits, shift, dims=(2, 3)))
            assert ((shifted - logits).abs().amax(1) / logits.abs().amax(1)).max() <= 1e-5
    with pytest.raises(
        GroupError,
        match="expected anchoring 'input', 'layers', 'centre' or 'mass', got 'sometimes'",
    ):
        create(name, anchoring="sometimes")


def test_models_in_float64_meet_the_float64_tolerance() -> None:
    image = torch.randn(1, 1, 32, 32, dtype=torch.float64)
    shifts = torch.cat(
        [torch.roll(image, s, dims=(2, 3)) for s in [(0, 0), (1, 0), (0, 1), (5, 3), (31, 17)]]
    )
    for name in NAMES:
        model = create(name).double().eval()
        with torch.no_grad():
            assert _max_relative_spread(model(shifts)) <= default_tolerance(torch.float64), name


def test_vit_variants_pooling_and_positional_encodings() -> None:
    image = torch.randn(1, 1, 32, 32)
    shifts = torch.cat(
        [torch.roll(image, s, dims=(2, 3)) for s in [(0, 0), (1, 2), (7, 3), (30, 1)]]
    )
    for pool in ["attention", "cls"]:
        model = create("vit", anchoring="input", pool=pool).eval()
        assert model.contract(IMAGE).kind == Status.INVARIANT
        with torch.no_grad():
            assert _max_relative_spread(model(shifts)) <= 1e-5, pool
    absolute = create("vit", anchoring="input", positional="absolute").eval()
    nn.init.normal_(absolute.positional.embedding)
    contract = absolute.contract(IMAGE)
    assert contract.kind == Status.BROKEN
    assert (
        contract.reason == "positional: absolute positional encoding is not translation-invariant"
    )
    with torch.no_grad():
        assert _max_relative_spread(absolute(shifts)) > 1e-3
    clipped = create("vit", anchoring="input", bias="clipped")
    assert "global attention bias: clipped" in (clipped.contract(IMAGE).reason or "")


class _Features(nn.Sequential):
    """A prefix of a model, with the composed contract of its parts."""

    def __init__(self, parts: list[tuple[str, nn.Module]]) -> None:
        super().__init__(OrderedDict(parts))

    def contract(self, group, input_type=None):
        return chain_contract(list(self.named_children()), group, input_type)


@pytest.mark.parametrize(
    ("name", "options"),
    [
        ("vit", {"anchoring": "input"}),
        ("swin", {"anchoring": "input"}),
        ("twins", {"anchoring": "input"}),
        ("swin", {"anchoring": "layers"}),
        ("twins", {"anchoring": "layers"}),
    ],
)
def test_feature_maps_move_with_the_input_up_to_the_frame(name: str, options: dict) -> None:
    model = create(name, **options).eval()
    features = _Features(list(model.named_children())[:-3])  # everything before norm, pool, head
    contract = features.contract(IMAGE)
    assert contract.kind == Status.CANONICALIZING and contract.output_type == TokenField(
        model.pool.grid
    )
    # anchored per layer (or with the patch size): the frame is any shift of the final grid;
    # anchored once at the input with stride S: a shift by a multiple of S pixels
    h, w = model.pool.grid
    ratio = max(1, model.patch_embed.anchor_stride * h // 32)  # S over the final token size
    assert contract.output_group == TorusTranslations(h // ratio, w // ratio, stride=ratio)
    assert (ratio == 1) == (name == "vit" or options.get("anchoring") == "layers")
    report = equivariance_error(
        features, torch.randn(2, 1, 32, 32), IMAGE, elements=[(1, 0), (0, 1), (3, 7), (16, 31)]
    )
    assert report.max_error <= 1e-5


def test_registry_sizes_and_presets() -> None:
    assert {"vit", "swin", "twins"} <= set(list_models())
    for name, cls in [("vit", ShiftViT), ("swin", ShiftSwin), ("twins", ShiftTwins)]:
        spec = get_spec(name)
        assert spec.group == "translations" and spec.input_shape == (1, 32, 32)
        equivariant, baseline = create(name), create(name, equivariant=False)
        assert isinstance(equivariant, cls) and equivariant.equivariant and not baseline.equivariant
        n_eq = sum(p.numel() for p in equivariant.parameters())
        n_base = sum(p.numel() for p in baseline.parameters())
        assert abs(n_eq - n_base) <= 0.05 * n_eq, (name, n_eq, n_base)
        assert equivariant(torch.randn(8, 1, 32, 32)).shape == (8, 10)
    assert sum(p.numel() for p in create("swin").parameters()) == sum(
        p.numel() for p in create("swin", equivariant=False).parameters()
    )
    custom = create(
        "swin",
        dims=24,
        depths=(2,),
        num_heads=3,
        window_size=8,
        patch_size=4,
        num_classes=4,
        in_channels=3,
    )
    assert custom(torch.randn(2, 3, 32, 32)).shape == (2, 4)
    assert custom.contract(IMAGE).kind == Status.INVARIANT


def test_model_configuration_and_input_errors() -> None:
    with pytest.raises(
        GroupError, match="WindowAttention: expected a grid divisible by window 3, got 16x16"
    ):
        create("swin", window_size=3)
    with pytest.raises(
        GroupError, match="PatchEmbedding: expected an image size divisible by patch 5, got 32x32"
    ):
        create("vit", anchoring="input", patch_size=5)
    with pytest.raises(GroupError, match="ShiftTwins: expected 2 values of dims"):
        create("twins", dims=(16, 32, 64))
    with pytest.raises(
        GroupError, match="ShiftViT: expected pool 'mean', 'attention' or 'cls', got 'max'"
    ):
        create("vit", anchoring="input", pool="max")
    model = create("vit", anchoring="input")
    with pytest.raises(GroupError, match="PatchEmbedding: expected 1 input channels, got 3"):
        model(torch.randn(2, 3, 32, 32))
    with pytest.raises(GroupError, match=r"PatchEmbedding: expected an image batch \(B, C, H, W\)"):
        model(torch.randn(32, 32))


class _LeafTracer(torch.fx.Tracer):
    def is_leaf_module(self, module: nn.Module, qualified_name: str) -> bool:
        if type(module).__module__.startswith("groupattn.") and not isinstance(
            module, ShiftViT | ShiftSwin | ShiftTwins
        ):
            return True
        return super().is_leaf_module(module, qualified_name)


@pytest.mark.parametrize("name", NAMES)
def test_models_trace_with_fx_as_plain_compositions(name: str) -> None:
    model = create(name).eval()
    graph = _LeafTracer().trace(model)
    traced = torch.fx.GraphModule(model, graph)
    x = torch.randn(2, 1, 32, 32)
    with torch.no_grad():
        assert torch.equal(traced(x), model(x))
    called = [node.target for node in graph.nodes if node.op == "call_module"]
    # the registry presets anchor the whole translation first (anchoring="centre")
    assert called[0] == "anchor" and called[-1] == "head"
    graph = _LeafTracer().trace(create(name, anchoring="input").eval())
    called = [node.target for node in graph.nodes if node.op == "call_module"]
    assert called[0] == "patch_embed"


def test_vit_compiles_with_fullgraph() -> None:
    model = create("vit", anchoring="input").eval()
    compiled = torch.compile(model, backend="eager", fullgraph=True)
    x = torch.randn(4, 1, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))
        shifted = compiled(torch.roll(x, (3, 9), dims=(2, 3)))
        torch.testing.assert_close(shifted, model(x), rtol=1e-5, atol=1e-5)
