"""EquivariantModule: declared field types, the input check they imply, the default contract.

Also the public validation API that replaced the private helpers packages used to import
from each other (``FieldType.check(x, module, channels=...)``, ``check_grid``,
``check_heads``, ``torus_stride``), and a meta-test that no package imports another
package's private ``_check*`` helpers again.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import groupattn
import groupattn.contracts
import groupattn.nn
from groupattn.actions import (
    GridField,
    GSet,
    GSetField,
    InvariantField,
    LiftedField,
    RegularRepresentation,
    SetField,
    TokenField,
    check_grid,
    torus_stride,
)
from groupattn.attention import (
    AttentionPooling,
    GlobalSelfAttention,
    MeanPooling,
    SpatialReductionAttention,
    WindowAttention,
    check_heads,
)
from groupattn.contracts import Contract, EquivariantModule, Status
from groupattn.groups import CyclicGroup, Group, GroupError, SymmetricGroup, TorusTranslations, p4
from groupattn.nn import (
    ClassToken,
    ClassTokenReadout,
    GroupGlobalPool,
    GroupLayerNorm,
    GroupMLP,
    GroupPooling,
    LiftedAvgPool,
    LiftedPolyphaseDownsample,
    OrbitPooledLinear,
    PatchMerging,
)
from groupattn.positional import (
    AbsolutePositionalEncoding,
    ConvPositionalEncoding,
    translation_contract,
)

ROOT = Path(groupattn.__file__).resolve().parent
C4 = CyclicGroup(4)


class _Double(EquivariantModule):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 2 * x


class _Breaks(_Double):
    def breaks_reason(self, group: Group) -> str | None:
        return "it says so"


# ----------------------------------------------------------------------------- where it lives
def test_the_base_class_lives_in_contracts_and_is_reexported_by_nn() -> None:
    assert groupattn.nn.EquivariantModule is groupattn.contracts.EquivariantModule
    assert EquivariantModule.__module__ == "groupattn.contracts._module"
    assert (
        "EquivariantModule" in groupattn.contracts.__all__
        and "EquivariantModule" in groupattn.nn.__all__
    )


# ----------------------------------------------------------------------------- the input check
def test_the_base_class_checks_rank_shape_and_channels_naming_the_module() -> None:
    images = _Double(GridField(), GridField(), in_channels=3)
    assert images(torch.ones(2, 3, 5, 7)).shape == (2, 3, 5, 7)
    with pytest.raises(
        GroupError,
        match=r"^_Double: expected an image batch \(B, C=3, H, W\), got a tensor of shape \(3, 5, 7\)$",
    ):
        images(torch.ones(3, 5, 7))
    with pytest.raises(
        GroupError,
        match=r"^_Double: expected an image batch \(B, C=3, H, W\), got a tensor of shape \(2, 4, 5, 7\)$",
    ):
        images(torch.ones(2, 4, 5, 7))

    tokens = _Double(TokenField((2, 3), prefix=1), TokenField((2, 3), prefix=1), in_channels=4)
    assert tokens(torch.ones(2, 7, 4)).shape == (2, 7, 4)
    expected = r"_Double: expected tokens \(B, N=7, C=4\) over a 2x3 grid with 1 prefix tokens, got a tensor of shape"
    with pytest.raises(GroupError, match=expected + r" \(2, 6, 4\)"):
        tokens(torch.ones(2, 6, 4))
    with pytest.raises(GroupError, match=expected + r" \(2, 7, 5\)"):
        tokens(torch.ones(2, 7, 5))

    lifted = _Double(LiftedField(C4), LiftedField(C4))  # any width
    assert lifted(torch.ones(1, 9, 4, 3, 3)).shape == (1, 9, 4, 3, 3)
    with pytest.raises(
        GroupError,
        match=r"_Double: expected a lifted field \(B, C, \|C4\|=4, H, W\), got a tensor of shape \(1, 9, 2, 3, 3\)",
    ):
        lifted(torch.ones(1, 9, 2, 3, 3))

    gset = GSet.natural(SymmetricGroup(4))
    regular = _Double(
        GSetField(gset, RegularRepresentation(C4)), GSetField(gset, RegularRepresentation(C4))
    )
    with pytest.raises(
        GroupError,
        match=r"_Double: expected tokens \(B, N=4, C=4\) of .*, got a tensor of shape \(1, 4, 3\)",
    ):
        regular(torch.ones(1, 4, 3))


def test_the_check_names_the_module_for_odd_calls() -> None:
    module = _Double(GridField(), GridField())
    with pytest.raises(
        GroupError, match=r"_Double: expected a tensor of type grid\(B,C,H,W\), got list"
    ):
        module([1, 2])  # type: ignore[arg-type]
    with pytest.raises(GroupError, match="_Double: expected an input of type grid"):
        module()
    assert module(x=torch.ones(1, 1, 2, 2)).shape == (1, 1, 2, 2)  # a keyword input is checked too
    with pytest.raises(GroupError, match="_Double: expected an image batch"):
        module(x=torch.ones(1, 2, 2))


def test_constructor_arguments_are_validated() -> None:
    with pytest.raises(GroupError, match="_Double: expected a FieldType as out_type, got 3"):
        _Double(GridField(), 3)  # type: ignore[arg-type]
    for bad in (0, -2, True, 2.0, "3"):
        with pytest.raises(
            GroupError, match=r"_Double: expected in_channels as an int >= 1 or None"
        ):
            _Double(GridField(), GridField(), in_channels=bad)  # type: ignore[arg-type]
    assert _Double(GridField(), GridField(), in_channels=np.int64(3)).in_channels == 3
    text = repr(_Double(GridField(), GridField(), in_channels=3))
    assert "in_type=grid(B,C,H,W)" in text and "in_channels=3" in text


def test_a_users_field_type_without_the_channels_keyword_still_works() -> None:
    class Loose(GridField):
        def check(self, x: torch.Tensor, module: str = "Loose") -> None:  # type: ignore[override]
            if x.dim() != 4:
                raise GroupError(f"{module}: loose check failed")

    module = _Double(Loose(), Loose())
    assert module(torch.ones(1, 1, 2, 2)).shape == (1, 1, 2, 2)
    with pytest.raises(GroupError, match="_Double: loose check failed"):
        module(torch.ones(1, 2, 2))
    with pytest.raises(
        GroupError,
        match=r"_Double: expected an in_type whose check takes the channel width .* got Loose",
    ):
        _Double(Loose(), Loose(), in_channels=3)


# ----------------------------------------------------------------------------- the default contract
def test_the_default_contract_follows_the_declared_types() -> None:
    group = TorusTranslations(4, 4)
    grid = _Double(GridField(), GridField(), group=group)
    assert grid.group == group
    assert grid.contract(group) == Contract.equivariant(GridField(), GridField())
    assert grid.contract(group, GridField()) == Contract.equivariant(GridField(), GridField())
    assert grid.contract(TorusTranslations(2, 2)).kind == Status.UNVERIFIED  # another group
    other = grid.contract(group, TokenField((4, 4)))
    assert other.kind == Status.UNVERIFIED and "expected input type grid(B,C,H,W)" in (
        other.reason or ""
    )
    assert (
        _Double(GridField(), GridField()).contract(group).kind == Status.UNVERIFIED
    )  # no group declared
    assert _Double(GridField(), InvariantField(), group=group).contract(
        group
    ) == Contract.invariant(GridField(), InvariantField())
    broken = _Breaks(GridField(), GridField(), group=group).contract(group)
    assert broken == Contract.breaks("_Breaks: it says so", GridField(), GridField())
    gset = GSet.natural(SymmetricGroup(4))
    field = GSetField(gset)
    assert _Double(field, field).group == gset.group  # taken from the G-set
    assert _Double(field, field).contract(gset.group).kind == Status.EQUIVARIANT
    assert _Double(field, field).contract(gset.group, SetField(4)).kind == Status.UNVERIFIED


# ----------------------------------------------------------------------------- library layers
LAYERS: list[tuple[str, Callable[[], nn.Module], tuple[int, ...], tuple[int, ...], str]] = [
    (
        "AbsolutePositionalEncoding",
        lambda: AbsolutePositionalEncoding(4, (4, 4), prefix=1),
        (2, 17, 4),
        (2, 17, 5),
        r"AbsolutePositionalEncoding: expected tokens \(B, N=17, C=4\) over a 4x4 grid with 1 prefix tokens",
    ),
    (
        "ConvPositionalEncoding",
        lambda: ConvPositionalEncoding(4, (4, 4)),
        (2, 16, 4),
        (2, 15, 4),
        r"ConvPositionalEncoding: expected tokens \(B, N=16, C=4\) over a 4x4 grid",
    ),
    (
        "GlobalSelfAttention",
        lambda: GlobalSelfAttention(8, 2, (4, 4)),
        (2, 16, 8),
        (16, 8),
        r"GlobalSelfAttention: expected tokens \(B, N=16, C=8\)",
    ),
    (
        "WindowAttention",
        lambda: WindowAttention(8, 2, (4, 4), 2),
        (2, 16, 8),
        (2, 16, 4),
        r"WindowAttention: expected tokens \(B, N=16, C=8\) over a 4x4 grid",
    ),
    (
        "SpatialReductionAttention",
        lambda: SpatialReductionAttention(8, 2, (4, 4), 2),
        (2, 16, 8),
        (2, 12, 8),
        r"SpatialReductionAttention: expected tokens \(B, N=16, C=8\)",
    ),
    (
        "AttentionPooling",
        lambda: AttentionPooling(8, 2, (4, 4)),
        (2, 16, 8),
        (2, 16, 6),
        r"AttentionPooling: expected tokens \(B, N=16, C=8\)",
    ),
    (
        "ClassToken",
        lambda: ClassToken(8, (4, 4)),
        (2, 16, 8),
        (2, 17, 8),
        r"ClassToken: expected tokens \(B, N=16, C=8\)",
    ),
    (
        "ClassTokenReadout",
        lambda: ClassTokenReadout((4, 4)),
        (2, 17, 8),
        (2, 16, 8),
        r"ClassTokenReadout: expected tokens \(B, N=17, C\) over a 4x4 grid with 1 prefix tokens",
    ),
    (
        "PatchMerging",
        lambda: PatchMerging(4, 8, (4, 4)),
        (2, 16, 4),
        (2, 16, 8),
        r"PatchMerging: expected tokens \(B, N=16, C=4\)",
    ),
    (
        "GroupPooling",
        lambda: GroupPooling("C4"),
        (2, 3, 4, 4, 4),
        (2, 3, 4, 4),
        r"GroupPooling: expected a lifted field \(B, C, \|C4\|=4, H, W\)",
    ),
    (
        "GroupGlobalPool",
        lambda: GroupGlobalPool("C4"),
        (2, 3, 4, 4, 4),
        (2, 3, 2, 4, 4),
        r"GroupGlobalPool: expected a lifted field \(B, C, \|C4\|=4, H, W\)",
    ),
    (
        "OrbitPooledLinear",
        lambda: OrbitPooledLinear(3, 5, "C4"),
        (2, 3, 4, 4, 4),
        (2, 3, 2, 4, 4),
        r"OrbitPooledLinear: expected a lifted field \(B, C=3, \|C4\|=4, H, W\)",
    ),
    (
        "GroupLayerNorm",
        lambda: GroupLayerNorm(3, "C4"),
        (2, 3, 4, 4, 4),
        (2, 5, 4, 4, 4),
        r"GroupLayerNorm: expected a lifted field \(B, C=3, \|C4\|=4, H, W\)",
    ),
    (
        "GroupMLP",
        lambda: GroupMLP(3, 6, "C4"),
        (2, 3, 4, 4, 4),
        (2, 5, 4, 4, 4),
        r"GroupMLP: expected a lifted field \(B, C=3, \|C4\|=4, H, W\)",
    ),
    (
        "LiftedAvgPool",
        lambda: LiftedAvgPool("C4", 2),
        (2, 3, 4, 4, 4),
        (2, 3, 4, 4),
        r"LiftedAvgPool: expected a lifted field \(B, C, \|C4\|=4, H, W\)",
    ),
    (
        "LiftedPolyphaseDownsample",
        lambda: LiftedPolyphaseDownsample("C4", 2),
        (2, 3, 4, 4, 4),
        (2, 3, 8, 4, 4),
        r"LiftedPolyphaseDownsample: expected a lifted field \(B, C, \|C4\|=4, H, W\)",
    ),
]
LAYER_IDS = [case[0] for case in LAYERS]


@pytest.mark.parametrize(("name", "make", "good", "bad", "message"), LAYERS, ids=LAYER_IDS)
def test_library_layers_declare_their_types_and_check_their_input(
    name: str,
    make: Callable[[], nn.Module],
    good: tuple[int, ...],
    bad: tuple[int, ...],
    message: str,
) -> None:
    torch.manual_seed(0)
    layer = make().eval()
    assert isinstance(layer, EquivariantModule) and type(layer).__name__ == name
    with torch.no_grad():
        layer(torch.randn(good))
    with pytest.raises(GroupError, match=message):
        layer(torch.randn(bad))


@pytest.mark.parametrize(("name", "make", "good", "bad", "message"), LAYERS, ids=LAYER_IDS)
def test_subclasses_of_library_layers_still_validate(
    name: str,
    make: Callable[[], nn.Module],
    good: tuple[int, ...],
    bad: tuple[int, ...],
    message: str,
) -> None:
    layer = make()
    # a user's subclass that replaces forward entirely (and names itself in the errors)
    subclass = type(
        f"My{name}", (type(layer),), {"forward": lambda self, x: x, "__module__": __name__}
    )
    layer.__class__ = subclass
    assert layer(torch.zeros(good)).shape == good
    with pytest.raises(GroupError, match=message.replace(name, f"My{name}", 1)):
        layer(torch.zeros(bad))


def test_library_layers_in_type_is_their_contracts_input_type() -> None:
    group = TorusTranslations(4, 4)
    for layer in [
        AbsolutePositionalEncoding(4, (4, 4), prefix=1),
        ConvPositionalEncoding(4, (4, 4)),
        GlobalSelfAttention(8, 2, (4, 4)),
        WindowAttention(8, 2, (4, 4), 2),
        SpatialReductionAttention(8, 2, (4, 4), 2),
        AttentionPooling(8, 2, (4, 4)),
        ClassToken(8, (4, 4)),
        ClassTokenReadout((4, 4)),
        PatchMerging(4, 8, (4, 4)),
    ]:
        contract = layer.contract(group)
        assert contract.input_type == layer.in_type, type(layer).__name__
        if contract.output_type is not None:
            assert contract.output_type == layer.out_type, type(layer).__name__
    for layer in [
        GroupPooling("C4"),
        GroupGlobalPool("C4"),
        GroupLayerNorm(3, "C4"),
        GroupMLP(3, 6, "C4"),
        LiftedAvgPool("C4"),
        LiftedPolyphaseDownsample("C4"),
    ]:
        contract = layer.contract(p4(8))
        assert contract.input_type == layer.in_type and contract.output_type == layer.out_type, (
            type(layer).__name__
        )


def test_state_dict_keys_are_unchanged() -> None:
    assert list(AbsolutePositionalEncoding(4, (4, 4)).state_dict()) == ["embedding"]
    assert list(ConvPositionalEncoding(4, (4, 4)).state_dict()) == ["conv.weight", "conv.bias"]
    assert list(ClassToken(8, (4, 4)).state_dict()) == ["token"]
    assert list(ClassTokenReadout((4, 4)).state_dict()) == []
    assert list(AttentionPooling(8, 2, (4, 4)).state_dict()) == [
        "queries",
        "key_value.weight",
        "key_value.bias",
        "proj.weight",
        "proj.bias",
    ]
    assert list(GroupLayerNorm(3, "C4").state_dict()) == ["weight", "bias"]
    assert list(GroupMLP(3, 6, "C4").state_dict()) == [
        "fc1.weight",
        "fc1.bias",
        "fc2.weight",
        "fc2.bias",
    ]
    assert list(GlobalSelfAttention(8, 2, (4, 4), bias=None).state_dict()) == [
        "qkv.weight",
        "qkv.bias",
        "proj.weight",
        "proj.bias",
    ]


def test_mean_pooling_without_a_grid_still_accepts_any_token_count() -> None:
    pool = MeanPooling(prefix=1)
    assert pool(torch.ones(2, 5, 3)).shape == (2, 3)
    with pytest.raises(GroupError, match=r"MeanPooling: expected tokens \(B, N, C\) with N > 1"):
        pool(torch.ones(2, 1, 3))
    with pytest.raises(
        GroupError, match=r"MeanPooling: expected tokens \(B, N=16, C\) over a 4x4 grid"
    ):
        MeanPooling((4, 4))(torch.ones(2, 15, 3))


# ----------------------------------------------------------------------------- the public validation API
def test_field_type_check_takes_the_expected_width() -> None:
    GridField().check(torch.ones(1, 3, 2, 2), "Layer", channels=3)
    with pytest.raises(
        GroupError,
        match=r"^Layer: expected an image batch \(B, C=2, H, W\), got a tensor of shape \(1, 3, 2, 2\)$",
    ):
        GridField().check(torch.ones(1, 3, 2, 2), "Layer", channels=2)
    with pytest.raises(
        GroupError,
        match=r"^Layer: expected a batched tensor \(B, C=2, \.\.\.\), got a tensor of shape \(4,\)$",
    ):
        InvariantField().check(torch.ones(4), "Layer", channels=2)
    InvariantField().check(torch.ones(4, 2), "Layer", channels=2)
    with pytest.raises(GroupError, match=r"Layer: expected a token set \(B, N=3, C=5\)"):
        SetField(3).check(torch.ones(1, 3, 4), "Layer", channels=5)
    for bad in (0, True, 1.5):
        with pytest.raises(
            GroupError, match=r"FieldType\.check: expected channels as an int >= 1 or None"
        ):
            TokenField((2, 2)).check(torch.ones(1, 4, 1), "Layer", channels=bad)  # type: ignore[arg-type]
    # the action itself is unchanged: a channel representation of the wrong size is reported by act
    with pytest.raises(GroupError, match=r"expected 8 channels for regular\(C4, x2\), got 3"):
        GridField(RegularRepresentation(C4, 2)).act(C4, 1, torch.zeros(1, 3, 4, 4))


def test_public_validation_functions() -> None:
    assert check_grid((4, 6), "Layer") == (4, 6)
    assert check_grid([np.int64(2), 3]) == (2, 3)
    with pytest.raises(GroupError, match=r"Layer: expected a grid \(height, width\), got 4"):
        check_grid(4, "Layer")
    with pytest.raises(
        GroupError, match=r"Layer: expected a grid \(height, width\) of positive ints, got \(0, 4\)"
    ):
        check_grid((0, 4), "Layer")
    with pytest.raises(
        GroupError,
        match=r"check_grid: expected a grid \(height, width\) of positive ints, got \(1, 2, 3\)",
    ):
        check_grid((1, 2, 3))
    check_heads(8, 2, "Layer")
    for dim, heads in [(8, 3), (8, 0)]:
        with pytest.raises(
            GroupError,
            match=f"Layer: expected a width divisible by the number of heads {heads}, got {dim}",
        ):
            check_heads(dim, heads, "Layer")
    assert torus_stride(TorusTranslations(4, 4), (4, 4)) == 1
    assert torus_stride(TorusTranslations(2, 2, stride=2), (4, 4)) == 2
    assert torus_stride(TorusTranslations(4, 4), (8, 8)) is None
    assert torus_stride(C4, (4, 4)) is None
    group = TorusTranslations(4, 4)
    assert translation_contract("Layer", group, (4, 4), 1) == Contract.equivariant(
        TokenField((4, 4), prefix=1), TokenField((4, 4), prefix=1)
    )
    assert translation_contract("Layer", group, (4, 4), 0, "no").kind == Status.BROKEN
    unknown = translation_contract("Layer", C4, (4, 4))
    assert unknown.kind == Status.UNVERIFIED and (unknown.reason or "").startswith(
        "Layer: promises nothing for C4"
    )


# ----------------------------------------------------------------------------- meta-test
def _package_of(module: tuple[str, ...]) -> str:
    """The top-level subpackage of a ``groupattn`` module (``""`` for ``groupattn`` itself and its modules)."""
    return module[1] if len(module) > 2 else ""


def _module_parts(path: Path) -> tuple[str, ...]:
    parts = ("groupattn", *path.relative_to(ROOT).with_suffix("").parts)
    return parts[:-1] if parts[-1] == "__init__" else parts


def _cross_package_private_checks(path: Path, source: str) -> list[str]:
    """``_check*`` names a module imports from another ``groupattn`` package (also as module attributes)."""
    parts = _module_parts(path)
    is_package = path.name == "__init__.py"
    here = parts if is_package else parts[:-1]
    own = _package_of((*parts, "x") if is_package else parts)
    found: list[str] = []
    module_aliases: dict[str, tuple[str, ...]] = {}
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - node.level + 1]
                target = (*base, *(node.module.split(".") if node.module else ()))
            else:
                target = tuple((node.module or "").split("."))
            if target[0] != "groupattn":
                continue
            for alias in node.names:
                full = (*target, alias.name)
                if alias.name.startswith("_check") and _package_of((*target, "x")) != own:
                    found.append(
                        f"{path.relative_to(ROOT.parent)}:{node.lineno}: from {'.'.join(target)} import {alias.name}"
                    )
                module_aliases[alias.asname or alias.name] = full
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "groupattn":
                    if alias.asname:  # import groupattn.a.b as m: m is groupattn.a.b
                        module_aliases[alias.asname] = tuple(alias.name.split("."))
                    else:  # import groupattn.a.b: the name bound is groupattn
                        module_aliases["groupattn"] = ("groupattn",)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_check"):
            chain: list[str] = []
            value: ast.AST = node.value
            while isinstance(value, ast.Attribute):
                chain.insert(0, value.attr)
                value = value.value
            if isinstance(value, ast.Name) and value.id in module_aliases:
                target = (*module_aliases[value.id], *chain)
                if (
                    target[0] == "groupattn"
                    and len(target) > 1
                    and _package_of((*target, "x")) != own
                ):
                    found.append(
                        f"{path.relative_to(ROOT.parent)}:{node.lineno}: {'.'.join(target)}.{node.attr}"
                    )
    return found


def test_the_meta_test_finds_cross_package_private_imports() -> None:
    fake = ROOT / "nn" / "_fake.py"
    assert _cross_package_private_checks(
        fake, "from ..positional._translation import _check_grid\n"
    )
    assert _cross_package_private_checks(
        fake, "from groupattn.attention._global import _check_heads as h\n"
    )
    assert _cross_package_private_checks(
        fake, "import groupattn.positional._translation as t\nt._check_tokens(1)\n"
    )
    assert _cross_package_private_checks(
        fake, "from .. import positional\npositional._translation._check_grid(1)\n"
    )
    assert not _cross_package_private_checks(
        fake, "from ._group import _check_lifted\n"
    )  # same package
    assert not _cross_package_private_checks(fake, "from ..actions import check_grid\n")  # public
    init = ROOT / "nn" / "__init__.py"
    assert not _cross_package_private_checks(init, "from ._patch import _check_image\n")
    assert _cross_package_private_checks(init, "from ..canonical._polyphase import _check_stride\n")


def test_no_package_imports_another_packages_private_check_helpers() -> None:
    files = sorted(ROOT.rglob("*.py"))
    assert len(files) > 50
    found = [
        hit
        for path in files
        for hit in _cross_package_private_checks(path, path.read_text(encoding="utf-8"))
    ]
    assert not found, (
        "use the public validation API (groupattn.actions field types' check, check_grid, ...):\n"
        + "\n".join(found)
    )
