"""Layers that take and return escnn ``GeometricTensor``s, so groupattn attention sits between escnn modules.

A field of ``N`` copies of the regular representation of a point group ``H`` (escnn's
``gspace.regular_repr``) is, channel for channel, a lifted field ``(B, N, |H|, H, W)``:
escnn lays each regular field out as ``|H|`` consecutive channels indexed by its group
elements, and ``ρ_reg(g) e_h = e_{gh}`` is our [`LiftedField`][groupattn.actions.LiftedField]
action on the group axis (``tests/test_interop_escnn.py`` checks the two agree). So the
adapter only reshapes; no data moves.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from .._errors import ConfigurationError, ShapeError
from ..actions import FieldType, InvariantField, LiftedField
from ..attention import GroupSelfAttention
from ..contracts import Contract, Status, contract_of
from ..groups import Group, GroupError, PointGroup
from ..nn import GroupBlock
from ._escnn import gspace_point_group
from ._escnn_contracts import _enn, escnn_grid_type, register_escnn_contracts

__all__ = [
    "GeometricGroupAttention",
    "GeometricGroupBlock",
    "GeometricInvariantReadout",
    "GeometricLifted",
]


def _regular_fields(field_type: Any, what: str) -> tuple[PointGroup, int]:
    enn = _enn()
    if not isinstance(field_type, enn.FieldType):
        raise ConfigurationError(f"{what}: expected an escnn FieldType, got {field_type!r}")
    gspace = field_type.gspace
    try:
        pg = gspace_point_group(gspace)
    except GroupError as err:
        raise ConfigurationError(f"{what}: {err}") from err
    regular = gspace.regular_repr
    if not field_type.representations or any(r != regular for r in field_type.representations):
        names = sorted({r.name for r in field_type.representations})
        raise ConfigurationError(
            f"{what}: expected fields of the regular representation {regular.name!r} of {gspace!r}, got {names}"
        )
    return pg, len(field_type)


def _grid_input_type(name: str, field_type: Any, group: Group, input_type: Any) -> Any:
    """The ``GridField`` of ``field_type`` under ``group``, or an unverified ``Contract``
    when the group does not act on it or ``input_type`` is another type."""
    try:
        in_t = escnn_grid_type(field_type, group)
    except GroupError as err:
        return Contract.unknown(f"{name}: {err}", input_type)
    if input_type is not None and input_type != in_t:
        what = input_type.describe() if isinstance(input_type, FieldType) else repr(input_type)
        return Contract.unknown(
            f"{name}: expected input type {in_t.describe()}, got {what}", input_type
        )
    return in_t


class GeometricLifted(nn.Module):
    """Run a groupattn module on lifted fields inside an escnn network.

    ``GeometricTensor`` of ``N`` regular fields of ``H`` → ``(B, N, |H|, H, W)`` →
    ``module`` → ``(B, N', |H|, H', W')`` → ``GeometricTensor`` of ``N'`` regular fields
    (``out_type``). The input's field type must be ``in_type`` exactly.

    Contract: under a group ``G`` (``H`` or a subgroup acting on the grid), *equivariant*
    from the [`GridField`][groupattn.actions.GridField] of ``in_type`` to that of
    ``out_type`` (see [`escnn_grid_type`][groupattn.interop.escnn_grid_type]) when
    ``module``'s contract is equivariant ``LiftedField(H) → LiftedField(H)`` under ``G``;
    *broken* where it is broken, *unverified* otherwise. (The checker reads the body:
    two reshapes around ``module``.)

    Shapes: ``GeometricTensor (B, N·|H|, H, W) → GeometricTensor (B, N'·|H|, H', W')``.

    Parameters
    ----------
    module
        A module on lifted fields of ``H`` (e.g. [`GroupBlock`][groupattn.nn.GroupBlock],
        [`GroupSelfAttention`][groupattn.attention.GroupSelfAttention]).
    in_type, out_type
        escnn ``FieldType``s of regular fields on one 2-D gspace (``out_type`` defaults to
        ``in_type``).

    Raises
    ------
    ConfigurationError
        For field types that are not all regular fields of one planar gspace.
    ShapeError
        In ``forward``, for an input that is not a ``GeometricTensor`` of ``in_type``.
    """

    def __init__(self, module: nn.Module, in_type: Any, out_type: Any = None) -> None:
        super().__init__()
        register_escnn_contracts()
        out_type = in_type if out_type is None else out_type
        name = type(self).__name__
        pg, _ = _regular_fields(in_type, f"{name} in_type")
        pg_out, _ = _regular_fields(out_type, f"{name} out_type")
        if in_type.gspace != out_type.gspace:
            raise ConfigurationError(
                f"{name}: expected in_type and out_type on one gspace, got {in_type.gspace!r} and "
                f"{out_type.gspace!r}"
            )
        self.module = module
        self.in_type = in_type
        self.out_type = out_type
        self.point_group: PointGroup = pg
        assert pg == pg_out

    def forward(self, x: Any) -> Any:
        enn = _enn()
        name = type(self).__name__
        if not isinstance(x, enn.GeometricTensor):
            raise ShapeError(
                f"{name}: expected a GeometricTensor of {self.in_type!r}, got {type(x).__name__}"
            )
        if x.type != self.in_type:
            raise ShapeError(
                f"{name}: expected a GeometricTensor of {self.in_type!r}, got {x.type!r}"
            )
        t = x.tensor
        if t.dim() != 4:
            raise ShapeError(
                f"{name}: expected a GeometricTensor on a 2-D grid (B, C, H, W), got shape {tuple(t.shape)}"
            )
        b, _, h, w = t.shape
        n = self.point_group.order()
        y = self.module(t.reshape(b, len(self.in_type), n, h, w))
        if not isinstance(y, torch.Tensor) or y.dim() != 5 or y.shape[2] != n:
            raise ShapeError(
                f"{name}: expected its module to return a lifted field (B, C, {n}, H, W), got "
                f"{tuple(y.shape) if isinstance(y, torch.Tensor) else type(y).__name__}"
            )
        if y.shape[1] * n != self.out_type.size:
            raise ShapeError(
                f"{name}: expected {len(self.out_type)} output fields, got {y.shape[1]} from its module"
            )
        return enn.GeometricTensor(
            y.reshape(b, y.shape[1] * n, y.shape[3], y.shape[4]), self.out_type
        )

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """See the class docstring."""
        name = type(self).__name__
        in_t = _grid_input_type(name, self.in_type, group, input_type)
        if isinstance(in_t, Contract):
            return in_t
        try:
            out_t = escnn_grid_type(self.out_type, group)
        except GroupError as err:
            return Contract.unknown(f"{name}: {err}", input_type)
        lifted = LiftedField(self.point_group)
        inner = contract_of(self.module, group, lifted)
        if inner.kind == Status.BROKEN:
            return Contract.breaks(f"{name}: {inner.reason}", in_t, out_t)
        if inner.kind != Status.EQUIVARIANT or inner.output_type != lifted:
            return Contract.unknown(
                f"{name}: its module promises {inner.describe()}, not lifted → lifted", in_t
            )
        if inner.output_group is not None:
            return Contract.unknown(f"{name}: its module changes the acting group", in_t)
        return Contract.equivariant(in_t, out_t)

    def extra_repr(self) -> str:
        return f"in_type={self.in_type!r}, out_type={self.out_type!r}"


class GeometricGroupAttention(GeometricLifted):
    """[`GroupSelfAttention`][groupattn.attention.GroupSelfAttention] between escnn modules.

    ``GeometricTensor`` of ``N`` regular fields → group self-attention over
    position × ``H`` → ``GeometricTensor`` of ``N'`` regular fields (``out_type``,
    default ``in_type``). ``kwargs`` go to ``GroupSelfAttention`` (``num_heads``,
    ``neighbourhood``, ``encoding``, ``grid``, …).

    Contract: that of [`GeometricLifted`][groupattn.interop.GeometricLifted] with the
    attention's (equivariant under ``H`` and its subgroups).

    Shapes: ``GeometricTensor (B, N·|H|, H, W) → GeometricTensor (B, N'·|H|, H, W)``.
    """

    def __init__(self, in_type: Any, out_type: Any = None, **kwargs: Any) -> None:
        out_type = in_type if out_type is None else out_type
        pg, n_in = _regular_fields(in_type, "GeometricGroupAttention in_type")
        _, n_out = _regular_fields(out_type, "GeometricGroupAttention out_type")
        super().__init__(GroupSelfAttention(n_in, n_out, pg, **kwargs), in_type, out_type)


class GeometricGroupBlock(GeometricLifted):
    """A [`GroupBlock`][groupattn.nn.GroupBlock] (pre-norm attention + MLP) between escnn modules.

    ``GeometricTensor`` of ``N`` regular fields → ``GroupBlock(N, H, **kwargs)`` →
    ``GeometricTensor`` of the same type. ``kwargs`` go to ``GroupBlock``.

    Contract: that of [`GeometricLifted`][groupattn.interop.GeometricLifted] with the block's.

    Shapes: ``GeometricTensor (B, N·|H|, H, W) → GeometricTensor (B, N·|H|, H, W)``.
    """

    def __init__(self, in_type: Any, **kwargs: Any) -> None:
        pg, n = _regular_fields(in_type, "GeometricGroupBlock in_type")
        super().__init__(GroupBlock(n, pg, **kwargs), in_type, in_type)


class GeometricInvariantReadout(nn.Module):
    """Read an escnn ``GeometricTensor`` of regular fields out to invariant features with a groupattn module.

    ``GeometricTensor`` of ``N`` regular fields of ``H`` → ``(B, N, |H|, H, W)`` →
    ``module`` → ``(B, F)`` (a plain tensor). ``module`` maps a
    [`LiftedField`][groupattn.actions.LiftedField] of ``H`` to an
    [`InvariantField`][groupattn.actions.InvariantField], e.g.
    [`OrbitPooledLinear`][groupattn.nn.OrbitPooledLinear] (logits that keep the relative
    orientation of the fields) or [`GroupGlobalPool`][groupattn.nn.GroupGlobalPool].

    Contract: under a group ``G`` (``H`` or a subgroup acting on the grid), *invariant*
    from the [`GridField`][groupattn.actions.GridField] of ``in_type`` (see
    [`escnn_grid_type`][groupattn.interop.escnn_grid_type]) to ``InvariantField`` when
    ``module``'s contract is invariant ``LiftedField(H) → InvariantField`` under ``G``;
    *broken* where it is broken, *unverified* otherwise.

    Shapes: ``GeometricTensor (B, N·|H|, H, W) → (B, F)``.

    Parameters
    ----------
    module
        A module from lifted fields of ``H`` to invariant features.
    in_type
        The escnn ``FieldType`` of the input: regular fields on one planar gspace.

    Raises
    ------
    ConfigurationError
        For a field type that is not all regular fields of one planar gspace.
    ShapeError
        In ``forward``, for an input that is not a ``GeometricTensor`` of ``in_type``, or a
        module that does not return ``(B, F)``.
    """

    def __init__(self, module: nn.Module, in_type: Any) -> None:
        super().__init__()
        register_escnn_contracts()
        pg, _ = _regular_fields(in_type, "GeometricInvariantReadout in_type")
        module_group = getattr(module, "point_group", None)
        if isinstance(module_group, PointGroup) and module_group != pg:
            raise ConfigurationError(
                f"GeometricInvariantReadout: expected a module for the point group {pg.name} of "
                f"in_type, got one for {module_group.name}"
            )
        self.module = module
        self.in_type = in_type
        self.point_group: PointGroup = pg

    def forward(self, x: Any) -> torch.Tensor:
        enn = _enn()
        name = "GeometricInvariantReadout"
        if not isinstance(x, enn.GeometricTensor) or x.type != self.in_type:
            got = repr(x.type) if isinstance(x, enn.GeometricTensor) else type(x).__name__
            raise ShapeError(f"{name}: expected a GeometricTensor of {self.in_type!r}, got {got}")
        t = x.tensor
        if t.dim() != 4:
            raise ShapeError(
                f"{name}: expected a GeometricTensor on a 2-D grid (B, C, H, W), got shape {tuple(t.shape)}"
            )
        b, _, h, w = t.shape
        y = self.module(t.reshape(b, len(self.in_type), self.point_group.order(), h, w))
        if not isinstance(y, torch.Tensor) or y.dim() != 2 or y.shape[0] != b:
            result = f"shape {tuple(y.shape)}" if isinstance(y, torch.Tensor) else type(y).__name__
            raise ShapeError(f"{name}: expected its module to return (B={b}, F), got {result}")
        return y

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """See the class docstring."""
        name = "GeometricInvariantReadout"
        in_t = _grid_input_type(name, self.in_type, group, input_type)
        if isinstance(in_t, Contract):
            return in_t
        lifted = LiftedField(self.point_group)
        inner = contract_of(self.module, group, lifted)
        if inner.kind == Status.BROKEN:
            return Contract.breaks(f"{name}: {inner.reason}", in_t, InvariantField())
        if (
            inner.kind != Status.INVARIANT
            or inner.input_type != lifted
            or inner.output_type != InvariantField()
            or inner.output_group is not None
        ):
            return Contract.unknown(
                f"{name}: its module promises {inner.describe()}, not {lifted.describe()} → "
                "invariant",
                in_t,
            )
        return Contract.invariant(in_t, InvariantField())

    def extra_repr(self) -> str:
        return f"in_type={self.in_type!r}"
