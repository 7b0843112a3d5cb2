"""Direct and semidirect products, and the roto-translation groups p4, p4m, T ⋊ C_n, T ⋊ D_n."""

from __future__ import annotations

import random
from collections.abc import Callable, Hashable
from typing import Any

from ._base import FiniteGroup, Group, GroupElement, GroupError, _describe
from ._point import CyclicGroup, DihedralGroup, PointGroup, integer_matrix
from ._translations import GridTranslations, TorusTranslations

__all__ = [
    "DirectProduct",
    "RotoTranslationGroup",
    "SemidirectProduct",
    "p4",
    "p4m",
]


#: Finite products of at most this order sample by drawing from their element list (as
#: they always did); larger ones draw each component uniformly (also uniform).
_SAMPLE_FROM_LIST_LIMIT = 65_536


def _check_group(name: str, what: str, value: Any) -> Group:
    if not isinstance(value, Group):
        raise GroupError(f"{name}: expected {what} as a Group, got {_describe(value)}")
    return value


def _check_pair(name: str, value: Any) -> tuple[Any, Any]:
    if isinstance(value, GroupElement):
        raise GroupError(
            f"{name}: expected a pair (first, second), got an element of {value.group.name}"
        )
    if not isinstance(value, tuple | list) or len(value) != 2:
        raise GroupError(f"{name}: expected an element as a pair (first, second), got {value!r}")
    return value[0], value[1]


class _ProductBase(Group):
    def __init__(self, first: Group, second: Group) -> None:
        self.first, self.second = first, second

    def key(self) -> Hashable:
        return (self.first, self.second)

    def _identity(self) -> tuple[Any, Any]:
        return (self.first._identity(), self.second._identity())

    def _validate(self, value: Any) -> tuple[Any, Any]:
        a, b = _check_pair(self.name, value)
        return (self.first.element(a).value, self.second.element(b).value)

    def _sample(self, rng: random.Random) -> tuple[Any, Any]:
        return (self.first._sample(rng), self.second._sample(rng))

    @property
    def is_finite(self) -> bool:
        return self.first.is_finite and self.second.is_finite

    def order(self) -> int | None:
        a, b = self.first.order(), self.second.order()
        return None if a is None or b is None else a * b

    def generators(self) -> list[GroupElement]:
        e1, e2 = self.first._identity(), self.second._identity()
        gens = [GroupElement(self, (g.value, e2)) for g in self.first.generators()]
        gens += [GroupElement(self, (e1, h.value)) for h in self.second.generators()]
        return gens

    def split(self, g: Any) -> tuple[GroupElement, GroupElement]:
        """The two components of ``g`` as elements of the factor groups."""
        v = self.element(g).value
        return GroupElement(self.first, v[0]), GroupElement(self.second, v[1])


class _FiniteProductMixin(FiniteGroup):
    first: Group
    second: Group

    def _factors(self) -> tuple[FiniteGroup, FiniteGroup]:
        assert isinstance(self.first, FiniteGroup) and isinstance(self.second, FiniteGroup)
        return self.first, self.second

    def _enumerate(self) -> list[Any]:
        first, second = self._factors()
        return [(a, b) for b in second._values() for a in first._values()]

    def _order_without_enumeration(self) -> int | None:
        first, second = self._factors()
        a = first._order_without_enumeration()
        b = second._order_without_enumeration()
        return None if a is None or b is None else a * b

    def _sample(self, rng: random.Random) -> Any:
        known = self._order_without_enumeration()
        if known is not None and known <= _SAMPLE_FROM_LIST_LIMIT:
            return rng.choice(self._values())
        # (n, h) ↦ pair is a bijection for direct and semidirect products: uniform
        return (self.first._sample(rng), self.second._sample(rng))

    def word(self, g: Any) -> list[int]:
        """The first component's word, then the second's (shifted past the first's generators).

        ``(a, b) = (a, e)·(e, b)`` in direct and semidirect products, and the generators
        are ``(s, e)`` for the first factor's, then ``(e, t)`` for the second's; see
        [`FiniteGroup.word`][groupattn.groups.FiniteGroup.word] for the convention.
        """
        a, b = self.element(g).value
        first, second = self._factors()
        shift = len(first.generators())
        return first.word(a) + [shift + k for k in second.word(b)]


class DirectProduct(_ProductBase):
    """The direct product ``G₁ × G₂``; elements are pairs ``(g₁, g₂)``.

    Use ``make_direct_product`` style construction through this class; when both
    factors are finite the product is a [`FiniteGroup`][groupattn.groups.FiniteGroup] (see
    ``DirectProduct.__new__``).
    """

    def __new__(cls, first: Group, second: Group) -> DirectProduct:
        _check_group("DirectProduct", "the first factor", first)
        _check_group("DirectProduct", "the second factor", second)
        if cls is DirectProduct and first.is_finite and second.is_finite:
            return super().__new__(_FiniteDirectProduct)
        return super().__new__(cls)

    def __init__(self, first: Group, second: Group) -> None:
        super().__init__(first, second)
        self.name = f"{first.name}x{second.name}"

    def _compose(self, a: tuple[Any, Any], b: tuple[Any, Any]) -> tuple[Any, Any]:
        return (self.first._compose(a[0], b[0]), self.second._compose(a[1], b[1]))

    def _inverse(self, a: tuple[Any, Any]) -> tuple[Any, Any]:
        return (self.first._inverse(a[0]), self.second._inverse(a[1]))


class _FiniteDirectProduct(_FiniteProductMixin, DirectProduct):
    pass


class SemidirectProduct(_ProductBase):
    """The semidirect product ``N ⋊_φ H``; elements are pairs ``(n, h)``.

    ``(n₁, h₁)(n₂, h₂) = (n₁ · φ(h₁, n₂), h₁ h₂)`` and
    ``(n, h)⁻¹ = (φ(h⁻¹, n⁻¹), h⁻¹)``.

    Parameters
    ----------
    normal
        The normal subgroup ``N``.
    acting
        The acting group ``H``.
    automorphism
        ``φ(h, n)``: how ``h`` (a raw value of ``H``) acts on ``n`` (a raw value of ``N``);
        it must be an action of ``H`` by automorphisms of ``N``.
    name
        Display name.
    """

    def __new__(cls, normal: Group, acting: Group, *args: Any, **kwargs: Any) -> SemidirectProduct:
        _check_group("SemidirectProduct", "the normal subgroup", normal)
        _check_group("SemidirectProduct", "the acting group", acting)
        if cls is SemidirectProduct and normal.is_finite and acting.is_finite:
            return super().__new__(_FiniteSemidirectProduct)
        return super().__new__(cls)

    def __init__(
        self,
        normal: Group,
        acting: Group,
        automorphism: Callable[[Any, Any], Any],
        name: str | None = None,
    ) -> None:
        super().__init__(normal, acting)
        if not callable(automorphism):
            raise GroupError(
                f"SemidirectProduct: expected the automorphism as a callable φ(h, n), got "
                f"{_describe(automorphism)}"
            )
        self.automorphism = automorphism
        self.name = name or f"{normal.name}⋊{acting.name}"

    def _compose(self, a: tuple[Any, Any], b: tuple[Any, Any]) -> tuple[Any, Any]:
        n = self.first._compose(a[0], self.automorphism(a[1], b[0]))
        return (n, self.second._compose(a[1], b[1]))

    def _inverse(self, a: tuple[Any, Any]) -> tuple[Any, Any]:
        h_inv = self.second._inverse(a[1])
        return (self.automorphism(h_inv, self.first._inverse(a[0])), h_inv)


class _FiniteSemidirectProduct(_FiniteProductMixin, SemidirectProduct):
    pass


class RotoTranslationGroup(SemidirectProduct):
    """Roto-translations ``T ⋊ H`` of the square grid: ``p ↦ h·p + t``.

    ``T`` is the translation group of a ``size × size`` torus (finite) or of Z²
    (``size=None``, infinite, sampled); ``H`` is a point group acting exactly on the
    grid (C1, C2, C4, D1, D2, D4). Elements are pairs ``((dy, dx), h)``. With
    ``H = C4`` this is the wallpaper group p4, with ``H = D4`` it is p4m.

    Parameters
    ----------
    point_group
        The point group ``H``.
    size
        Side of the square torus, or ``None`` for the infinite grid.

    Raises
    ------
    GroupError
        If the point group does not act exactly on the grid.
    """

    def __new__(cls, point_group: PointGroup, size: int | None = None) -> RotoTranslationGroup:
        if size is not None:
            return Group.__new__(_FiniteRotoTranslationGroup)
        return Group.__new__(cls)

    def __init__(self, point_group: PointGroup, size: int | None = None) -> None:
        if not isinstance(point_group, PointGroup):
            raise GroupError(
                f"RotoTranslationGroup: expected a point group (CyclicGroup or DihedralGroup), "
                f"got {_describe(point_group)}"
            )
        if not point_group.acts_exactly_on_grid:
            raise GroupError(
                f"RotoTranslationGroup: expected a point group acting exactly on the square grid "
                f"(n dividing 4), got {point_group.name}"
            )
        translations: Group = GridTranslations() if size is None else TorusTranslations(size, size)
        self.point_group = point_group
        self.size = size
        mod = size

        def rotate(h: int, t: tuple[int, int]) -> tuple[int, int]:
            m = integer_matrix(point_group, h)
            y = m[0][0] * t[0] + m[0][1] * t[1]
            x = m[1][0] * t[0] + m[1][1] * t[1]
            return (y % mod, x % mod) if mod is not None else (y, x)

        special = {"C4": "p4", "D4": "p4m"}.get(point_group.name)
        base = special or f"T⋊{point_group.name}"
        name = f"{base}({size}x{size})" if size is not None else base
        SemidirectProduct.__init__(self, translations, point_group, rotate, name)

    def key(self) -> Hashable:
        return (self.point_group, self.size)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # rebuilt from its arguments: the action is a closure, which neither ``copy`` nor
        # ``pickle`` can carry (models holding a group are deep-copied by ``verify``)
        return (RotoTranslationGroup, (self.point_group, self.size))

    @property
    def translations(self) -> Group:
        """The translation subgroup ``T``."""
        return self.first

    def translation(self, t: tuple[int, int]) -> GroupElement:
        """The pure translation by ``t``."""
        return self.element((t, 0))

    def point(self, h: Any) -> GroupElement:
        """The pure point-group element ``h`` (fixing the origin)."""
        return self.element(((0, 0), self.point_group.element(h).value))


class _FiniteRotoTranslationGroup(_FiniteProductMixin, RotoTranslationGroup):
    pass


def p4(size: int | None = None) -> RotoTranslationGroup:
    """The wallpaper group p4 = T ⋊ C4 on a ``size × size`` torus (``None``: on Z²)."""
    return RotoTranslationGroup(CyclicGroup(4), size)


def p4m(size: int | None = None) -> RotoTranslationGroup:
    """The wallpaper group p4m = T ⋊ D4 on a ``size × size`` torus (``None``: on Z²)."""
    return RotoTranslationGroup(DihedralGroup(4), size)
