"""One set of argument names across layers and models; every renamed name is a deprecated alias.

The vocabulary (see the changelog, "Unreleased"): ``dim`` is the feature width of tokens
and lifted fields (``out_dim`` when a layer changes it, ``dims`` per stage),
``in_channels`` the channels of an image entering a layer, ``num_heads`` / ``head_dim``
the heads and their width, ``grid`` the token grid ``(h, w)``, and side lengths are
``patch_size``, ``window_size``, ``kernel_size``, ``image_size``.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

import groupattn
import groupattn.attention as attention
import groupattn.models as models
import groupattn.nn as gnn
import groupattn.positional as positional
from groupattn import ConfigurationError
from groupattn._deprecation import DeprecatedAttribute
from groupattn.actions import GSet
from groupattn.groups import CyclicGroup, SymmetricGroup

#: Every argument name a public layer or model constructor may use.
VOCABULARY = {
    # widths
    "dim",
    "out_dim",
    "dims",
    "in_channels",
    "hidden",
    "head_dim",
    "vector_dim",
    "qk_dim",
    "stem_channels",
    "baseline_dim",
    "encoding_hidden",
    # heads, layout and sizes
    "num_heads",
    "grid",
    "prefix",
    "num_queries",
    "num_points",
    "num_classes",
    "patch_size",
    "window_size",
    "kernel_size",
    "image_size",
    "neighbourhood",
    "reduction",
    "shift",
    "stride",
    "dilation",
    "depth",
    "depths",
    "mlp_ratio",
    "eps",
    # symmetry
    "equivariant",
    "point_group",
    "gset",
    "group",
    "lifting",
    "in_type",
    "out_type",
    "field_type",
    # options
    "bias",
    "bias_init_std",
    "init_std",
    "anchored",
    "anchoring",
    "anchor_norm",
    "anchor_sigma",
    "anchor_stride",
    "anchor_scale",
    "norm",
    "pre_norm",
    "encoding",
    "additive",
    "query_position",
    "invariant_fn",
    "tolerance",
    "padding_mode",
    "mode",
    "spatial",
    "symmetric",
    "pool",
    "positional",
    "embed_bias",
    "embed_kernel",
    "absolute_position",
    "mix_orientations",
    "canonicalize_orientation",
    "stem",
    "stem_dilations",
    "lift_skip",
    "downsample",
    "attention",
    "readout",
    # wrappers of a user's network (groupattn.nn.FrameAveraging, Canonicalized,
    # LearnedCanonicalizer)
    "backbone",
    "scorer",
    "output",
    "output_type",
    "elements",
    "chunk",
    "canonicalizer",
    "fixed_precision",
}

#: Names with one meaning that only these constructors use.
RESTRICTED = {
    # an image → image convolution: PyTorch's Conv2d names
    "out_channels": {"SymmetricConvStem"},
    # the representation carried by the channel axis (as the ``channels`` of a field type)
    "channels": {"OrbitalAttention"},
}

#: The names of groupattn 0.1 that were renamed (kept as deprecated aliases).
OLD_NAMES = {"heads", "patch", "window", "head_channels", "vector_channels", "size"}


def _public_modules() -> list[tuple[str, type[nn.Module]]]:
    out = []
    for package in (attention, gnn, models, positional):
        for name in package.__all__:
            obj = getattr(package, name)
            if inspect.isclass(obj) and issubclass(obj, nn.Module):
                out.append((f"{package.__name__}.{name}", obj))
    return out


PUBLIC = _public_modules()


@pytest.mark.parametrize(("qualname", "cls"), PUBLIC, ids=[q for q, _ in PUBLIC])
def test_constructor_uses_the_vocabulary(qualname: str, cls: type[nn.Module]) -> None:
    parameters = inspect.signature(cls).parameters.values()
    names = [p.name for p in parameters if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    for name in names:
        assert name not in OLD_NAMES, f"{qualname}({name}=…) uses a deprecated name"
        if name in RESTRICTED:
            assert cls.__name__ in RESTRICTED[name], (
                f"{qualname}({name}=…) is reserved for {RESTRICTED[name]}"
            )
        else:
            assert name in VOCABULARY, f"{qualname}({name}=…) is not in the vocabulary"


def test_heads_are_num_heads_everywhere() -> None:
    with_heads = [q for q, cls in PUBLIC if "num_heads" in inspect.signature(cls).parameters]
    assert len(with_heads) >= 15
    for _, cls in PUBLIC:
        assert "heads" not in inspect.signature(cls).parameters


def test_the_two_absolute_encodings_have_distinct_names() -> None:
    assert "AbsolutePositionEmbedding" not in gnn.__all__
    assert positional.AbsolutePositionalEncoding is not positional.LiftedAbsolutePositionalEncoding


# ---------------------------------------------------------------------------- aliases
def _gset() -> GSet:
    return GSet.natural(SymmetricGroup(4))


#: Arguments that build each class with a deprecated alias, by the *new* names (the
#: renamed ones as keywords).
BUILD: dict[Any, tuple[tuple[Any, ...], dict[str, Any]]] = {
    attention.GlobalSelfAttention: ((), dict(dim=8, num_heads=2, grid=(3, 3))),
    attention.WindowAttention: ((), dict(dim=8, num_heads=2, grid=(4, 4), window_size=2)),
    attention.SpatialReductionAttention: ((), dict(dim=8, num_heads=2, grid=(4, 4), reduction=2)),
    attention.AttentionPooling: ((), dict(dim=8, num_heads=2, grid=(3, 3))),
    attention.OrbitalAttention: ((), dict(dim=8, num_heads=2, gset=_gset())),
    attention.GroupSelfAttention: (
        (),
        dict(dim=4, out_dim=6, point_group="C4", num_heads=2, head_dim=3, grid=3, encoding="table"),
    ),
    attention.LiftingSelfAttention: (
        (),
        dict(
            in_channels=1,
            dim=4,
            point_group="C4",
            num_heads=2,
            head_dim=3,
            grid=3,
            encoding="table",
        ),
    ),
    gnn.PatchEmbedding: ((), dict(in_channels=1, dim=8, patch_size=4, image_size=(8, 8))),
    gnn.GroupBlock: (
        (),
        dict(dim=4, point_group="C4", num_heads=2, head_dim=3, grid=3, encoding="table"),
    ),
    gnn.GroupLayerNorm: ((), dict(dim=4, point_group="C4")),
    gnn.GroupMLP: ((), dict(dim=4, hidden=8, point_group="C4", out_dim=6)),
    gnn.LiftedPatchEmbedding: ((), dict(in_channels=1, dim=4, patch_size=2, point_group="C4")),
    gnn.LiftingConvolution: ((), dict(in_channels=1, dim=4, kernel_size=3, point_group="C4")),
    gnn.GroupConvolution: (
        (),
        dict(in_channels=2, dim=4, kernel_size=3, point_group="C4", dilation=2),
    ),
    positional.LiftedAbsolutePositionalEncoding: ((), dict(dim=4, point_group="C4", grid=3)),
    positional.LiftedOrbitPositionalEncoding: ((), dict(dim=4, point_group="C4", grid=3)),
    positional.CirculantRelativeBias: ((), dict(grid=(3, 3), num_heads=2)),
    positional.ClippedRelativeBias: ((), dict(grid=(3, 3), num_heads=2)),
    positional.OrbitalBias: ((), dict(gset=_gset(), num_heads=2)),
    positional.ContinuousOrbitalBias: (
        (),
        dict(gset=_gset(), num_heads=2, invariant_fn=lambda i, j: (i == j).double()),
    ),
    positional.PairwiseBias: ((), dict(num_points=4, num_heads=2)),
    positional.PairTableBias: ((), dict(num_heads=2)),
    positional.GroupPositionalEncoding: ((), dict(num_heads=2, vector_dim=2)),
    positional.ContinuousGroupEncoding: (
        (),
        dict(point_group=CyclicGroup(4), num_heads=2, vector_dim=2),
    ),
    positional.OrbitalTableEncoding: (
        (),
        dict(point_group=CyclicGroup(4), num_heads=2, lifting=False, grid=3, vector_dim=2),
    ),
    models.ShiftViT: ((), dict(patch_size=8, num_heads=2, dim=8, depth=1)),
    models.ShiftSwin: ((), dict(patch_size=2, num_heads=1, window_size=4, dims=8, depths=(1, 1))),
    models.ShiftTwins: ((), dict(patch_size=2, num_heads=1, window_size=4, dims=8, depths=(1, 1))),
    models.GSANet: ((), dict(dim=8, head_dim=4, stem_channels=0, image_size=8)),
    attention.check_heads: ((8,), dict(num_heads=2)),
    attention.make_relative_bias: (("circulant", (3, 3)), dict(num_heads=2)),
    positional.relative_geometry: ((CyclicGroup(4), 5, 5), dict(neighbourhood=3)),
}

ALIASES = [
    (target, old, new)
    for target in BUILD
    for old, new in getattr(
        target.__init__ if inspect.isclass(target) else target, "__renamed_arguments__", {}
    ).items()
]


def test_every_renamed_constructor_is_covered() -> None:
    covered = {target for target, _, _ in ALIASES}
    for _, cls in PUBLIC:
        if getattr(cls.__init__, "__renamed_arguments__", None):
            assert cls in covered, f"add {cls.__name__} to BUILD"
    assert len(ALIASES) >= 30


def _build(target: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    torch.manual_seed(0)
    return target(*args, **kwargs)


@pytest.mark.parametrize(
    ("target", "old", "new"), ALIASES, ids=[f"{t.__name__}-{o}" for t, o, _ in ALIASES]
)
def test_alias_works_and_warns(target: Callable[..., Any], old: str, new: str) -> None:
    args, kwargs = BUILD[target]
    assert new in kwargs, f"give {new} as a keyword in BUILD[{target.__name__}]"
    expected = _build(target, args, kwargs)
    aliased = {old if k == new else k: v for k, v in kwargs.items()}
    name = target.__name__
    with pytest.warns(
        DeprecationWarning, match=rf"{name}: the argument '{old}' is deprecated, use '{new}'"
    ):
        built = _build(target, args, aliased)
    if isinstance(expected, nn.Module):
        assert type(built) is type(expected)
        assert expected.state_dict().keys() == built.state_dict().keys()
        for key, value in expected.state_dict().items():
            assert torch.equal(value, built.state_dict()[key]), key
    with pytest.raises(
        ConfigurationError, match=rf"expected '{new}' or its deprecated alias '{old}', got both"
    ):
        target(*args, **{**kwargs, old: kwargs[new]})


def _attribute_aliases() -> list[tuple[type, str, str]]:
    out = []
    for _, cls in PUBLIC:
        for klass in cls.__mro__:
            for attr, value in vars(klass).items():
                if isinstance(value, DeprecatedAttribute) and (cls, attr, value.new) not in out:
                    out.append((cls, attr, value.new))
    return out


ATTRIBUTES = _attribute_aliases()


@pytest.mark.parametrize(
    ("cls", "old", "new"), ATTRIBUTES, ids=[f"{c.__name__}.{o}" for c, o, _ in ATTRIBUTES]
)
def test_attribute_alias_reads_the_new_attribute_and_warns(cls: type, old: str, new: str) -> None:
    args, kwargs = BUILD[cls]
    module = _build(cls, args, kwargs)
    with pytest.warns(
        DeprecationWarning, match=rf"{cls.__name__}\.{old} is deprecated, use '{new}'"
    ):
        value = getattr(module, old)
    assert value == getattr(module, new)


def test_no_deprecation_warning_with_the_new_names() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        for target, (args, kwargs) in BUILD.items():
            _build(target, args, kwargs)


def test_absolute_position_embedding_alias_warns() -> None:
    with pytest.warns(DeprecationWarning, match="LiftedAbsolutePositionalEncoding"):
        old = gnn.AbsolutePositionEmbedding
    assert old is positional.LiftedAbsolutePositionalEncoding
    with pytest.warns(DeprecationWarning, match="'channels' is deprecated, use 'dim'"):
        layer = old(channels=4, point_group="C4", size=3)
    assert layer.embedding.shape == (4, 4, 3, 3)
    x = torch.randn(2, 4, 4, 3, 3)
    assert torch.equal(layer(x), x + layer.embedding)


@pytest.mark.parametrize(
    ("name", "old", "new", "value"),
    [
        ("vit", "heads", "num_heads", 4),
        ("vit", "patch", "patch_size", 8),
        ("swin", "window", "window_size", 2),
        ("twins", "heads", "num_heads", (2, 2)),
        ("gsa", "channels", "dim", 8),
        ("gsa", "head_channels", "head_dim", 4),
    ],
)
def test_registry_accepts_old_and_new_names(name: str, old: str, new: str, value: Any) -> None:
    torch.manual_seed(0)
    expected = models.create(name, **{new: value})
    torch.manual_seed(0)
    with pytest.warns(
        DeprecationWarning, match=rf"groupattn.models.create\('{name}'\): the argument '{old}'"
    ):
        built = models.create(name, **{old: value})
    assert expected.state_dict().keys() == built.state_dict().keys()
    for key, tensor in expected.state_dict().items():
        assert torch.equal(tensor, built.state_dict()[key]), key
    with pytest.raises(ConfigurationError, match="got both"):
        models.create(name, **{old: value, new: value})


def test_configuration_error_is_still_a_value_error() -> None:
    assert issubclass(groupattn.ConfigurationError, ValueError)
    with pytest.raises(ValueError):
        attention.GlobalSelfAttention(8, num_heads=3, grid=(2, 2))


# ---------------------------------------------------------------------------- group names
def test_one_parser_accepts_every_catalogue_name() -> None:
    from groupattn.groups import builtin_groups, parse_group_name

    for key, group in builtin_groups().items():
        assert parse_group_name(key, (8, 8)) == group, key
        assert parse_group_name(key.upper(), (1, 3, 8, 8)) == group, key


@pytest.mark.parametrize(
    ("name", "shape", "expected"),
    [
        ("translations", (2, 1, 8, 6), "T(8x6)"),
        ("Torus", (8, 6), "T(8x6)"),
        ("p4", (1, 8, 8), "p4(8x8)"),
        ("P4M", (8, 8), "p4m(8x8)"),
        ("C4", None, "C4"),
        ("c8", (8, 8), "C8"),
        ("d6", (8, 6), "D6"),
        ("D1", None, "D1"),
        ("c1", None, "C1"),
        ("trivial", None, "C1"),
        (" z2 ", None, "Z2"),
        ("S5", None, "S5"),
        ("hexagon", None, "hexagon"),
    ],
)
def test_parse_group_name(name: str, shape: tuple[int, ...] | None, expected: str) -> None:
    from groupattn.groups import parse_group_name

    assert parse_group_name(name, shape).name == expected


def test_parse_group_name_errors_list_the_accepted_names() -> None:
    from groupattn import GroupError, ShapeError
    from groupattn.groups import describe_group_names, parse_group_name

    accepted = describe_group_names()
    for name in ("translations", "torus", "p4", "p4m", "c4", "d4", "cN or dN", "petersen"):
        assert name in accepted
    with pytest.raises(
        GroupError, match=r"parse_group_name: expected one of translations, .*, got 'so3'"
    ):
        parse_group_name("so3", (8, 8))
    with pytest.raises(GroupError, match="got 'c0'"):
        parse_group_name("c0")
    with pytest.raises(ShapeError, match=r"expected an input shape \(…, H, W\) for 'p4'"):
        parse_group_name("p4")
    with pytest.raises(ShapeError, match="expected a square grid for p4m, got 8x6"):
        parse_group_name("p4m", (8, 6))
    with pytest.raises(ShapeError, match="expected a square grid for c4, got 8x6"):
        parse_group_name("c4", (8, 6))
    with pytest.raises(ShapeError, match=r"expected an input shape ending in \(H, W\), got \(8,\)"):
        parse_group_name("translations", (8,))


def test_group_from_name_and_resolve_point_group_delegate() -> None:
    from groupattn.attention import resolve_point_group
    from groupattn.groups import CyclicGroup, DihedralGroup, group_from_name, parse_group_name

    assert group_from_name("P4", (1, 1, 8, 8)) == parse_group_name("p4", (8, 8))
    assert group_from_name("c8", (8, 8)) == CyclicGroup(
        8
    )  # every parser name, not only the old five
    with pytest.raises(groupattn.GroupError, match="group_from_name: expected one of translations"):
        group_from_name("so3", (8, 8))
    with pytest.raises(groupattn.GroupError, match="group_from_name: expected a group name"):
        group_from_name(3, (8, 8))  # type: ignore[arg-type]
    assert resolve_point_group("c4") == CyclicGroup(4) and resolve_point_group(
        "D6"
    ) == DihedralGroup(6)
    assert resolve_point_group("trivial") == CyclicGroup(1)
    with pytest.raises(
        groupattn.GroupError, match="MyLayer: expected a point group or a name like 'C4'"
    ):
        resolve_point_group("p4m", "MyLayer")
