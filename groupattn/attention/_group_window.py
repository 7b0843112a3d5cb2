"""Group window attention: group self-attention inside non-overlapping windows of a lifted field."""

from __future__ import annotations

from typing import Any

import torch
from einops import rearrange
from torch import nn

from .._errors import ConfigurationError, ShapeError
from ..actions import LiftedField, embed_point_element, point_group_of
from ..contracts import Contract
from ..contracts._module import check_floating_input
from ..groups import (
    GridTranslations,
    Group,
    GroupError,
    PointGroup,
    RotoTranslationGroup,
    TorusTranslations,
)
from ..positional._constants import constant_cache
from ..positional._group import point_group_tables
from ._group_attention import resolve_point_group
from ._kernel import attend

__all__ = ["GroupWindowAttention", "window_orbitals"]


@constant_cache(maxsize=32)
def window_orbitals(point_group: PointGroup, window_size: int) -> tuple[torch.Tensor, int]:
    """The orbital of every (query, key) pair of a lifted ``M × M`` window under ``H``.

    Tokens of a window are ``(h, p)``: a group element and an in-window position ``p``
    (row-major, ``M²`` of them). ``H`` acts about the window's centre,
    ``g·(h, p) = (g h, g·p)``. Since ``H`` acts freely on the group element, the orbit of a
    pair ``((h, p), (k, q))`` is identified by its representative with ``h = e``:
    ``(h⁻¹k, h⁻¹·p, h⁻¹·q)``.

    Returns
    -------
    index, count
        ``index``: long ``(|H|·M², |H|·M²)`` (rows ``h·M² + p``, columns ``k·M² + q``),
        the orbital of each pair; ``count = |H|·M⁴`` orbitals.

    Raises
    ------
    GroupError
        For a point group that does not act exactly on the grid (C8, …).
    """
    if not point_group.acts_exactly_on_grid:
        raise GroupError(
            f"window_orbitals: expected a point group acting exactly on the grid, got {point_group.name}"
        )
    m = window_size
    tables = point_group_tables(point_group)
    g = point_group.order()
    mats = tables.matrices.round().long()  # (|H|, 2, 2): matrix of h⁻¹ on (y, x) offsets
    ys, xs = torch.meshgrid(torch.arange(m), torch.arange(m), indexing="ij")
    # doubled coordinates about the window centre: exact integers for even and odd M
    centred = torch.stack([2 * ys.reshape(-1) - (m - 1), 2 * xs.reshape(-1) - (m - 1)], -1)
    moved = torch.einsum("gab,pb->gpa", mats, centred)  # (|H|, M², 2): h⁻¹·p, doubled
    moved = (moved + (m - 1)) // 2
    position = moved[..., 0] * m + moved[..., 1]  # (|H|, M²): index of h⁻¹·p
    rel = tables.relative  # (|H|, |H|): h⁻¹k
    n = m * m
    index = (
        rel[:, None, :, None] * n * n + position[:, :, None, None] * n + position[:, None, None, :]
    )  # (|H|, M², |H|, M²)
    return index.reshape(g * n, g * n).contiguous(), g * n * n


class GroupWindowAttention(nn.Module):
    """Group self-attention in non-overlapping ``M × M`` windows of a lifted field.

    ``(B, dim, |H|, S, S) → (B, dim, |H|, S, S)``. The grid is tiled by ``M × M`` windows
    (``M`` divides the side), optionally after a circular shift by ``shift`` (``0`` or
    ``M / 2``); every token ``(h, p)`` of a window attends to all ``|H|·M²`` tokens
    ``(k, q)`` of its window with a learned bias per *orbital* of the pair under ``H``
    acting about the window's centre (see [`window_orbitals`][groupattn.attention.window_orbitals]).

    Why it is exact: a rotation or reflection about the grid centre maps every window of
    the tiling onto a window (``M`` divides the side; a shift by ``M / 2`` gives a tiling
    of the torus that is mapped onto itself too, since ``−M/2 ≡ M/2 mod M``) and acts on
    the in-window positions as the same rotation about the window's centre, and on the
    group axis by left multiplication. Attention is equivariant to any permutation of a
    window's tokens that leaves the bias unchanged, and the bias is constant on orbitals.
    Any other shift would give a tiling that rotations do not preserve (refused).

    Contract: equivariant ``LiftedField(H) → LiftedField(H)`` under the subgroups of
    ``H`` (about the grid centre) and under torus translations by multiples of ``M``
    (``TorusTranslations(h, w, stride=s)`` with ``M | s``); *breaks* under other
    translations and under ``T ⋊ H`` (the windows are fixed); *breaks* under a point
    group not contained in ``H`` (the C1 baseline's bias is a free table per pair).

    Shapes: ``(B, dim, |H|, S, S) → (B, dim, |H|, S, S)``; square grids when ``H`` has
    quarter turns.

    Parameters
    ----------
    dim
        Width ``C`` per group element.
    point_group
        ``H`` (instance or name); must act exactly on the grid (C1, C2, C4, D1, D2, D4).
    num_heads
        Number of heads (``dim`` divisible by it).
    window_size
        ``M``.
    shift
        ``0`` or ``M // 2`` (``M`` even): the circular shift of the tiling (Swin's shifted
        windows, without a mask: the torus).
    init_std
        Standard deviation of the initial bias table.

    Raises
    ------
    ConfigurationError
        For non-positive sizes, ``dim`` not divisible by ``num_heads``, or a shift other
        than ``0`` and ``M / 2``.
    GroupError
        For a point group not acting exactly on the grid.
    ShapeError
        In ``forward``: a wrong shape, a non-square grid under quarter turns, or a side
        not divisible by ``M``.
    """

    orbital_index: torch.Tensor

    def __init__(
        self,
        dim: int,
        point_group: PointGroup | str = "C4",
        num_heads: int = 1,
        window_size: int = 4,
        shift: int = 0,
        init_std: float = 1.0,
    ) -> None:
        super().__init__()
        name = "GroupWindowAttention"
        self.point_group = resolve_point_group(point_group, name)
        if not self.point_group.acts_exactly_on_grid:
            raise GroupError(
                f"{name}: expected a point group acting exactly on the grid, got {self.point_group.name}"
            )
        if dim < 1 or num_heads < 1 or window_size < 1:
            raise ConfigurationError(
                f"{name}: expected positive dim, num_heads and window_size, got {dim}, {num_heads}, {window_size}"
            )
        if dim % num_heads:
            raise ConfigurationError(
                f"{name}: expected dim divisible by num_heads, got {dim} and {num_heads}"
            )
        if shift != 0 and 2 * shift != window_size:
            raise ConfigurationError(
                f"{name}: expected a shift of 0 or window_size / 2 (the only tilings rotations about the "
                f"centre preserve), got {shift} for window {window_size}"
            )
        self.dim, self.num_heads, self.head_dim = dim, num_heads, dim // num_heads
        self.window_size, self.shift = window_size, shift
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        index, count = window_orbitals(self.point_group, window_size)
        self.register_buffer("orbital_index", index.clone(), persistent=False)
        self.table = nn.Parameter(torch.randn(num_heads, count) * init_std)

    def bias(self) -> torch.Tensor:
        """The positional bias ``(heads, |H|·M², |H|·M²)`` gathered from the orbital table."""
        n = self.orbital_index.shape[0]
        flat = self.table.index_select(1, self.orbital_index.reshape(-1))
        return flat.view(self.num_heads, n, n)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        name = "GroupWindowAttention"
        LiftedField(self.point_group).check(x, name, channels=self.dim)
        check_floating_input(x, name)
        b, _, g, height, width = x.shape
        m = self.window_size
        if height % m or width % m:
            raise ShapeError(
                f"{name}: expected a grid divisible by the window {m}, got {height}x{width}"
            )
        if height != width and g > 2:
            raise ShapeError(
                f"{name}: expected a square grid for {self.point_group.name}, got {height}x{width}"
            )
        s = self.shift
        if s:
            x = torch.roll(x, shifts=(-s, -s), dims=(3, 4))
        tokens = rearrange(
            x, "b c g (wy my) (wx mx) -> (b wy wx) (g my mx) c", my=m, mx=m
        )  # (B·windows, |H|·M², C)
        q, k, v = self.qkv(tokens).chunk(3, dim=-1)
        heads = self.num_heads
        q = rearrange(q, "n t (e d) -> n e t d", e=heads)
        k = rearrange(k, "n t (e d) -> n e t d", e=heads)
        v = rearrange(v, "n t (e d) -> n e t d", e=heads)
        out = attend(q, k, v, self.bias().to(x.dtype)[None], module=name)
        out = self.proj(rearrange(out, "n e t d -> n t (e d)"))
        out = rearrange(
            out,
            "(b wy wx) (g my mx) c -> b c g (wy my) (wx mx)",
            b=b,
            wy=height // m,
            wx=width // m,
            g=g,
            my=m,
        )
        if s:
            out = torch.roll(out, shifts=(s, s), dims=(3, 4))
        return out

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """See the class docstring."""
        name = "GroupWindowAttention"
        t = LiftedField(self.point_group)
        m = self.window_size
        if isinstance(group, TorusTranslations | GridTranslations):
            stride = getattr(group, "stride", 1)
            if isinstance(group, TorusTranslations) and stride % m == 0:
                return Contract.equivariant(t, t)
            return Contract.breaks(
                f"{name}: fixed {m}x{m} windows are equivariant only to translations by multiples of {m}, "
                f"got {group.name}",
                t,
                t,
            )
        if isinstance(group, RotoTranslationGroup):
            return Contract.breaks(
                f"{name}: fixed {m}x{m} windows are not equivariant to all translations of {group.name}",
                t,
                t,
            )
        try:
            acting = point_group_of(group)
        except GroupError as err:
            return Contract.unknown(f"{name}: {err}", t)
        if acting is None:
            return Contract.unknown(f"{name}: no rule for {group.name}", t)
        try:
            for gen in acting.generators():
                embed_point_element(gen, self.point_group, name)
        except GroupError:
            return Contract.breaks(
                f"{name}: the window bias is a table per orbital of {self.point_group.name} only, "
                f"not {acting.name}-invariant",
                t,
                t,
            )
        if not acting.acts_exactly_on_grid:
            return Contract.unknown(
                f"{name}: {acting.name} rotations do not map the pixel grid to itself", t
            )
        return Contract.equivariant(t, t)

    def extra_repr(self) -> str:
        return (
            f"{self.dim}, point_group={self.point_group.name}, num_heads={self.num_heads}, "
            f"window_size={self.window_size}, shift={self.shift}"
        )
