"""Finite point groups of the plane: cyclic C_n and dihedral D_n."""

from __future__ import annotations

import random
from collections.abc import Hashable
from typing import Any

from ._base import FiniteGroup, GroupElement, GroupError, _check_int, _describe

__all__ = ["CyclicGroup", "DihedralGroup", "PointGroup"]


class PointGroup(FiniteGroup):
    """Base class of the finite subgroups of O(2) used as point groups.

    An element is a rotation by ``2π r / n`` possibly preceded by the reflection
    ``(y, x) ↦ (y, −x)``. [`rotation`][groupattn.groups.PointGroup.rotation] and [`is_reflection`][groupattn.groups.PointGroup.is_reflection] read these off.
    Grids are acted on exactly (by ``rot90`` and ``flip``) when ``n`` divides 4.
    """

    n: int

    def rotation(self, g: Any) -> int:
        """The rotation count ``r`` of ``g`` (rotation by ``2π r / n``)."""
        raise NotImplementedError

    def is_reflection(self, g: Any) -> bool:
        """Whether ``g`` reverses orientation."""
        raise NotImplementedError

    @property
    def acts_exactly_on_grid(self) -> bool:
        """Whether every element maps the integer grid onto itself (``n`` divides 4)."""
        return 4 % self.n == 0

    def make(self, rotation: int, reflection: bool = False) -> GroupElement:
        """The element "rotate by ``rotation`` steps after reflecting if ``reflection``"."""
        raise NotImplementedError


class CyclicGroup(PointGroup):
    """The cyclic group C_n of rotations by multiples of ``2π / n``.

    Elements are the integers ``0 … n−1`` (rotation count); composition is addition mod
    ``n``. ``CyclicGroup(1)`` is the trivial group.

    Parameters
    ----------
    n
        The order, ``n ≥ 1``.
    """

    def __init__(self, n: int) -> None:
        n = _check_int("CyclicGroup", "the order n", n)
        if n < 1:
            raise GroupError(f"CyclicGroup: expected an order n >= 1, got {n}")
        self.n = n
        self.name = f"C{n}"

    def key(self) -> Hashable:
        return self.n

    def _identity(self) -> int:
        return 0

    def _compose(self, a: int, b: int) -> int:
        return (a + b) % self.n

    def _inverse(self, a: int) -> int:
        return (-a) % self.n

    def _validate(self, value: Any) -> int:
        v = _check_int(self.name, "an element (rotation count)", value)
        if not 0 <= v < self.n:
            raise GroupError(f"{self.name}: expected an element in [0, {self.n}), got {v}")
        return v

    def _enumerate(self) -> list[int]:
        return list(range(self.n))

    def _order_without_enumeration(self) -> int:
        return self.n

    def _sample(self, rng: random.Random) -> int:
        # the same draw as rng.choice(list(range(n))), without the list
        return rng.randrange(self.n)

    def generators(self) -> list[GroupElement]:
        return [self.element(1 % self.n)]

    def word(self, g: Any) -> list[int]:
        """``[0] * r`` for the rotation ``r`` (the generator is rotation 1); see
        [`FiniteGroup.word`][groupattn.groups.FiniteGroup.word] for the convention."""
        r = int(self.element(g).value)
        return [0] * r if self.n > 1 else []

    def rotation(self, g: Any) -> int:
        return int(self.element(g).value)

    def is_reflection(self, g: Any) -> bool:
        self.element(g)
        return False

    def make(self, rotation: int, reflection: bool = False) -> GroupElement:
        if reflection:
            raise GroupError(f"{self.name}: expected no reflection in a cyclic group, got one")
        return self.element(rotation % self.n)


class DihedralGroup(PointGroup):
    """The dihedral group D_n of order ``2n``: rotations and reflections of a regular n-gon.

    Element ``i = r + n·m`` (``0 ≤ r < n``, ``m ∈ {0, 1}``) is the rotation by
    ``2π r / n`` after ``m`` reflections ``(y, x) ↦ (y, −x)``, i.e. ``ρʳ σᵐ``; the
    order matches escnn's ``dihedral_group(n).elements``. Composition:
    ``(r₁, m₁)(r₂, m₂) = (r₁ + (−1)^{m₁} r₂, m₁ + m₂)``.

    Parameters
    ----------
    n
        The number of rotations, ``n ≥ 1`` (D_1 is a single reflection).
    """

    def __init__(self, n: int) -> None:
        n = _check_int("DihedralGroup", "the rotation order n", n)
        if n < 1:
            raise GroupError(f"DihedralGroup: expected a rotation order n >= 1, got {n}")
        self.n = n
        self.name = f"D{n}"

    def key(self) -> Hashable:
        return self.n

    def _split(self, a: int) -> tuple[int, int]:
        return a % self.n, a // self.n

    def _identity(self) -> int:
        return 0

    def _compose(self, a: int, b: int) -> int:
        r1, m1 = self._split(a)
        r2, m2 = self._split(b)
        r = (r1 + (r2 if m1 == 0 else -r2)) % self.n
        return r + self.n * ((m1 + m2) % 2)

    def _inverse(self, a: int) -> int:
        r, m = self._split(a)
        return a if m == 1 else (-r) % self.n

    def _validate(self, value: Any) -> int:
        v = _check_int(self.name, "an element index", value)
        if not 0 <= v < 2 * self.n:
            raise GroupError(f"{self.name}: expected an element in [0, {2 * self.n}), got {v}")
        return v

    def _enumerate(self) -> list[int]:
        return list(range(2 * self.n))

    def _order_without_enumeration(self) -> int:
        return 2 * self.n

    def _sample(self, rng: random.Random) -> int:
        # the same draw as rng.choice(list(range(2n))), without the list
        return rng.randrange(2 * self.n)

    def generators(self) -> list[GroupElement]:
        """``[ρ, σ]`` (rotation by one step, then the reflection); ``[σ]`` for D_1."""
        gens = [self.element(self.n)]  # the reflection
        if self.n > 1:
            gens.insert(0, self.element(1))
        return gens

    def word(self, g: Any) -> list[int]:
        """``ρʳ σᵐ`` as ``[0] * r + [1] * m`` (``[0] * m`` for D_1); see
        [`FiniteGroup.word`][groupattn.groups.FiniteGroup.word] for the convention."""
        r, m = self._split(int(self.element(g).value))
        if self.n == 1:
            return [0] * m
        return [0] * r + [1] * m

    def rotation(self, g: Any) -> int:
        return int(self.element(g).value) % self.n

    def is_reflection(self, g: Any) -> bool:
        return int(self.element(g).value) >= self.n

    def make(self, rotation: int, reflection: bool = False) -> GroupElement:
        return self.element(rotation % self.n + (self.n if reflection else 0))


def integer_matrix(group: PointGroup, g: Any) -> tuple[tuple[int, int], tuple[int, int]]:
    """The exact integer 2×2 matrix of ``g`` acting on ``(y, x)`` offsets.

    Only defined when the point group maps the integer grid onto itself (``n`` divides 4):
    the rotation by 90° is ``(y, x) ↦ (−x, y)`` — the same sense as ``torch.rot90`` on
    the last two axes — and the reflection is ``(y, x) ↦ (y, −x)``.

    Raises
    ------
    GroupError
        If the group does not act exactly on the grid.
    """
    if not isinstance(group, PointGroup):
        raise GroupError(
            f"integer_matrix: expected a point group (CyclicGroup or DihedralGroup), got {_describe(group)}"
        )
    if not group.acts_exactly_on_grid:
        raise GroupError(
            f"{group.name}: expected a point group acting exactly on the integer grid "
            f"(C1, C2, C4, D1, D2, D4), got {group.name}"
        )
    quarter_turns = group.rotation(g) * (4 // group.n)
    rot = {0: ((1, 0), (0, 1)), 1: ((0, -1), (1, 0)), 2: ((-1, 0), (0, -1)), 3: ((0, 1), (-1, 0))}[
        quarter_turns % 4
    ]
    if group.is_reflection(g):
        # ρ σ: apply σ = diag(1, -1) first.
        return ((rot[0][0], -rot[0][1]), (rot[1][0], -rot[1][1]))
    return rot


def real_matrix(group: PointGroup, g: Any) -> tuple[tuple[float, float], tuple[float, float]]:
    """The orthogonal 2×2 matrix of ``g`` acting on ``(y, x)`` coordinates (any ``n``).

    Rotation by ``θ = 2π r / n``: ``y' = y cos θ − x sin θ``, ``x' = y sin θ + x cos θ``;
    reflection ``(y, x) ↦ (y, −x)`` is applied first.
    """
    import math

    if not isinstance(group, PointGroup):
        raise GroupError(
            f"real_matrix: expected a point group (CyclicGroup or DihedralGroup), got {_describe(group)}"
        )
    if group.acts_exactly_on_grid:
        m = integer_matrix(group, g)
        return ((float(m[0][0]), float(m[0][1])), (float(m[1][0]), float(m[1][1])))
    theta = 2 * math.pi * group.rotation(g) / group.n
    c, s = math.cos(theta), math.sin(theta)
    if group.is_reflection(g):
        return ((c, s), (s, -c))
    return ((c, -s), (s, c))
