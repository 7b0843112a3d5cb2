"""A user-defined group for the tests: the Klein four-group written by hand.

It stands for what a user does to define a new group — subclass ``FiniteGroup`` and
implement a handful of methods — without any change to the library.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from groupattn.groups import FiniteGroup, GroupElement, GroupError


class KleinFour(FiniteGroup):
    """Z_2 x Z_2 written by hand: elements are pairs of bits, composition is xor."""

    name = "V4"

    def key(self) -> Hashable:
        return "V4"

    def _identity(self) -> Any:
        return (0, 0)

    def _compose(self, a: Any, b: Any) -> Any:
        return (a[0] ^ b[0], a[1] ^ b[1])

    def _inverse(self, a: Any) -> Any:
        return a

    def _validate(self, value: Any) -> Any:
        if value not in {(0, 0), (0, 1), (1, 0), (1, 1)}:
            raise GroupError(f"V4: expected a pair of bits, got {value!r}")
        return tuple(value)

    def generators(self) -> list[GroupElement]:
        return [self.element((1, 0)), self.element((0, 1))]

    def _enumerate(self) -> list[Any]:
        return [(0, 0), (1, 0), (0, 1), (1, 1)]
