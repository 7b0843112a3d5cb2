"""A small base class for modules that declare their input and output field types.

It lives with the contracts (below every package with layers), so positional
encodings, attention layers, building blocks and a user's own modules all derive from
it without importing upwards; [`groupattn.nn`][groupattn.nn] re-exports it.
"""

from __future__ import annotations

import inspect
import operator
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from .._errors import ConfigurationError, DtypeError, ShapeError
from ..actions import FieldType, GSetField
from ..groups import Group
from ._contract import Contract

__all__ = ["EquivariantModule"]


def check_floating_input(x: torch.Tensor, module: str) -> None:
    """Raise [`DtypeError`][groupattn.DtypeError] unless ``x`` is a floating-point tensor.

    For layers that compute with learned floating weights: an integer or bool input is
    refused with a message naming ``module``, instead of failing (or being promoted)
    deep inside a kernel. Never casts.
    """
    if not x.is_floating_point():
        raise DtypeError(
            f"{module}: expected a floating-point input (float32, float64, …), got {x.dtype}"
        )


class EquivariantModule(nn.Module):
    """Base class of modules that declare the field types they map between (as in escnn).

    A subclass passes ``in_type`` and ``out_type`` to ``__init__`` and implements
    ``forward`` as usual. Calling the module checks its (first) input against
    ``in_type`` first (through [`FieldType.check`][groupattn.actions.FieldType.check], with ``in_channels`` as the width when
    given) — a wrong rank, token count or channel count raises
    [`ShapeError`][groupattn.ShapeError] naming the module, what it expected and what
    it got; with [`floating_input`][groupattn.contracts.EquivariantModule.floating_input] an integer or bool
    input raises [`DtypeError`][groupattn.DtypeError] — and the default [`contract`][groupattn.contracts.EquivariantModule.contract] follows from the declared types.
    Subclasses of a library layer inherit the check, whatever their ``forward`` does.

    Importable as ``groupattn.contracts.EquivariantModule`` and
    ``groupattn.nn.EquivariantModule`` (the same class).

    The check runs in a forward pre-hook, so it is part of every call (``module(x)``)
    and is skipped by ``torch.fx`` symbolic tracing (which does not run hooks of leaf
    modules) while ``torch.compile`` traces it like any shape check.

    Contract (default): under the group the types are declared for ([`group`][groupattn.contracts.EquivariantModule.group]:
    the ``group`` argument, else the G-set's group of a
    [`GSetField`][groupattn.actions.GSetField] input type), *equivariant* from ``in_type``
    to ``out_type`` (*invariant* if ``out_type`` is invariant), or *breaks* with the
    reason returned by [`breaks_reason`][groupattn.contracts.EquivariantModule.breaks_reason]; *unknown* for another group or another
    input type. Subclasses override [`breaks_reason`][groupattn.contracts.EquivariantModule.breaks_reason] or [`contract`][groupattn.contracts.EquivariantModule.contract].

    Shapes: those of ``in_type`` → ``out_type``.

    Parameters
    ----------
    in_type
        The field type of the input.
    out_type
        The field type of the output.
    group
        The group the types are declared for; ``None`` takes the G-set's group of a
        ``GSetField`` input type (other input types then promise nothing by default).
    in_channels
        The channel width the input must have when ``in_type`` does not state it
        (plain, trivial channels); ``None`` accepts any width. Needs an ``in_type``
        whose ``check`` takes the ``channels`` keyword (the library's field types do).

    Raises
    ------
    ConfigurationError
        At construction for a type that is not a [`FieldType`][groupattn.actions.FieldType],
        or an ``in_channels`` that is not a positive int or that ``in_type`` cannot
        check.
    ShapeError
        When called, for an input that does not fit ``in_type``.
    DtypeError
        When called, for an integer or bool input of a module with
        ``floating_input = True``.

    Examples
    --------
    >>> from groupattn.actions import GSet, GSetField
    >>> from groupattn.groups import SymmetricGroup
    >>> class Double(EquivariantModule):
    ...     def forward(self, x):
    ...         return 2 * x
    >>> field = GSetField(GSet.natural(SymmetricGroup(4)))
    >>> Double(field, field).contract(SymmetricGroup(4)).kind.value
    'equivariant'
    """

    floating_input: bool = False
    """Whether the input must be a floating-point tensor (the library's layers with learned
    weights set it; a user's module over integer data, e.g. token ids, keeps ``False``)."""

    def __init__(
        self,
        in_type: FieldType,
        out_type: FieldType,
        group: Group | None = None,
        *,
        in_channels: int | None = None,
    ) -> None:
        super().__init__()
        for name, value in (("in_type", in_type), ("out_type", out_type)):
            if not isinstance(value, FieldType):
                raise ConfigurationError(
                    f"{type(self).__name__}: expected a FieldType as {name}, got {value!r}"
                )
        if in_channels is not None:
            in_channels = _positive_int(in_channels, f"{type(self).__name__}: expected in_channels")
            if not _takes_channels(in_type):
                raise ConfigurationError(
                    f"{type(self).__name__}: expected an in_type whose check takes the channel width "
                    f"(GridField, LiftedField, TokenField, GSetField, InvariantField) for in_channels, "
                    f"got {type(in_type).__name__}"
                )
        self.in_type: FieldType = in_type
        self.out_type: FieldType = out_type
        self.in_channels: int | None = in_channels
        self._declared_group = group
        self.register_forward_pre_hook(_check_input_hook, with_kwargs=True)

    @property
    def group(self) -> Group | None:
        """The group the field types are declared for (``None``: not stated)."""
        if self._declared_group is not None:
            return self._declared_group
        if isinstance(self.in_type, GSetField) and self.in_type.gset is not None:
            return self.in_type.gset.group
        return None

    def check_input(self, x: Any) -> None:
        """Raise [`ShapeError`][groupattn.ShapeError] unless ``x`` fits ``in_type``.

        The message names the module, the expected layout and the actual shape. With
        ``in_channels`` the width is checked too, and with
        [`floating_input`][groupattn.contracts.EquivariantModule.floating_input] the dtype
        ([`DtypeError`][groupattn.DtypeError] for integer or bool input). Override to
        check more (and call ``super().check_input(x)``).
        """
        name = type(self).__name__
        if not isinstance(x, torch.Tensor):
            raise ShapeError(
                f"{name}: expected a tensor of type {self.in_type.describe()}, got {type(x).__name__}"
            )
        if self.in_channels is None:
            self.in_type.check(x, name)  # a user's field type need not take ``channels``
        else:
            check: Callable[..., None] = (
                self.in_type.check
            )  # takes ``channels`` (checked in __init__)
            check(x, name, channels=self.in_channels)
        if self.floating_input:
            check_floating_input(x, name)

    def breaks_reason(self, group: Group) -> str | None:
        """Why the module is not equivariant under ``group`` (``None``: it is). Override."""
        return None

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """Follows from ``in_type``, ``out_type`` and [`breaks_reason`][groupattn.contracts.EquivariantModule.breaks_reason]."""
        name = type(self).__name__
        if input_type is not None and input_type != self.in_type:
            return Contract.unknown(
                f"{name}: expected input type {self.in_type.describe()}, got {_describe(input_type)}",
                input_type,
            )
        declared = self.group
        if declared is None or group != declared:
            what = declared.name if declared is not None else "no group"
            return Contract.unknown(
                f"{name}: declares its types for {what}, got {group.name}", self.in_type
            )
        reason = self.breaks_reason(group)
        if reason is not None:
            return Contract.breaks(f"{name}: {reason}", self.in_type, self.out_type)
        if self.out_type.is_invariant:
            return Contract.invariant(self.in_type, self.out_type)
        return Contract.equivariant(self.in_type, self.out_type)

    def extra_repr(self) -> str:
        width = f", in_channels={self.in_channels}" if self.in_channels is not None else ""
        return f"in_type={self.in_type.describe()}, out_type={self.out_type.describe()}{width}"


def _takes_channels(field_type: FieldType) -> bool:
    """Whether ``field_type.check`` accepts the ``channels`` keyword."""
    try:
        parameters = inspect.signature(field_type.check).parameters
    except (TypeError, ValueError):
        return False
    return "channels" in parameters or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()
    )


def _positive_int(value: Any, what: str) -> int:
    """``value`` as an ``int >= 1`` (any integral type but ``bool``), else a [`ConfigurationError`][groupattn.ConfigurationError]."""
    try:
        number = operator.index(value)
    except TypeError:
        number = 0
    if isinstance(value, bool) or number < 1:
        raise ConfigurationError(f"{what} as an int >= 1 or None, got {value!r}")
    return number


def _describe(t: Any) -> str:
    return t.describe() if isinstance(t, FieldType) else repr(t)


def _check_input_hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    assert isinstance(module, EquivariantModule)
    inputs = [*args, *kwargs.values()]
    if not inputs:
        raise ShapeError(
            f"{type(module).__name__}: expected an input of type {module.in_type.describe()}, got no arguments"
        )
    module.check_input(inputs[0])
