"""Translation groups: a finite h×w torus and the infinite integer grid."""

from __future__ import annotations

import random
from collections.abc import Hashable
from typing import Any

from ._base import FiniteGroup, Group, GroupElement, GroupError, _check_int, _check_int_tuple

__all__ = ["GridTranslations", "TorusTranslations"]


class TorusTranslations(FiniteGroup):
    """Translations of an ``h × w`` torus: the group Z_h × Z_w of order ``h·w``.

    Elements are offsets ``(dy, dx)`` with ``0 ≤ dy < h`` and ``0 ≤ dx < w``; negative
    or large offsets passed in are reduced modulo the grid. On images they act by a
    circular roll (a pixel at ``p`` moves to ``p + stride·(dy, dx)``).

    With ``stride > 1`` the group is the subgroup of translations by multiples of
    ``stride`` of an ``(h·stride) × (w·stride)`` image — what a canonicalizer such as
    polyphase anchoring leaves after fixing the phase, and what a strided layer maps
    onto the translations of its coarse output grid.

    Parameters
    ----------
    height, width
        The torus size in units of ``stride``, both ``≥ 1``.
    stride
        Pixels per unit translation on the images acted on.
    """

    def __init__(self, height: int, width: int | None = None, stride: int = 1) -> None:
        height = _check_int("TorusTranslations", "the height", height)
        width = height if width is None else _check_int("TorusTranslations", "the width", width)
        if height < 1 or width < 1:
            raise GroupError(
                f"TorusTranslations: expected a positive grid size, got {height}x{width}"
            )
        stride = _check_int("TorusTranslations", "the stride", stride)
        if stride < 1:
            raise GroupError(f"TorusTranslations: expected a stride >= 1, got {stride}")
        self.height, self.width, self.stride = height, width, stride
        self.name = f"T({height}x{width})" + (f"*{stride}" if stride > 1 else "")

    @property
    def shape(self) -> tuple[int, int]:
        """The torus size ``(h, w)``."""
        return (self.height, self.width)

    def key(self) -> Hashable:
        return (self.shape, self.stride)

    def _identity(self) -> tuple[int, int]:
        return (0, 0)

    def _compose(self, a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
        return ((a[0] + b[0]) % self.height, (a[1] + b[1]) % self.width)

    def _inverse(self, a: tuple[int, int]) -> tuple[int, int]:
        return ((-a[0]) % self.height, (-a[1]) % self.width)

    def _validate(self, value: Any) -> tuple[int, int]:
        dy, dx = _check_int_tuple(self.name, "a translation (dy, dx)", value, 2)
        return (dy % self.height, dx % self.width)

    def _enumerate(self) -> list[tuple[int, int]]:
        return [(i, j) for i in range(self.height) for j in range(self.width)]

    def _order_without_enumeration(self) -> int:
        return self.height * self.width

    def _sample(self, rng: random.Random) -> tuple[int, int]:
        # the same draw as rng.choice(elements in row-major order), without the list
        k = rng.randrange(self.height * self.width)
        return (k // self.width, k % self.width)

    def word(self, g: Any) -> list[int]:
        """``(dy, dx)`` as ``dy`` unit steps down, then ``dx`` unit steps right.

        With ``gens = generators()`` (``(1, 0)`` if ``h > 1``, then ``(0, 1)`` if
        ``w > 1``) the word is ``[iy] * dy + [ix] * dx``; see [`FiniteGroup.word`][groupattn.groups.FiniteGroup.word]
        for the convention.
        """
        dy, dx = self.element(g).value
        iy, ix = 0, (1 if self.height > 1 else 0)
        return [iy] * dy + [ix] * dx

    def generators(self) -> list[GroupElement]:
        """The unit translations ``(1, 0)`` (if ``h > 1``) and ``(0, 1)`` (if ``w > 1``);
        the identity alone for a 1×1 torus."""
        gens = []
        if self.height > 1:
            gens.append(self.element((1, 0)))
        if self.width > 1:
            gens.append(self.element((0, 1)))
        return gens or [self.identity()]


class GridTranslations(Group):
    """Translations of the infinite integer grid Z² (elements ``(dy, dx)``).

    The group is infinite: [`sample`][groupattn.groups.Group.sample] draws offsets uniformly from
    ``[-radius, radius]²``. On finite images it acts by a circular roll, i.e. through
    the quotient torus of the image size.

    Parameters
    ----------
    radius
        Half-width of the box [`sample`][groupattn.groups.Group.sample] draws from.
    """

    def __init__(self, radius: int = 8) -> None:
        self.radius = _check_int("GridTranslations", "the sampling radius", radius)
        self.name = "Z2"

    def key(self) -> Hashable:
        return "Z2"

    def _identity(self) -> tuple[int, int]:
        return (0, 0)

    def _compose(self, a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
        return (a[0] + b[0], a[1] + b[1])

    def _inverse(self, a: tuple[int, int]) -> tuple[int, int]:
        return (-a[0], -a[1])

    def _validate(self, value: Any) -> tuple[int, int]:
        dy, dx = _check_int_tuple(self.name, "a translation (dy, dx)", value, 2)
        return (dy, dx)

    def generators(self) -> list[GroupElement]:
        return [self.element((1, 0)), self.element((0, 1))]

    def _sample(self, rng: random.Random) -> tuple[int, int]:
        r = self.radius
        return (rng.randint(-r, r), rng.randint(-r, r))
