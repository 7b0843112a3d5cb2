"""Adapter between groupattn's point groups / field types and escnn's.

Conventions (checked in ``tests/test_interop_escnn.py``):

- Our [`CyclicGroup`][groupattn.groups.CyclicGroup] ``C_n`` element ``r`` is escnn's
  ``cyclic_group(n)`` element ``r`` (rotation by ``2π r / n``).
- Our [`DihedralGroup`][groupattn.groups.DihedralGroup] ``D_n`` element ``i = r + n·m`` is
  ``ρʳ σᵐ`` with the reflection ``σ: (y, x) ↦ (y, −x)`` on ``(row, col)`` offsets —
  ``torch.flip`` of the last axis — and ``ρ`` the quarter turn ``torch.rot90`` on the
  last two axes (for ``n = 4``). As abstract groups this is escnn's
  ``dihedral_group(n)`` element ``(m, r)`` (same multiplication law, same index
  ``r + n·m`` in ``.elements``).
- On images, escnn's ``flipRot2dOnR2(n)`` and ``flip2dOnR2()`` with the default flip
  axis ``π/2`` reflect exactly like our ``σ`` and ``rot2dOnR2(n)`` rotates like ``ρ``,
  so the element correspondence is the identity. A gspace with another flip axis ``a``
  reflects by ``ρᵏ σ`` with ``k = n (2a − π) / 2π``; the gspace-aware functions below
  take that into account, so escnn's element ``(m, r)`` of such a gspace corresponds to
  our ``ρ^{r + k m} σᵐ``.

escnn is an optional extra (``pip install groupattn[escnn]``); the core never imports
this module. Note that escnn itself writes a cache into its own installation directory
on first use; groupattn writes nothing there.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ..actions import GridField, MatrixRepresentation
from ..groups import CyclicGroup, DihedralGroup, GroupElement, GroupError, PointGroup

__all__ = [
    "field_type_from_escnn",
    "from_escnn_element",
    "from_escnn_group",
    "gspace_point_group",
    "representation_from_escnn",
    "to_escnn_element",
    "to_escnn_group",
]


def _escnn_group_module() -> Any:
    try:
        from escnn import group as escnn_group
    except ImportError as err:  # pragma: no cover - exercised only without the extra
        raise ImportError(
            "groupattn.interop: expected the optional escnn package "
            "(pip install 'groupattn[escnn]'), got an ImportError"
        ) from err
    return escnn_group


def to_escnn_group(group: PointGroup) -> Any:
    """escnn's ``cyclic_group(n)`` or ``dihedral_group(n)`` for our ``C_n`` or ``D_n``.

    Raises
    ------
    GroupError
        For any other group.
    """
    eg = _escnn_group_module()
    if isinstance(group, CyclicGroup):
        return eg.cyclic_group(group.n)
    if isinstance(group, DihedralGroup):
        return eg.dihedral_group(group.n)
    raise GroupError(
        f"to_escnn_group: expected a CyclicGroup or DihedralGroup, got {getattr(group, 'name', group)!r}"
    )


def from_escnn_group(escnn_group: Any) -> PointGroup:
    """Our ``C_n`` or ``D_n`` for escnn's ``cyclic_group(n)`` or ``dihedral_group(n)``.

    Raises
    ------
    GroupError
        For any other escnn group (continuous groups, O(2), SO(3), …).
    """
    eg = _escnn_group_module()
    if isinstance(escnn_group, eg.CyclicGroup):
        return CyclicGroup(escnn_group.order())
    if isinstance(escnn_group, eg.DihedralGroup):
        return DihedralGroup(escnn_group.rotation_order)
    raise GroupError(
        f"from_escnn_group: expected an escnn cyclic_group or dihedral_group, got {escnn_group!r}"
    )


def _reflection_offset(gspace: Any, n: int) -> int:
    """``k`` such that the gspace's flip is our ``ρᵏ σ`` (``n`` rotations)."""
    doubled_axis = gspace._sg_id[0]
    steps = n * (doubled_axis - math.pi) / (2 * math.pi)
    k = round(steps)
    if abs(steps - k) > 1e-9:
        raise GroupError(
            f"groupattn.interop: expected a flip axis that is a multiple of π/{2 * n} "
            f"(so the reflection lies in D{n}), got axis {doubled_axis / 2!r} of {gspace!r}"
        )
    return k % n


def gspace_point_group(gspace: Any) -> PointGroup:
    """Our point group acting on images like the fibre group of a 2-D escnn gspace.

    ``rot2dOnR2(n)`` → ``C_n``; ``flipRot2dOnR2(n, axis)`` → ``D_n``;
    ``flip2dOnR2()`` (axis ``π/2``) → ``D_1``; ``trivialOnR2()`` → ``C_1``.

    Raises
    ------
    GroupError
        For continuous groups (``N=-1``), non-planar gspaces, or a flip-only gspace
        whose axis is not our reflection's.
    """
    eg = _escnn_group_module()
    fiber = gspace.fibergroup
    sg_id = getattr(gspace, "_sg_id", None)
    if (
        getattr(gspace, "dimensionality", None) != 2
        or not isinstance(sg_id, tuple)
        or len(sg_id) != 2
    ):
        raise GroupError(f"groupattn.interop: expected a 2-D escnn gspace on R², got {gspace!r}")
    if isinstance(fiber, eg.DihedralGroup):
        _reflection_offset(gspace, fiber.rotation_order)
        return DihedralGroup(fiber.rotation_order)
    if isinstance(fiber, eg.CyclicGroup):
        if sg_id[0] is None:
            return CyclicGroup(fiber.order())
        if abs(sg_id[0] - math.pi) < 1e-9:
            return DihedralGroup(1)
        raise GroupError(
            f"groupattn.interop: expected a flip-only gspace with axis π/2 (our reflection "
            f"(y, x) ↦ (y, −x)), got axis {sg_id[0] / 2!r} of {gspace!r}"
        )
    raise GroupError(
        f"groupattn.interop: expected a gspace with a finite cyclic or dihedral fibre group, "
        f"got {fiber!r} of {gspace!r}"
    )


def to_escnn_element(group: PointGroup, g: Any, gspace: Any = None) -> Any:
    """The escnn group element corresponding to ``g`` of our ``C_n`` / ``D_n``.

    Parameters
    ----------
    group
        Our point group.
    g
        An element (or index) of ``group``.
    gspace
        If given, the element of ``gspace.fibergroup`` that moves images as ``g`` does
        (this matters for flip axes other than ``π/2``); otherwise the element of
        [`to_escnn_group`][groupattn.interop.to_escnn_group] with the same abstract meaning.
    """
    e = group.element(g)
    if gspace is None:
        target = to_escnn_group(group)
        offset = 0
    else:
        expected = gspace_point_group(gspace)
        if expected != group:
            raise GroupError(
                f"to_escnn_element: expected an element of {expected.name} for {gspace!r}, "
                f"got one of {group.name}"
            )
        target = gspace.fibergroup
        offset = (
            _reflection_offset(gspace, group.n) if group.is_reflection(e) and group.n > 1 else 0
        )
    rotation, reflection = group.rotation(e), group.is_reflection(e)
    eg = _escnn_group_module()
    if isinstance(target, eg.DihedralGroup):
        m = int(reflection)
        return target.element((m, (rotation - offset * m) % group.n), "int")
    # cyclic escnn group: our C_n, or our D_1 acting as escnn's flip group C_2
    if isinstance(group, DihedralGroup):
        return target.element(int(reflection), "int")
    return target.element(rotation, "int")


def from_escnn_element(element: Any, gspace: Any = None) -> GroupElement:
    """Our group element corresponding to an escnn element of a cyclic or dihedral group.

    With ``gspace`` the element is read geometrically (as it moves images under that
    gspace, see [`gspace_point_group`][groupattn.interop.gspace_point_group]); otherwise abstractly.
    """
    eg = _escnn_group_module()
    escnn_group = element.group
    if gspace is not None:
        ours = gspace_point_group(gspace)
        if escnn_group != gspace.fibergroup:
            raise GroupError(
                f"from_escnn_element: expected an element of {gspace.fibergroup!r}, got one of {escnn_group!r}"
            )
    else:
        ours = from_escnn_group(escnn_group)
    value = element.to("int")
    if isinstance(escnn_group, eg.DihedralGroup):
        m, r = int(value[0]), int(value[1])
        offset = _reflection_offset(gspace, ours.n) if gspace is not None and m else 0
        return ours.make(r + offset * m, bool(m))
    if isinstance(ours, DihedralGroup):  # a flip gspace: escnn C_2 acting as our D_1
        return ours.make(0, bool(int(value)))
    return ours.make(int(value))


def representation_from_escnn(
    representation: Any, gspace: Any = None, name: str | None = None
) -> MatrixRepresentation:
    """Wrap an escnn representation of a cyclic/dihedral group as a [`MatrixRepresentation`][groupattn.actions.MatrixRepresentation].

    Parameters
    ----------
    representation
        An ``escnn.group.Representation``.
    gspace
        Read elements geometrically through this gspace (see [`to_escnn_element`][groupattn.interop.to_escnn_element]).
    name
        Display name (escnn's name by default).

    Returns
    -------
    MatrixRepresentation
        Over our [`CyclicGroup`][groupattn.groups.CyclicGroup] / [`DihedralGroup`][groupattn.groups.DihedralGroup]; ``matrix(g)`` is escnn's
        ``representation(to_escnn_element(g))`` in float64.
    """
    group = (
        gspace_point_group(gspace) if gspace is not None else from_escnn_group(representation.group)
    )

    def matrix(g: GroupElement) -> torch.Tensor:
        return torch.as_tensor(
            representation(to_escnn_element(group, g, gspace)), dtype=torch.float64
        )

    return MatrixRepresentation(
        group, representation.size, matrix, name=name or f"escnn:{representation.name}"
    )


def field_type_from_escnn(field_type: Any) -> GridField:
    """Our [`GridField`][groupattn.actions.GridField] for an escnn ``FieldType`` on a 2-D gspace.

    The channels transform by the field type's full (direct-sum) representation; space
    moves by the gspace's point group, which [`gspace_point_group`][groupattn.interop.gspace_point_group] returns. Acting
    on a tensor ``(B, C, H, W)`` with our element ``g`` equals
    ``GeometricTensor(x, field_type).transform(to_escnn_element(group, g, gspace))``.
    """
    gspace = field_type.gspace
    rep = representation_from_escnn(field_type.representation, gspace, name=f"escnn:{field_type!r}")
    return GridField(channels=rep)
