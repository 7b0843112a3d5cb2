"""The acting group of a registered model, built for a concrete input size."""

from __future__ import annotations

from collections.abc import Sequence

from ..groups import CyclicGroup, DihedralGroup, Group, GroupError, TorusTranslations, p4, p4m

__all__ = ["GROUP_NAMES", "resolve_group"]

GROUP_NAMES: tuple[str, ...] = ("translations", "p4", "p4m", "c4", "d4")
"""The group names of :class:`groupattn.models.ModelSpec` that :func:`resolve_group` understands."""


def resolve_group(name: str | Group, input_shape: Sequence[int]) -> Group:
    """The group called ``name`` acting on images of ``input_shape`` ``(C, H, W)``.

    ``"translations"`` is the circular translation group of the ``H × W`` torus,
    ``"p4"``/``"p4m"`` add the quarter-turns (and reflections) of a square ``H × H``
    torus, ``"c4"``/``"d4"`` are the point groups alone. A :class:`Group` is returned as is.

    Raises
    ------
    GroupError
        For an unknown name, or a rotation group on a non-square image.
    """
    if isinstance(name, Group):
        return name
    if len(input_shape) != 3:
        raise GroupError(f"resolve_group: expected an input shape (C, H, W), got {tuple(input_shape)}")
    _, height, width = (int(s) for s in input_shape)
    key = name.lower()
    if key == "translations":
        return TorusTranslations(height, width)
    if key not in GROUP_NAMES:
        raise GroupError(f"resolve_group: expected one of {list(GROUP_NAMES)}, got {name!r}")
    if height != width:
        raise GroupError(f"resolve_group: expected a square image for the group {name}, got {height}x{width}")
    if key == "p4":
        return p4(height)
    if key == "p4m":
        return p4m(height)
    return CyclicGroup(4) if key == "c4" else DihedralGroup(4)
