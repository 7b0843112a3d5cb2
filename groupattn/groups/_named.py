"""Groups by name: the one parser behind every name the library accepts.

[`parse_group_name`][groupattn.groups.parse_group_name] reads every name [`builtin_groups`][groupattn.groups.builtin_groups]
lists and the spatial families (``translations``, ``p4``, ``p4m``, ``cN``, ``dN``);
[`group_from_name`][groupattn.check.group_from_name] (the checker's entry point) and
[`resolve_point_group`][groupattn.attention.resolve_point_group] (the layers' ``point_group``
argument) both go through it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from .._errors import ShapeError
from ._base import Group, GroupError, _describe
from ._point import CyclicGroup, DihedralGroup, PointGroup
from ._products import p4, p4m
from ._translations import TorusTranslations

__all__ = ["GROUP_NAMES", "describe_group_names", "group_from_name", "parse_group_name"]

#: Names that need the input's ``(H, W)``: the translations of an ``H × W`` torus
#: (``translations``, ``torus``) and the roto-translations of a square one (``p4``, ``p4m``).
_SIZED = ("translations", "torus", "p4", "p4m")

GROUP_NAMES: tuple[str, ...] = (
    "translations",
    "torus",
    "z2",
    "trivial",
    "c4",
    "c8",
    "d4",
    "p4",
    "p4m",
    "s5",
    "hexagon",
    "petersen",
)
"""The fixed names [`parse_group_name`][groupattn.groups.parse_group_name] accepts (besides ``cN`` and ``dN`` for every ``N ≥ 1``).

Every key of [`builtin_groups`][groupattn.groups.builtin_groups] is one of them, and so is the
``group`` of every registered model.
"""

_FAMILY = re.compile(r"([cd])(\d+)")


def describe_group_names() -> str:
    """The accepted group names in one line, for help texts and error messages.

    Examples
    --------
    >>> describe_group_names().startswith("translations, torus, z2")
    True
    """
    fixed = [n for n in GROUP_NAMES if not _FAMILY.fullmatch(n)]
    return ", ".join(fixed) + ", cN or dN for any N >= 1 (c4, d4, c8, …); case-insensitive"


def _spatial_size(input_shape: Sequence[int] | None, module: str) -> tuple[int, int] | None:
    """``(H, W)`` from ``(…, H, W)``; ``None`` when no shape is given."""
    if input_shape is None:
        return None
    try:
        shape = tuple(int(s) for s in input_shape)
    except (TypeError, ValueError):
        raise ShapeError(
            f"{module}: expected an input shape ending in (H, W), got {_describe(input_shape)}"
        ) from None
    if len(shape) < 2 or min(shape[-2:]) < 1:
        raise ShapeError(f"{module}: expected an input shape ending in (H, W), got {shape}")
    return shape[-2], shape[-1]


def _square(size: tuple[int, int], key: str, module: str) -> int:
    height, width = size
    if height != width:
        raise ShapeError(f"{module}: expected a square grid for {key}, got {height}x{width}")
    return height


def _point_group(key: str) -> PointGroup | None:
    """``cN`` / ``dN`` / ``trivial`` as a point group; ``None`` for any other name."""
    if key == "trivial":
        return CyclicGroup(1)
    match = _FAMILY.fullmatch(key)
    if match is None:
        return None
    n = int(match.group(2))
    if n < 1:
        return None
    return CyclicGroup(n) if match.group(1) == "c" else DihedralGroup(n)


def _unknown(name: object, module: str) -> GroupError:
    if isinstance(name, str):
        return GroupError(f"{module}: expected one of {describe_group_names()}, got {name!r}")
    return GroupError(
        f"{module}: expected a group name ({describe_group_names()}) or a Group, got {_describe(name)}"
    )


def parse_group_name(
    name: str | Group, input_shape: Sequence[int] | None = None, *, module: str = "parse_group_name"
) -> Group:
    """The group called ``name`` (case-insensitive), built for inputs of shape ``input_shape``.

    The one parser of group names: the checker's [`group_from_name`][groupattn.check.group_from_name], the layers'
    ``point_group`` argument ([`resolve_point_group`][groupattn.attention.resolve_point_group]) and the
    command lines all go through it.

    Accepted names (see also [`GROUP_NAMES`][groupattn.check.GROUP_NAMES] and [`describe_group_names`][groupattn.groups.describe_group_names]):

    * ``"translations"`` or ``"torus"`` — ``TorusTranslations(H, W)`` (needs ``input_shape``);
    * ``"p4"``, ``"p4m"`` — the roto-translations ``T ⋊ C4`` / ``T ⋊ D4`` of an
      ``H × H`` torus (need a square ``input_shape``);
    * ``"cN"``, ``"dN"`` for any ``N ≥ 1`` — [`CyclicGroup`][groupattn.groups.CyclicGroup] / [`DihedralGroup`][groupattn.groups.DihedralGroup]
      (rotations and reflections about the image centre; with ``input_shape``, groups
      containing the quarter turn need a square grid); ``"trivial"`` is ``C1``;
    * ``"z2"`` — [`GridTranslations`][groupattn.groups.GridTranslations] (all of Z², no size);
    * ``"s5"``, ``"hexagon"``, ``"petersen"`` — the permutation groups of
      [`builtin_groups`][groupattn.groups.builtin_groups] (``input_shape`` is ignored).

    A [`Group`][groupattn.groups.Group] is returned as it is.

    Parameters
    ----------
    name
        A group name or a [`Group`][groupattn.groups.Group].
    input_shape
        ``(B, C, H, W)``, ``(C, H, W)`` or ``(H, W)``: only the last two entries are
        used. Needed for ``translations``, ``torus``, ``p4`` and ``p4m``; optional
        otherwise (then it only checks that rotation groups get a square grid).
    module
        The name the error messages start with (the caller).

    Returns
    -------
    Group

    Raises
    ------
    GroupError
        For an unknown name (the message lists the accepted ones).
    ShapeError
        For a size-dependent name without ``input_shape``, a shape without two
        positive spatial sizes, or a non-square grid for a group with quarter turns.

    Examples
    --------
    >>> parse_group_name("C4") == CyclicGroup(4)
    True
    >>> parse_group_name("translations", (1, 3, 8, 6)) == TorusTranslations(8, 6)
    True
    """
    if isinstance(name, Group):
        return name
    if not isinstance(name, str):
        raise _unknown(name, module)
    from ._catalog import _FIXED_GROUPS  # the catalogue builds on this module's imports

    key = name.strip().lower()
    point_group = _point_group(key)
    if key not in _SIZED and point_group is None and key not in _FIXED_GROUPS:
        raise _unknown(name, module)
    size = _spatial_size(input_shape, module)
    if key in _SIZED:
        if size is None:
            raise ShapeError(
                f"{module}: expected an input shape (…, H, W) for {key!r}, whose translations act on an "
                f"H x W torus, got none"
            )
        if key in ("translations", "torus"):
            return TorusTranslations(*size)
        side = _square(size, key, module)
        return p4(side) if key == "p4" else p4m(side)
    if point_group is not None:
        if size is not None and _has_quarter_turn(point_group):
            _square(size, key, module)
        return point_group
    return _FIXED_GROUPS[key]()


def _has_quarter_turn(point_group: PointGroup) -> bool:
    """Whether the rotations of ``point_group`` include a quarter turn (``n`` divisible by 4)."""
    n = getattr(point_group, "n", 1)
    return int(n) % 4 == 0


def _point_group_from_name(name: str | PointGroup, module: str = "groupattn") -> PointGroup:
    """A point group from an instance or a name (``"C4"``, ``"d4"``, ``"C8"``, ``"trivial"``, …).

    The point-group subset of [`parse_group_name`][groupattn.groups.parse_group_name]: ``cN``, ``dN`` (any ``N ≥ 1``)
    and ``trivial``, case-insensitive.

    Raises
    ------
    GroupError
        For any other name or object (naming ``module``).
    """
    if isinstance(name, PointGroup):
        return name
    if isinstance(name, str):
        point_group = _point_group(name.strip().lower())
        if point_group is not None:
            return point_group
    raise GroupError(
        f"{module}: expected a point group or a name like 'C4' or 'D4' (cN or dN for any N >= 1, or "
        f"'trivial'), got {_describe(name)}"
    )


def group_from_name(name: str | Group, input_shape: Sequence[int]) -> Group:
    """The concrete group called ``name`` for inputs of shape ``input_shape``.

    [`parse_group_name`][groupattn.groups.parse_group_name] with the input shape given (the checker's entry point):
    every name it accepts, case-insensitive.

    Parameters
    ----------
    name
        A name [`parse_group_name`][groupattn.groups.parse_group_name] accepts (``"translations"``, ``"c4"``, ``"d4"``,
        ``"p4"``, ``"p4m"``, …), or a [`Group`][groupattn.groups.Group] (returned as is).
    input_shape
        ``(B, C, H, W)``, ``(C, H, W)`` or ``(H, W)``; only the last two entries are used.

    Raises
    ------
    GroupError
        For an unknown name, a shape without two spatial sizes, or a non-square grid
        with a rotation group (the last two as [`ShapeError`][groupattn.ShapeError]).
    """
    return parse_group_name(name, input_shape, module="group_from_name")
