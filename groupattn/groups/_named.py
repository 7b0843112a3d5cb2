"""The spatial groups by name, built for a concrete input size."""

from __future__ import annotations

from collections.abc import Sequence

from ._base import Group, GroupError, _describe
from ._point import CyclicGroup, DihedralGroup
from ._products import p4, p4m
from ._translations import TorusTranslations

__all__ = ["GROUP_NAMES", "group_from_name"]

GROUP_NAMES: tuple[str, ...] = ("translations", "c4", "d4", "p4", "p4m")
"""The names :func:`group_from_name` accepts (also the ``group`` of a registered model)."""


def group_from_name(name: str | Group, input_shape: Sequence[int]) -> Group:
    """The concrete group called ``name`` for inputs of shape ``input_shape``.

    Parameters
    ----------
    name
        ``"translations"`` (``TorusTranslations(H, W)``), ``"c4"``, ``"d4"`` (rotations
        and reflections about the image centre), ``"p4"`` or ``"p4m"`` (on an
        ``H × H`` torus); case-insensitive. A :class:`Group` is returned as is.
    input_shape
        ``(B, C, H, W)``, ``(C, H, W)`` or ``(H, W)``; only the last two entries are used.

    Raises
    ------
    GroupError
        For an unknown name, a shape without two spatial sizes, or a non-square grid
        with a rotation group.
    """
    if isinstance(name, Group):
        return name
    if not isinstance(name, str):
        raise GroupError(
            f"group_from_name: expected a group name ({', '.join(GROUP_NAMES)}) or a Group, got {_describe(name)}"
        )
    key = name.lower().strip()
    if key not in GROUP_NAMES:
        raise GroupError(f"group_from_name: expected one of {', '.join(GROUP_NAMES)}, got {name!r}")
    shape = tuple(int(s) for s in input_shape)
    if len(shape) < 2:
        raise GroupError(f"group_from_name: expected an input shape ending in (H, W), got {shape}")
    height, width = shape[-2], shape[-1]
    if key == "translations":
        return TorusTranslations(height, width)
    if height != width:
        raise GroupError(f"group_from_name: expected a square grid for {key}, got {height}x{width}")
    if key == "c4":
        return CyclicGroup(4)
    if key == "d4":
        return DihedralGroup(4)
    return p4(height) if key == "p4" else p4m(height)
