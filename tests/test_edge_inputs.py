"""Edge inputs: empty and single-sample batches, and inputs of the wrong dtype.

Every registry model (and its baseline) and every public layer with a batch axis
accepts ``B = 0`` (an empty output of the right trailing shape) and ``B = 1`` (in eval
mode the same result as that sample inside a larger batch). Integer and bool inputs
raise :class:`groupattn.DtypeError` naming the module, the expected dtype and the
given one; so does a floating input of another dtype than a model's parameters, unless
autocast is active.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable

import pytest
import torch
from torch import nn

import groupattn
import groupattn.attention as attention
import groupattn.nn as gnn
import groupattn.positional as positional
from groupattn import DtypeError
from groupattn.actions import GSet, RegularRepresentation
from groupattn.canonical import ArgmaxCanonicalizer
from groupattn.groups import CyclicGroup, DihedralGroup, SymmetricGroup
from groupattn.models import create, get_spec, list_models

MODELS = [(name, equivariant) for name in list_models() for equivariant in (True, False)]
MODEL_IDS = [f"{name}-{'equivariant' if eq else 'baseline'}" for name, eq in MODELS]


@pytest.fixture(scope="module")
def built() -> dict[tuple[str, bool], nn.Module]:
    torch.manual_seed(0)
    return {(name, eq): create(name, equivariant=eq).eval() for name, eq in MODELS}


def _images(name: str, batch: int, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(batch, *get_spec(name).input_shape, generator=generator)


@pytest.mark.parametrize(("name", "equivariant"), MODELS, ids=MODEL_IDS)
def test_model_empty_batch_gives_empty_logits(
    built: dict[tuple[str, bool], nn.Module], name: str, equivariant: bool
) -> None:
    model = built[name, equivariant]
    with torch.no_grad():
        classes = model(_images(name, 1)).shape[1]
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error")  # no "degrees of freedom" or reshape warnings either
        out = model(_images(name, 0))
    assert out.shape == (0, classes)
    assert out.dtype == torch.float32


@pytest.mark.parametrize(("name", "equivariant"), MODELS, ids=MODEL_IDS)
def test_model_single_sample_matches_the_same_sample_in_a_batch(
    built: dict[tuple[str, bool], nn.Module], name: str, equivariant: bool
) -> None:
    model = built[name, equivariant]
    batch = _images(name, 3, seed=1)
    with torch.no_grad():
        together = model(batch)
        alone = model(batch[1:2])
    assert alone.shape == (1, together.shape[1])
    torch.testing.assert_close(alone[0], together[1], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.bool])
@pytest.mark.parametrize(("name", "equivariant"), MODELS, ids=MODEL_IDS)
def test_model_refuses_integer_and_bool_input(
    built: dict[tuple[str, bool], nn.Module], name: str, equivariant: bool, dtype: torch.dtype
) -> None:
    model = built[name, equivariant]
    x = torch.ones(2, *get_spec(name).input_shape, dtype=dtype)
    cls = type(model).__name__
    with pytest.raises(
        DtypeError, match=rf"{cls}: expected a floating-point input \(float32, .*\), got {dtype}"
    ):
        model(x)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
@pytest.mark.parametrize(("name", "equivariant"), MODELS, ids=MODEL_IDS)
def test_model_refuses_another_floating_dtype_outside_autocast(
    built: dict[tuple[str, bool], nn.Module], name: str, equivariant: bool, dtype: torch.dtype
) -> None:
    model = built[name, equivariant]
    cls = type(model).__name__
    with pytest.raises(
        DtypeError, match=rf"{cls}: expected an input of dtype torch.float32 .*, got {dtype}"
    ):
        model(_images(name, 2).to(dtype))


@pytest.mark.parametrize("name", list_models())
def test_model_accepts_another_floating_dtype_under_autocast(
    built: dict[tuple[str, bool], nn.Module], name: str
) -> None:
    model = built[name, True]
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(_images(name, 1).bfloat16())
    assert out.shape[0] == 1 and torch.isfinite(out.float()).all()


def test_model_in_float64_takes_float64() -> None:
    torch.manual_seed(0)
    model = create("vit").double().eval()
    with torch.no_grad():
        assert model(_images("vit", 1).double()).dtype == torch.float64
    with pytest.raises(DtypeError, match=r"expected an input of dtype torch\.float64"):
        model(_images("vit", 1))


def test_dtype_error_is_a_type_error_and_a_groupattn_error() -> None:
    assert issubclass(DtypeError, TypeError)
    assert issubclass(DtypeError, groupattn.GroupattnError)


def test_models_still_trace_and_check_shapes_with_the_hook() -> None:
    model = create("vit")
    with pytest.raises(
        groupattn.ShapeError, match="PatchEmbedding: expected 1 input channels, got 3"
    ):
        model(torch.randn(2, 3, 32, 32))
    with pytest.raises(groupattn.ShapeError, match="ShiftViT: expected an image batch tensor"):
        model([1.0, 2.0])  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- layers
def _gset() -> GSet:
    return GSet.natural(SymmetricGroup(4))


def _tokens(n: int, c: int) -> Callable[[int], torch.Tensor]:
    return lambda b: torch.randn(b, n, c)


def _images_of(c: int, h: int, w: int | None = None) -> Callable[[int], torch.Tensor]:
    return lambda b: torch.randn(b, c, h, h if w is None else w)


def _lifted(c: int, g: int, h: int) -> Callable[[int], torch.Tensor]:
    return lambda b: torch.randn(b, c, g, h, h)


def _small_cnn(channels: int = 2, classes: int = 3) -> nn.Module:
    """A plain (non-equivariant) CNN for the backbone wrappers: ``(B, C, 6, 6) → (B, classes)``."""
    return nn.Sequential(
        nn.Conv2d(channels, 4, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(36, classes),
    )


def _scorer(channels: int = 2) -> nn.Module:
    """A small learned score: ``(N, C, 6, 6) → (N, 1)``."""
    return nn.Sequential(nn.Conv2d(channels, 2, 3), nn.Tanh(), nn.Flatten(), nn.Linear(32, 1))


#: ``(name, build, input of batch size b)`` for every public layer with a batch axis.
LAYERS: list[tuple[str, Callable[[], nn.Module], Callable[[int], torch.Tensor]]] = [
    ("AttentionPooling", lambda: attention.AttentionPooling(8, 2, (4, 4)), _tokens(16, 8)),
    ("GlobalSelfAttention", lambda: attention.GlobalSelfAttention(8, 2, (4, 4)), _tokens(16, 8)),
    (
        "GlobalSelfAttention-prefix",
        lambda: attention.GlobalSelfAttention(8, 2, (4, 4), bias="clipped", prefix=1),
        _tokens(17, 8),
    ),
    (
        "GroupSelfAttention",
        lambda: attention.GroupSelfAttention(4, 4, "C4", num_heads=2, encoding="table", grid=4),
        _lifted(4, 4, 4),
    ),
    (
        "GroupSelfAttention-local",
        lambda: attention.GroupSelfAttention(
            4, 4, "D4", num_heads=2, neighbourhood=3, query_position=True
        ),
        _lifted(4, 8, 5),
    ),
    (
        "LiftingSelfAttention",
        lambda: attention.LiftingSelfAttention(2, 4, "C4", num_heads=2, encoding="table", grid=5),
        _images_of(2, 5),
    ),
    (
        "LiftingSelfAttention-local",
        lambda: attention.LiftingSelfAttention(2, 4, "C4", num_heads=2, neighbourhood=3),
        _images_of(2, 6),
    ),
    (  # heads wider than the input: attention over the input's channels [x; 1]
        "LiftingSelfAttention-local-wide",
        lambda: attention.LiftingSelfAttention(1, 12, "C4", num_heads=2, neighbourhood=3),
        _images_of(1, 6),
    ),
    (
        "LiftingSelfAttention-local-query",
        lambda: attention.LiftingSelfAttention(
            2, 4, "C4", num_heads=2, neighbourhood=3, query_position=True
        ),
        _images_of(2, 6),
    ),
    ("MeanPooling", lambda: attention.MeanPooling((4, 4)), _tokens(16, 8)),
    ("MeanPooling-any", lambda: attention.MeanPooling(), _tokens(5, 8)),
    ("OrbitalAttention", lambda: attention.OrbitalAttention(8, 2, _gset()), _tokens(4, 8)),
    (
        "OrbitalAttention-channels",
        lambda: attention.OrbitalAttention(
            6, 2, GSet.natural(SymmetricGroup(3)), channels=RegularRepresentation(SymmetricGroup(3))
        ),
        _tokens(3, 6),
    ),
    (
        "SpatialReductionAttention",
        lambda: attention.SpatialReductionAttention(8, 2, (4, 4), 2),
        _tokens(16, 8),
    ),
    (
        "WindowAttention",
        lambda: attention.WindowAttention(8, 2, (4, 4), 2, shift=1),
        _tokens(16, 8),
    ),
    (
        "WindowAttention-plain",
        lambda: attention.WindowAttention(8, 2, (4, 4), 2, anchored=False, pre_norm=True),
        _tokens(16, 8),
    ),
    ("MLP", lambda: gnn.MLP(8, 16), _tokens(16, 8)),
    ("ClassToken", lambda: gnn.ClassToken(8, (4, 4)), _tokens(16, 8)),
    ("ClassTokenReadout", lambda: gnn.ClassTokenReadout((4, 4)), _tokens(17, 8)),
    (
        "GroupBlock",
        lambda: gnn.GroupBlock(4, "C4", num_heads=2, neighbourhood=3),
        _lifted(4, 4, 5),
    ),
    ("GroupGlobalPool", lambda: gnn.GroupGlobalPool("C4"), _lifted(4, 4, 4)),
    ("OrbitPooledLinear", lambda: gnn.OrbitPooledLinear(4, 5, "D4"), _lifted(4, 8, 4)),
    (
        "OrbitPooledLinear-mean",
        lambda: gnn.OrbitPooledLinear(4, 3, "C4", spatial="mean", bias=False),
        _lifted(4, 4, 5),
    ),
    ("GroupLayerNorm", lambda: gnn.GroupLayerNorm(4, "D4"), _lifted(4, 8, 4)),
    ("GroupMLP", lambda: gnn.GroupMLP(4, 8, "C4", out_dim=6), _lifted(4, 4, 4)),
    ("GroupPooling", lambda: gnn.GroupPooling("C4", "mean"), _lifted(4, 4, 4)),
    ("LiftedAvgPool", lambda: gnn.LiftedAvgPool("C4", 2), _lifted(4, 4, 4)),
    (
        "LiftedPatchEmbedding",
        lambda: gnn.LiftedPatchEmbedding(2, 4, 2, "D4", kernel_size=4),
        _images_of(2, 8),
    ),
    (
        "LiftedPolyphaseDownsample",
        lambda: gnn.LiftedPolyphaseDownsample("C4", 2),
        _lifted(4, 4, 4),
    ),
    ("LiftingConvolution", lambda: gnn.LiftingConvolution(2, 4, 3, "C4"), _images_of(2, 5)),
    (
        "GroupConvolution",
        lambda: gnn.GroupConvolution(2, 3, 3, "C4", dilation=2),
        _lifted(2, 4, 5),
    ),
    (
        "GroupWindowAttention",
        lambda: attention.GroupWindowAttention(4, "C4", num_heads=2, window_size=2, shift=1),
        _lifted(4, 4, 4),
    ),
    (
        "GroupWindowBlock",
        lambda: gnn.GroupWindowBlock(4, "D4", num_heads=2, window_size=2),
        _lifted(4, 8, 4),
    ),
    ("GroupPatchMerging", lambda: gnn.GroupPatchMerging(4, 6, "C4"), _lifted(4, 4, 4)),
    ("LiftedUpsample", lambda: gnn.LiftedUpsample("C4", 2), _lifted(4, 4, 4)),
    ("PatchEmbedding", lambda: gnn.PatchEmbedding(2, 8, 2, (8, 8)), _images_of(2, 8)),
    (
        "PatchEmbedding-smooth",
        lambda: gnn.PatchEmbedding(2, 8, 2, (8, 8), anchor_stride=4, anchor_sigma=1.0),
        _images_of(2, 8),
    ),
    ("PatchMerging", lambda: gnn.PatchMerging(8, 16, (4, 4)), _tokens(16, 8)),
    ("SymmetricConvStem", lambda: gnn.SymmetricConvStem(2, 4), _images_of(2, 5)),
    (
        "TransformerBlock",
        lambda: gnn.TransformerBlock(8, attention.GlobalSelfAttention(8, 2, (4, 4))),
        _tokens(16, 8),
    ),
    (
        "AbsolutePositionalEncoding",
        lambda: positional.AbsolutePositionalEncoding(8, (4, 4)),
        _tokens(16, 8),
    ),
    (
        "ConvPositionalEncoding",
        lambda: positional.ConvPositionalEncoding(8, (4, 4), prefix=1),
        _tokens(17, 8),
    ),
    (
        "LiftedAbsolutePositionalEncoding",
        lambda: positional.LiftedAbsolutePositionalEncoding(4, "C4", 4),
        _lifted(4, 4, 4),
    ),
    (
        "LiftedOrbitPositionalEncoding",
        lambda: positional.LiftedOrbitPositionalEncoding(4, "C4", 4),
        _lifted(4, 4, 4),
    ),
    (
        "SinusoidalPositionalEncoding",
        lambda: positional.SinusoidalPositionalEncoding(8, (4, 4)),
        _tokens(16, 8),
    ),
    (
        "RotarySelfAttention",
        lambda: positional.RotarySelfAttention(8, 2, (4, 4), mode="torus"),
        _tokens(16, 8),
    ),
    ("FrameAveraging", lambda: gnn.FrameAveraging(_small_cnn(), CyclicGroup(4)), _images_of(2, 6)),
    (
        "FrameAveraging-equivariant",
        lambda: gnn.FrameAveraging(
            nn.Conv2d(2, 3, 3, padding=1), DihedralGroup(4), output="equivariant"
        ),
        _images_of(2, 5),
    ),
    (
        "Canonicalized",
        lambda: gnn.Canonicalized(
            _small_cnn(),
            ArgmaxCanonicalizer(CyclicGroup(4), gnn.norm_score(2), output_group=CyclicGroup(1)),
        ),
        _images_of(2, 6),
    ),
    (
        "Canonicalized-learned",
        lambda: gnn.Canonicalized(
            _small_cnn(), gnn.LearnedCanonicalizer(DihedralGroup(4), _scorer())
        ),
        _images_of(2, 6),
    ),
    (
        "LearnedCanonicalizer",
        lambda: gnn.LearnedCanonicalizer(CyclicGroup(4), _scorer()),
        _images_of(2, 6),
    ),
]
LAYER_IDS = [name for name, _, _ in LAYERS]

#: Public modules without a batch axis (tables and biases: ``forward()`` or a geometry).
NO_BATCH_AXIS = {
    "EquivariantModule",
    "CirculantRelativeBias",
    "ClippedRelativeBias",
    "ContinuousGroupEncoding",
    "ContinuousOrbitalBias",
    "GroupPositionalEncoding",
    "IndexedTable",
    "OrbitalBias",
    "OrbitalTableEncoding",
    "PairTableBias",
    "PairwiseBias",
    "ALiBiBias",
    "LogSpacedContinuousBias",
    "RotaryPositionalEncoding",  # acts on a (query, key) pair
}


def test_every_public_layer_with_a_batch_axis_is_covered() -> None:
    covered = {name.split("-")[0] for name in LAYER_IDS}
    for package in (attention, gnn, positional):
        for name in package.__all__:
            obj = getattr(package, name)
            if inspect.isclass(obj) and issubclass(obj, nn.Module) and name not in NO_BATCH_AXIS:
                assert name in covered, f"add {package.__name__}.{name} to LAYERS"


def _outputs(out: object) -> torch.Tensor:
    return out.output if hasattr(out, "output") else out  # type: ignore[no-any-return,union-attr]


#: Empty batches that fail in code outside these layers (to be fixed there); none left.
KNOWN_EMPTY_BATCH_FAILURES: dict[str, str] = {}


@pytest.mark.parametrize(("name", "build", "make"), LAYERS, ids=LAYER_IDS)
def test_layer_empty_batch(
    request: pytest.FixtureRequest,
    name: str,
    build: Callable[[], nn.Module],
    make: Callable[[int], torch.Tensor],
) -> None:
    if name in KNOWN_EMPTY_BATCH_FAILURES:
        reason = KNOWN_EMPTY_BATCH_FAILURES[name]
        request.applymarker(pytest.mark.xfail(reason=reason, raises=RuntimeError))
    torch.manual_seed(0)
    layer = build().eval()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error")
        empty = _outputs(layer(make(0)))
        one = _outputs(layer(make(1)))
    assert empty.shape == (0, *one.shape[1:]), name


@pytest.mark.parametrize(("name", "build", "make"), LAYERS, ids=LAYER_IDS)
def test_layer_single_sample_matches_the_batch(
    name: str, build: Callable[[], nn.Module], make: Callable[[int], torch.Tensor]
) -> None:
    torch.manual_seed(0)
    layer = build().eval()
    batch = make(3)
    with torch.no_grad():
        together = _outputs(layer(batch))
        alone = _outputs(layer(batch[2:3]))
    torch.testing.assert_close(alone[0], together[2], rtol=1e-5, atol=1e-5)


#: Layers without learned weights (pooling, read-out, subsampling): no dtype rule of their own.
UNWEIGHTED = {
    "MeanPooling",
    "MeanPooling-any",
    "ClassTokenReadout",
    "GroupPooling",
    "GroupGlobalPool",
    "LiftedAvgPool",
    "LiftedPolyphaseDownsample",
    "LiftedUpsample",
}
WEIGHTED = [entry for entry in LAYERS if entry[0] not in UNWEIGHTED]


@pytest.mark.parametrize("dtype", [torch.int64, torch.bool])
@pytest.mark.parametrize(("name", "build", "make"), WEIGHTED, ids=[e[0] for e in WEIGHTED])
def test_layer_refuses_integer_and_bool_input(
    name: str,
    build: Callable[[], nn.Module],
    make: Callable[[int], torch.Tensor],
    dtype: torch.dtype,
) -> None:
    layer = build()
    module = type(layer).__name__
    with pytest.raises(
        DtypeError, match=rf"{module}: expected a floating-point input .*, got {dtype}"
    ):
        layer(make(2).to(dtype))
