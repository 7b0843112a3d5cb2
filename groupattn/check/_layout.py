"""Axis layouts: which axes of a tensor are batch, channel, spatial or point-group axes.

A *layout* describes every dimension of a tensor as a product of *atoms*, outermost
first. An atom is one of

- ``B`` (batch) and ``C`` (channels, or any axis the group does not move),
- ``Y`` and ``X`` (the two spatial axes of a grid, moved by translations and rotations),
- ``K`` (a point-group axis in the regular representation: lifted fields, regular channels),
- ``Z`` (an axis the group moves in a way the checker no longer tracks).

A flattened token axis ``(B, N, C)`` over an ``h × w`` grid is the dimension
``(Y h)(X w)``; an attention matrix ``(B, N, N)`` has two such dimensions, moved
jointly. The group acts on a tensor through its layout ([`LayoutField`][groupattn.check.LayoutField]), so the
verifier can move any tensor the checker has typed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

from ..actions import (
    FieldType,
    GridField,
    InvariantField,
    LiftedField,
    RegularRepresentation,
    TokenField,
    point_group_of,
    spatial_element,
    transform_grid,
)
from ..groups import Group, GroupError, PointGroup

__all__ = ["Atom", "LayoutField", "describe_layout", "field_from_layout", "layout_from_field"]


class Atom(NamedTuple):
    """One factor of a tensor dimension: its ``kind`` (B, C, Y, X, K, Z) and ``size``."""

    kind: str
    size: int


Dim = tuple[Atom, ...]
Layout = tuple[Dim, ...]

SPATIAL_KINDS = frozenset({"Y", "X", "Z"})


def moves(atom: Atom, group: Group | None) -> bool:
    """Whether ``group`` moves positions along ``atom``."""
    if atom.kind in SPATIAL_KINDS:
        return True
    if atom.kind == "K":
        return group is None or _point_group(group) is not None
    return False


def _point_group(group: Group) -> PointGroup | None:
    try:
        return point_group_of(group)
    except GroupError:
        return None


def dim_size(dim: Dim) -> int:
    """The size of a dimension: the product of its atom sizes (1 for no atoms)."""
    return math.prod(a.size for a in dim)


def channel_dim(size: int, kind: str = "C") -> Dim:
    """A dimension of ``size`` unmoved entries (no atom when ``size == 1``)."""
    return (Atom(kind, size),) if size != 1 else ()


def invariant_layout(shape: tuple[int, ...]) -> Layout:
    """A layout whose every axis is unmoved (batch first)."""
    return tuple(channel_dim(s, "B" if i == 0 else "C") for i, s in enumerate(shape))


def is_moving(layout: Layout, group: Group | None) -> bool:
    """Whether the group moves any entry of a tensor with this layout."""
    return any(moves(a, group) for dim in layout for a in dim)


def describe_layout(layout: Layout | None) -> str:
    """E.g. ``(B2, C4, Y8, X8)`` or ``(B2, Y4·X4, C16)``."""
    if layout is None:
        return "?"
    parts = ["·".join(f"{a.kind}{a.size}" for a in dim) or "1" for dim in layout]
    return "(" + ", ".join(parts) + ")"


def layout_from_field(field: FieldType | None, shape: tuple[int, ...]) -> Layout | None:
    """The layout of a tensor of ``shape`` with field type ``field`` (``None`` if not expressible)."""
    if field is None:
        return None
    if isinstance(field, InvariantField) or field.is_invariant:
        return invariant_layout(shape)
    if isinstance(field, GridField) and len(shape) == 4:
        b, c, h, w = shape
        channels = _channel_atoms(field.channels, c)
        if channels is None:
            return None
        return (channel_dim(b, "B"), channels, (Atom("Y", h),), (Atom("X", w),))
    if isinstance(field, LiftedField) and len(shape) == 5:
        b, c, k, h, w = shape
        channels = _channel_atoms(field.channels, c)
        if channels is None:
            return None
        return (channel_dim(b, "B"), channels, (Atom("K", k),), (Atom("Y", h),), (Atom("X", w),))
    if isinstance(field, TokenField) and len(shape) == 3 and field.prefix == 0:
        b, n, c = shape
        h, w = field.grid
        tokens: list[Atom] = []
        if field.point_group is not None:
            tokens.append(Atom("K", field.point_group.order()))
        tokens += [Atom("Y", h), Atom("X", w)]
        if math.prod(a.size for a in tokens) != n:
            return None
        channels = _channel_atoms(field.channels, c)
        if channels is None:
            return None
        return (channel_dim(b, "B"), tuple(tokens), channels)
    if isinstance(field, LayoutField):
        if tuple(dim_size(d) for d in field.layout) == tuple(shape):
            return field.layout
        return None
    return None


def _channel_atoms(channels: Any, size: int) -> Dim | None:
    if (
        channels is None
        or getattr(channels, "is_trivial", False)
        or type(channels).__name__ == "TrivialRepresentation"
    ):
        return channel_dim(size)
    if isinstance(channels, RegularRepresentation):
        n = channels.group.order()
        if channels.dim != size:
            return None
        return tuple(
            a for a in (Atom("C", channels.multiplicity), Atom("K", int(n or 1))) if a.size != 1
        )
    return None


def field_from_layout(layout: Layout | None, group: Group | None = None) -> FieldType | None:
    """The library field type of a layout ([`LayoutField`][groupattn.check.LayoutField] when there is none)."""
    if layout is None:
        return None
    if not is_moving(layout, group):
        return InvariantField()
    kinds = [tuple(a.kind for a in dim) for dim in layout]
    pg = _point_group(group) if group is not None else None
    first_fixed = not any(moves(a, group) for a in layout[0]) if layout else False
    if len(layout) == 4 and first_fixed and kinds[2:] == [("Y",), ("X",)]:
        if all(k == "C" for k in kinds[1]):
            return GridField()
        if kinds[1] in (("C", "K"), ("K",)) and pg is not None and layout[1][-1].size == pg.order():
            mult = layout[1][0].size if len(layout[1]) == 2 else 1
            return GridField(RegularRepresentation(pg, mult))
    if (
        len(layout) == 5
        and first_fixed
        and all(k == "C" for k in kinds[1])
        and kinds[2:] == [("K",), ("Y",), ("X",)]
        and pg is not None
        and layout[2][0].size == pg.order()
    ):
        return LiftedField(pg)
    if len(layout) == 3 and first_fixed and all(k == "C" for k in kinds[2]):
        grid = {a.kind: a.size for a in layout[1]}
        if kinds[1] == ("Y", "X"):
            return TokenField((grid["Y"], grid["X"]))
        if kinds[1] == ("K", "Y", "X") and pg is not None and grid["K"] == pg.order():
            return TokenField((grid["Y"], grid["X"]), point_group=pg)
    return LayoutField(layout)


@dataclass(frozen=True)
class LayoutField(FieldType):
    """A field type given by a layout: the group moves every ``Y``/``X`` pair of atoms
    like a grid, every ``K`` atom by the left-regular representation, and nothing else.

    Parameters
    ----------
    layout
        One tuple of [`Atom`][groupattn.check.Atom] per tensor dimension.
    """

    layout: Layout = ()

    def check(self, x: torch.Tensor, module: str = "LayoutField") -> None:
        expected = tuple(dim_size(d) for d in self.layout)
        if tuple(x.shape) != expected:
            raise GroupError(
                f"{module}: expected a tensor of shape {expected} {describe_layout(self.layout)}, got {tuple(x.shape)}"
            )

    def act(self, group: Group, g: Any, x: torch.Tensor) -> torch.Tensor:
        self.check(x)
        atoms = [a for dim in self.layout for a in dim]
        if any(a.kind == "Z" for a in atoms):
            raise GroupError(
                f"LayoutField: expected a tracked layout, got {describe_layout(self.layout)}"
            )
        se = spatial_element(group, g)
        xa = x.reshape([a.size for a in atoms]) if atoms else x.reshape(())
        ys = [i for i, a in enumerate(atoms) if a.kind == "Y"]
        xs = [i for i, a in enumerate(atoms) if a.kind == "X"]
        for iy, ix in zip(ys, xs):
            xa = transform_grid(xa.movedim((iy, ix), (-2, -1)), se, "LayoutField").movedim(
                (-2, -1), (iy, ix)
            )
        extra = ys[len(xs) :] + xs[len(ys) :]
        for i in extra:
            if se.point is not None:
                raise GroupError(
                    f"LayoutField: expected paired spatial axes for a rotation, got {describe_layout(self.layout)}"
                )
            shift = se.translation[0] if atoms[i].kind == "Y" else se.translation[1]
            xa = torch.roll(xa, shifts=shift, dims=i)
        if se.point is not None and se.point_group is not None:
            for i, a in enumerate(atoms):
                if a.kind != "K":
                    continue
                if a.size != se.point_group.order():
                    raise GroupError(
                        f"LayoutField: expected a group axis of size {se.point_group.order()}, got {a.size}"
                    )
                perm = LiftedField(se.point_group).group_axis_permutation(group, g).to(x.device)
                xa = xa.index_select(i, perm)
        return xa.reshape(x.shape)

    def describe(self) -> str:
        return "layout" + describe_layout(self.layout)


class ProbeResult(NamedTuple):
    """Outcome of ``probe_layout``: the output layout and what went wrong, if anything."""

    layout: Layout | None
    dropped: str | None
    untracked: str | None


_AXIS_NAMES = {
    "Y": "vertical spatial",
    "X": "horizontal spatial",
    "K": "point-group",
    "Z": "spatial",
}


def probe_layout(layout: Layout, source: torch.Tensor, group: Group | None) -> ProbeResult:
    """Infer the layout of ``out[i] = in[source[i]]`` from the flat source index of each entry.

    ``source`` has the output's shape and holds, for every output entry, the flat index
    of the input entry it copies (found by running the data-movement operation on
    ``arange``). Moved atoms must survive whole, each along a single output dimension in
    mixed-radix order; unmoved atoms may be split, sliced or reordered freely.

    Returns
    -------
    ProbeResult
        ``dropped`` explains a moved axis that was indexed or sliced away (a break);
        ``untracked`` explains a moved axis split or reordered in a way not tracked.
    """
    atoms = [a for dim in layout for a in dim]
    strides: list[int] = []
    running = 1
    for a in reversed(atoms):
        strides.append(running)
        running *= a.size
    strides.reverse()
    out_shape = tuple(source.shape)
    placed: dict[int, list[tuple[int, Atom]]] = {d: [] for d in range(len(out_shape))}
    for a, stride in zip(atoms, strides):
        if a.size == 1 or not moves(a, group):
            continue
        coord = torch.div(source, stride, rounding_mode="floor") % a.size
        name = _AXIS_NAMES.get(a.kind, a.kind)
        if coord.numel() == 0 or int(torch.unique(coord).numel()) != a.size:
            kept = int(torch.unique(coord).numel()) if coord.numel() else 0
            what = (
                "picks a fixed position"
                if kept <= 1
                else f"keeps only {kept} of {a.size} positions"
            )
            return ProbeResult(None, f"{what} along the {name} axis ({a.kind}{a.size})", None)
        varying = [
            d
            for d in range(len(out_shape))
            if out_shape[d] > 1 and bool((coord.diff(dim=d) != 0).any())
        ]
        if len(varying) != 1:
            return ProbeResult(
                None, None, f"splits the {name} axis ({a.kind}{a.size}) over several dimensions"
            )
        d = varying[0]
        seq = coord.movedim(d, 0).reshape(out_shape[d], -1)[:, 0]
        changes = torch.nonzero(seq != seq[0])
        run = int(changes[0]) if changes.numel() else out_shape[d]
        pattern = (torch.arange(out_shape[d]) // run) % a.size
        if not torch.equal(seq.cpu(), pattern):
            return ProbeResult(None, None, f"reorders the {name} axis ({a.kind}{a.size})")
        placed[d].append((run, a))
    # unmoved coordinates of the source must not depend on where the moved atoms are
    for a, stride in zip(atoms, strides):
        if a.size == 1 or moves(a, group):
            continue
        coord = torch.div(source, stride, rounding_mode="floor") % a.size
        for d, entries in placed.items():
            for run, m in entries:
                outer = out_shape[d] // (run * m.size)
                blocks = coord.unflatten(d, (outer, m.size, run))
                if not bool((blocks == blocks.narrow(d + 1, 0, 1)).all()):
                    return ProbeResult(
                        None,
                        None,
                        f"selects channels depending on the position along the {_AXIS_NAMES.get(m.kind, m.kind)} axis",
                    )
    dims: list[Dim] = []
    for d, size in enumerate(out_shape):
        fill = "B" if d == 0 and layout and layout[0] and layout[0][0].kind == "B" else "C"
        entries = sorted(placed[d], key=lambda e: e[0])
        inner: list[Atom] = []
        expected = 1
        for run, a in entries:
            if run % expected:
                return ProbeResult(
                    None,
                    None,
                    f"interleaves the {_AXIS_NAMES.get(a.kind, a.kind)} axis with another",
                )
            if run > expected:
                inner.append(Atom(fill, run // expected))
            inner.append(a)
            expected = run * a.size
        if size % expected:
            return ProbeResult(
                None, None, "rearranges moved axes in a way the checker does not track"
            )
        if size > expected:
            inner.append(Atom(fill, size // expected))
        dims.append(tuple(reversed(inner)))
    return ProbeResult(tuple(dims), None, None)
