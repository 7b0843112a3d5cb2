"""How the supported spatial groups move pixels: decomposition into translation and point parts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .._errors import ShapeError
from ..groups import (
    CyclicGroup,
    DihedralGroup,
    GridTranslations,
    Group,
    GroupElement,
    GroupError,
    PointGroup,
    RotoTranslationGroup,
    TorusTranslations,
    integer_matrix,
    real_matrix,
)

__all__ = [
    "SpatialElement",
    "act_on_coordinates",
    "check_grid_size",
    "embed_point_element",
    "point_group_of",
    "spatial_element",
    "transform_grid",
]


@dataclass(frozen=True)
class SpatialElement:
    """A group element read as ``p ↦ h·(p − c) + c + t`` on a grid with centre ``c``.

    Attributes
    ----------
    translation
        The offset ``t = (dy, dx)``.
    point_group
        The point group ``h`` belongs to, or ``None`` for a pure translation.
    point
        The point-group element ``h`` (``None`` for a pure translation).
    """

    translation: tuple[int, int]
    point_group: PointGroup | None
    point: GroupElement | None


def point_group_of(group: Group) -> PointGroup | None:
    """The point-group part of a spatial group (``None`` for pure translations).

    Raises
    ------
    GroupError
        If the group does not act on the plane (e.g. a permutation group).
    """
    if isinstance(group, PointGroup):
        return group
    if isinstance(group, RotoTranslationGroup):
        return group.point_group
    if isinstance(group, TorusTranslations | GridTranslations):
        return None
    raise GroupError(
        f"{group.name}: expected a group acting on the plane (translations, C_n, D_n, "
        f"T⋊C_n, T⋊D_n), got {type(group).__name__}"
    )


def spatial_element(group: Group, g: Any) -> SpatialElement:
    """Split ``g`` into its translation and point-group parts (see [`SpatialElement`][groupattn.actions.SpatialElement])."""
    e = group.element(g)
    if isinstance(group, TorusTranslations):
        s = group.stride
        return SpatialElement((e.value[0] * s, e.value[1] * s), None, None)
    if isinstance(group, GridTranslations):
        return SpatialElement(tuple(e.value), None, None)  # type: ignore[arg-type]
    if isinstance(group, PointGroup):
        return SpatialElement((0, 0), group, e)
    if isinstance(group, RotoTranslationGroup):
        t, h = e.value
        return SpatialElement(tuple(t), group.point_group, group.point_group.element(h))
    point_group_of(group)  # raises with a clear message
    raise AssertionError("unreachable")  # pragma: no cover


def embed_point_element(
    h: GroupElement, target: PointGroup, module: str = "groupattn"
) -> GroupElement:
    """Map a point-group element into ``target`` (C_n ⊂ D_n, C1 ⊂ anything, equal groups).

    Raises
    ------
    GroupError
        If ``h``'s group is not a subgroup of ``target`` in this sense.
    """
    src = h.group
    if src == target:
        return h
    assert isinstance(src, PointGroup)
    if src.n == 1 and isinstance(src, CyclicGroup):
        return target.identity()
    if isinstance(src, CyclicGroup) and isinstance(target, DihedralGroup | CyclicGroup):
        if target.n % src.n == 0:
            return target.make(src.rotation(h) * (target.n // src.n))
    if (
        isinstance(src, DihedralGroup)
        and isinstance(target, DihedralGroup)
        and target.n % src.n == 0
    ):
        return target.make(src.rotation(h) * (target.n // src.n), src.is_reflection(h))
    raise GroupError(
        f"{module}: expected an acting point group contained in {target.name}, got {src.name}"
    )


def check_grid_size(group: Group, height: int, width: int, module: str = "groupattn") -> None:
    """Raise if a finite translation group does not match the grid it acts on.

    ``TorusTranslations(h, w, stride=s)`` acts on ``(h·s) × (w·s)`` grids and a finite
    roto-translation group ``T ⋊ H`` of side ``n`` on ``n × n`` grids; the infinite
    groups (``GridTranslations``, point groups) act on any size.

    Raises
    ------
    GroupError
        Naming ``module``, the expected and the actual grid size.
    """
    expected: tuple[int, int] | None = None
    if isinstance(group, TorusTranslations):
        expected = (group.height * group.stride, group.width * group.stride)
    elif isinstance(group, RotoTranslationGroup) and group.size is not None:
        expected = (group.size, group.size)
    if expected is not None and expected != (height, width):
        raise ShapeError(
            f"{module}: expected a {expected[0]}x{expected[1]} grid for {group.name}, "
            f"got {height}x{width}"
        )


def check_acts_on_grid(
    group: Group, input_shape: tuple[int, ...], module: str = "groupattn"
) -> None:
    """Raise unless ``group`` moves images of ``input_shape`` exactly (a pure permutation).

    Applies every generator to a ``meta`` tensor of that shape (no memory): a point group
    that does not act exactly on pixels (C5, C8, …), a quarter turn of a non-square grid,
    or a group without a spatial action is refused before any work.

    Parameters
    ----------
    group
        The acting group.
    input_shape
        ``(..., H, W)``, e.g. ``(C, H, W)`` of one image.
    module
        Named in the message (e.g. ``"--group"``).

    Raises
    ------
    GroupError
        Naming ``module``, what the group would need and what it got.
    """
    probe = torch.empty(tuple(input_shape), device="meta")
    for g in group.generators():
        transform_grid(probe, spatial_element(group, g), module=module)


def transform_grid(
    x: torch.Tensor, element: SpatialElement, module: str = "groupattn"
) -> torch.Tensor:
    """Apply a spatial element to the last two axes of ``x`` exactly (a pure permutation).

    The point part rotates (``rot90``) and reflects (``flip`` of the last axis) about
    the grid's centre; the translation rolls circularly.

    Parameters
    ----------
    x
        Tensor of shape ``(..., H, W)``.
    element
        From [`spatial_element`][groupattn.actions.spatial_element].

    Raises
    ------
    GroupError
        For a rotation of a non-square grid or a point group that does not act exactly.
    """
    if element.point is not None and element.point_group is not None:
        pg = element.point_group
        if not pg.acts_exactly_on_grid:
            raise GroupError(
                f"{module}: expected a point group acting exactly on the pixel grid "
                f"(C1, C2, C4, D1, D2, D4), got {pg.name}; use an interpolating rotation instead"
            )
        quarter = pg.rotation(element.point) * (4 // pg.n) % 4
        if quarter % 2 == 1 and x.shape[-1] != x.shape[-2]:
            raise ShapeError(
                f"{module}: expected a square grid for a 90° rotation, got {x.shape[-2]}x{x.shape[-1]}"
            )
        if pg.is_reflection(element.point):
            x = torch.flip(x, dims=(-1,))
        if quarter:
            x = torch.rot90(x, quarter, dims=(-2, -1))
    dy, dx = element.translation
    if dy or dx:
        x = torch.roll(x, shifts=(dy, dx), dims=(-2, -1))
    return x


def act_on_coordinates(
    group: Group,
    g: Any,
    coords: torch.Tensor,
    center: tuple[float, float] | None = None,
    modulo: tuple[int, int] | None = None,
) -> torch.Tensor:
    """Move ``(y, x)`` coordinates by ``g``: ``p ↦ h·(p − c) + c + t``.

    Integer coordinates under translations and point groups acting exactly on the grid
    (C4, D4, …) stay integers and are computed exactly; otherwise the result is float
    (any rotation angle: C8, C16, …).

    Parameters
    ----------
    group, g
        A spatial group and one of its elements.
    coords
        Tensor of shape ``(..., 2)`` in ``(y, x)`` order.
    center
        Rotation centre ``c``; the origin by default.
    modulo
        Reduce the result modulo ``(h, w)`` (a torus).

    Returns
    -------
    torch.Tensor
        Shape ``(..., 2)``.
    """
    if coords.shape[-1:] != (2,):
        raise ShapeError(
            f"act_on_coordinates: expected coordinates of shape (..., 2), got {tuple(coords.shape)}"
        )
    se = spatial_element(group, g)
    out = coords
    if se.point is not None and se.point_group is not None:
        pg = se.point_group
        exact = pg.acts_exactly_on_grid and not coords.is_floating_point() and center is None
        if exact:
            m = torch.tensor(integer_matrix(pg, se.point), dtype=coords.dtype, device=coords.device)
            out = coords @ m.T
        else:
            dtype = coords.dtype if coords.is_floating_point() else torch.float64
            m = torch.tensor(real_matrix(pg, se.point), dtype=dtype, device=coords.device)
            c = torch.tensor(center or (0.0, 0.0), dtype=dtype, device=coords.device)
            out = (coords.to(dtype) - c) @ m.T + c
    t = torch.tensor(se.translation, dtype=out.dtype, device=out.device)
    out = out + t
    if modulo is not None:
        out = torch.remainder(out, torch.tensor(modulo, dtype=out.dtype, device=out.device))
    return out
