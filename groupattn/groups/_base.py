"""The abstract group interface and group elements."""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from .._errors import GroupError

__all__ = [
    "ENUMERATION_BUDGET",
    "WORD_BUDGET",
    "FiniteGroup",
    "Group",
    "GroupElement",
    "GroupError",
]

#: The most elements ``FiniteGroup.elements`` lists (and ``FiniteGroup.index``,
#: ``FiniteGroup.cayley_table``, … that need the list). A group whose order is known
#: without listing it (a formula, or Schreier–Sims for permutation groups) and exceeds
#: this is refused with ``GroupError`` before anything is listed.
ENUMERATION_BUDGET = 1_000_000
"""The most elements ``elements()`` (and what needs the list) enumerates; larger groups raise ``GroupError``."""

#: The most elements the default ``FiniteGroup.word`` visits in its breadth-first
#: search of the Cayley graph; larger groups are refused with ``GroupError``
#: (permutation groups, cyclic, dihedral, translation and product groups compute words
#: without that search).
WORD_BUDGET = 100_000
"""The most elements the default breadth-first ``FiniteGroup.word`` visits."""


_GENERIC_BASES = frozenset({"Group", "FiniteGroup", "ABC", "object"})


def _public_type_name(obj: object) -> str:
    """The name of ``obj``'s most specific public class (no leading underscore).

    ``p4(8)`` is an instance of a private finite subclass: this gives
    ``"RotoTranslationGroup"``, never the private name (messages must not leak them).
    """
    public = [cls.__name__ for cls in type(obj).__mro__ if not cls.__name__.startswith("_")]
    specific = [name for name in public if name not in _GENERIC_BASES]
    return (specific or public or ["object"])[0]


def _describe(obj: object) -> str:
    """A short description of a value for error messages, without private class names."""
    if obj is None or isinstance(obj, bool | int | float | str):
        text = repr(obj)
        return text if len(text) <= 60 else text[:57] + "..."
    if isinstance(obj, Group):
        return f"the group {obj.name} ({_public_type_name(obj)})"
    if isinstance(obj, GroupElement):
        return f"an element of {obj.group.name}"
    if isinstance(obj, type):
        return f"the class {obj.__name__}" if not obj.__name__.startswith("_") else "a class"
    return f"an instance of {_public_type_name(obj)}"


@dataclass(frozen=True)
class GroupElement:
    """An element of a [`Group`][groupattn.groups.Group], tied to the group it belongs to.

    Elements compare equal and hash equal exactly when they belong to equal groups and
    have equal values, so they can be used as dictionary keys. ``a * b`` composes
    (``a`` after ``b``), ``~a`` inverts.

    Parameters
    ----------
    group
        The group the element belongs to.
    value
        The group's own representation of the element: an ``int`` for cyclic and
        dihedral groups, the permutation (a tuple of ints) for permutation groups, a
        tuple of integers for translations, a tuple of component values for products.
    """

    group: Group
    value: Any

    def __mul__(self, other: GroupElement) -> GroupElement:
        return self.group.compose(self, other)

    def __invert__(self) -> GroupElement:
        return self.group.inverse(self)

    def inverse(self) -> GroupElement:
        """Return the inverse element."""
        return self.group.inverse(self)

    def __repr__(self) -> str:
        return f"{self.group.name}[{self.value!r}]"


class Group(ABC):
    """Abstract base class of all groups: algebra only.

    A subclass implements ``_identity``, ``_compose``, ``_inverse``,
    ``_validate`` (normalise a raw value or raise), [`generators`][groupattn.groups.Group.generators] and
    ``_sample``; finite groups derive from [`FiniteGroup`][groupattn.groups.FiniteGroup] instead and also
    implement ``FiniteGroup._enumerate``. Everything public here accepts either a
    [`GroupElement`][groupattn.groups.GroupElement] of this group or a raw value, and returns
    [`GroupElement`][groupattn.groups.GroupElement] objects.

    Groups are compared by [`key`][groupattn.groups.Group.key], a hashable description of the group, so two
    separately built ``CyclicGroup(4)`` are equal.
    """

    #: Human-readable name, e.g. ``"C4"`` or ``"p4(8x8)"``.
    name: str = "group"

    # ------------------------------------------------------------------ subclass API
    @abstractmethod
    def key(self) -> Hashable:
        """A hashable description that identifies the group up to equality."""

    @abstractmethod
    def _identity(self) -> Any: ...

    @abstractmethod
    def _compose(self, a: Any, b: Any) -> Any: ...

    @abstractmethod
    def _inverse(self, a: Any) -> Any: ...

    @abstractmethod
    def _validate(self, value: Any) -> Any:
        """Return the normalised raw value, or raise [`GroupError`][groupattn.groups.GroupError]."""

    @abstractmethod
    def generators(self) -> list[GroupElement]:
        """A generating set of the group (for infinite groups: of its action)."""

    @abstractmethod
    def _sample(self, rng: random.Random) -> Any: ...

    @property
    def is_finite(self) -> bool:
        """Whether the group has finitely many elements."""
        return False

    def order(self) -> int | None:
        """The number of elements, or ``None`` for an infinite group."""
        return None

    # ------------------------------------------------------------------ public API
    def element(self, value: Any) -> GroupElement:
        """Wrap (and validate) a raw value or an element as an element of this group.

        Raises
        ------
        GroupError
            If ``value`` is an element of a different group or not a valid element.
        """
        if isinstance(value, GroupElement):
            if value.group != self:
                raise GroupError(
                    f"{self.name}: expected an element of {self.name}, "
                    f"got an element of {value.group.name} ({value!r})"
                )
            return value
        return GroupElement(self, self._validate(value))

    def identity(self) -> GroupElement:
        """The identity element."""
        return GroupElement(self, self._identity())

    def compose(self, a: Any, b: Any) -> GroupElement:
        """The product ``a · b`` (acting on something: first ``b``, then ``a``)."""
        ea, eb = self.element(a), self.element(b)
        return GroupElement(self, self._compose(ea.value, eb.value))

    def inverse(self, a: Any) -> GroupElement:
        """The inverse ``a⁻¹``."""
        return GroupElement(self, self._inverse(self.element(a).value))

    def power(self, a: Any, k: int) -> GroupElement:
        """``a`` composed with itself ``k`` times (negative ``k`` uses the inverse)."""
        e = self.element(a)
        if k < 0:
            e, k = self.inverse(e), -k
        out = self.identity()
        for _ in range(k):
            out = self.compose(out, e)
        return out

    def sample(self, n: int = 1, seed: int | None = 0) -> list[GroupElement]:
        """Draw ``n`` elements with a seeded generator (uniform for finite groups).

        Parameters
        ----------
        n
            How many elements to draw.
        seed
            Seed of the private random generator; the same seed gives the same draw.
        """
        rng = random.Random(seed)
        return [GroupElement(self, self._sample(rng)) for _ in range(n)]

    def contains(self, value: Any) -> bool:
        """Whether ``value`` is (or wraps to) an element of this group."""
        try:
            self.element(value)
        except GroupError:
            return False
        return True

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        return isinstance(other, Group) and type(self) is type(other) and self.key() == other.key()

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.key()))

    def __repr__(self) -> str:
        return self.name

    def __contains__(self, value: object) -> bool:
        return self.contains(value)


class FiniteGroup(Group):
    """A group with finitely many elements, indexed by integers once listed.

    ``elements()`` lists the elements in a fixed order; [`index`][groupattn.groups.FiniteGroup.index] gives an element's
    position in that list, which is how elements are batched as tensors. Subclasses
    implement ``_enumerate`` and the other abstract methods of [`Group`][groupattn.groups.Group].

    Listing is refused ([`GroupError`][groupattn.groups.GroupError]) for a group whose order is known to exceed
    [`ENUMERATION_BUDGET`][groupattn.groups.ENUMERATION_BUDGET]: a subclass that knows its order without listing (a
    formula) overrides ``_order_without_enumeration()`` to return it, and then
    [`order`][groupattn.groups.FiniteGroup.order] never lists. [`word`][groupattn.groups.FiniteGroup.word] writes any element as a product of
    [`generators`][groupattn.groups.Group.generators].
    """

    _elements_cache: list[Any] | None = None
    _index_cache: dict[Any, int] | None = None
    _word_parent: dict[Any, tuple[Any, int] | None] | None = None

    @abstractmethod
    def _enumerate(self) -> list[Any]:
        """All raw element values, identity first."""

    @property
    def is_finite(self) -> bool:
        return True

    def _order_without_enumeration(self) -> int | None:
        """The order when it is known without listing the elements, else ``None``.

        Subclasses with a closed form (``n`` for C_n, ``h·w`` for a torus, a product of
        orders, Schreier–Sims for permutation groups) override this.
        """
        return None

    def _enumeration_budget(self) -> int:
        """The most elements [`elements`][groupattn.groups.FiniteGroup.elements] lists (default [`ENUMERATION_BUDGET`][groupattn.groups.ENUMERATION_BUDGET])."""
        return ENUMERATION_BUDGET

    def _values(self) -> list[Any]:
        if self._elements_cache is None:
            known = self._order_without_enumeration()
            budget = self._enumeration_budget()
            if known is not None and known > budget:
                raise GroupError(
                    f"{self.name}: expected a group of at most {budget} elements to list "
                    f"(the enumeration budget, groupattn.groups.ENUMERATION_BUDGET), got one of "
                    f"order {known}; order(), contains(), sample(), word() and orbit/orbital "
                    f"computations do not list the elements"
                )
            vals = self._enumerate()
            self._elements_cache = vals
            self._index_cache = {v: i for i, v in enumerate(vals)}
        return self._elements_cache

    def elements(self) -> list[GroupElement]:
        """All elements, in the group's fixed order (the identity first).

        Raises
        ------
        GroupError
            If the group's order is known to exceed the enumeration budget
            ([`ENUMERATION_BUDGET`][groupattn.groups.ENUMERATION_BUDGET] unless the group sets its own).
        """
        return [GroupElement(self, v) for v in self._values()]

    def __iter__(self) -> Iterator[GroupElement]:
        return iter(self.elements())

    def __len__(self) -> int:
        return self.order()

    def order(self) -> int:
        """The number of elements; listed only when no formula is known."""
        if self._elements_cache is not None:
            return len(self._elements_cache)
        known = self._order_without_enumeration()
        return known if known is not None else len(self._values())

    def index(self, a: Any) -> int:
        """The position of ``a`` in [`elements`][groupattn.groups.FiniteGroup.elements]."""
        self._values()
        assert self._index_cache is not None
        return self._index_cache[self.element(a).value]

    def from_index(self, i: int) -> GroupElement:
        """The element at position ``i`` of [`elements`][groupattn.groups.FiniteGroup.elements]."""
        vals = self._values()
        if not isinstance(i, int) or not 0 <= i < len(vals):
            raise GroupError(
                f"{self.name}: expected an element index in [0, {len(vals)}), got {i!r}"
            )
        return GroupElement(self, vals[i])

    def _sample(self, rng: random.Random) -> Any:
        return rng.choice(self._values())

    def cayley_table(self) -> list[list[int]]:
        """``table[i][j]`` is the index of ``elements()[i] · elements()[j]``."""
        vals = self._values()
        assert self._index_cache is not None
        idx = self._index_cache
        return [[idx[self._compose(a, b)] for b in vals] for a in vals]

    def inverse_indices(self) -> list[int]:
        """``inv[i]`` is the index of the inverse of ``elements()[i]``."""
        vals = self._values()
        assert self._index_cache is not None
        return [self._index_cache[self._inverse(v)] for v in vals]

    # ------------------------------------------------------------------ words
    def word(self, g: Any) -> list[int]:
        """Write ``g`` as a product of the generators: indices into [`generators`][groupattn.groups.Group.generators].

        The convention: for ``gens = self.generators()`` and ``w = self.word(g)``,

        ``g == gens[w[0]] * gens[w[1]] * … * gens[w[-1]]``

        with ``*`` the group's own [`compose`][groupattn.groups.Group.compose] (``a * b`` is "``a`` after ``b``"),
        evaluated left to right (any bracketing gives the same, by associativity). The
        identity gives ``[]``. Acting on something, the **last** letter acts first:
        ``g·x = gens[w[0]]·(gens[w[1]]·(… (gens[w[-1]]·x)))``, so a permutation action
        ``perm(g)`` is ``perm(gens[w[0]])[perm(gens[w[1]])[… perm(gens[w[-1]])]]``.
        Only generators appear (never their inverses).

        The default is a breadth-first search of the Cayley graph from the identity
        (right multiplication by each generator, in order), run once and cached: the
        word is a shortest one. It visits at most [`WORD_BUDGET`][groupattn.groups.WORD_BUDGET] elements.
        Cyclic, dihedral, translation, product and permutation groups override it with
        a formula or Schreier–Sims, so their words need no search (and may be longer
        than the shortest).

        Parameters
        ----------
        g
            An element of this group (or a raw value [`element`][groupattn.groups.Group.element] accepts).

        Returns
        -------
        list[int]
            Generator indices, of length 0 for the identity.

        Raises
        ------
        GroupError
            If ``g`` is not an element, the group exceeds [`WORD_BUDGET`][groupattn.groups.WORD_BUDGET], or ``g``
            is not reachable from the generators (they do not generate the group).
        """
        value = self.element(g).value
        parent = self._cayley_tree()
        if value not in parent:
            raise GroupError(
                f"{self.name}: expected the generators to generate the group, but {self.element(g)!r} "
                f"is not a product of them"
            )
        out: list[int] = []
        step = parent[value]
        while step is not None:
            value, k = step
            out.append(k)
            step = parent[value]
        out.reverse()
        return out

    def _cayley_tree(self) -> dict[Any, tuple[Any, int] | None]:
        """Breadth-first tree of the Cayley graph: ``parent[x · s_k] = (x, k)``."""
        if self._word_parent is not None:
            return self._word_parent
        known = self._order_without_enumeration()
        if known is not None and known > WORD_BUDGET:
            raise GroupError(
                f"{self.name}: expected a group of at most WORD_BUDGET={WORD_BUDGET} elements for "
                f"words by breadth-first search, got one of order {known}"
            )
        gens = [s.value for s in self.generators()]
        ident = self._identity()
        parent: dict[Any, tuple[Any, int] | None] = {ident: None}
        frontier = [ident]
        while frontier:
            nxt = []
            for x in frontier:
                for k, s in enumerate(gens):
                    y = self._compose(x, s)
                    if y not in parent:
                        parent[y] = (x, k)
                        nxt.append(y)
                        if len(parent) > WORD_BUDGET:
                            raise GroupError(
                                f"{self.name}: expected a group of at most WORD_BUDGET={WORD_BUDGET} "
                                f"elements for words by breadth-first search, got more"
                            )
            frontier = nxt
        self._word_parent = parent
        return parent


def _check_int(name: str, what: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            import torch

            if (
                isinstance(value, torch.Tensor)
                and value.numel() == 1
                and not value.is_floating_point()
            ):
                return int(value.item())
        except ImportError:  # pragma: no cover
            pass
        raise GroupError(
            f"{name}: expected {what} as an int, got {_describe(value)} ({_public_type_name(value)})"
        )
    return value


def _check_int_tuple(name: str, what: str, value: Any, length: int) -> tuple[int, ...]:
    if not isinstance(value, Sequence) or isinstance(value, str) or len(value) != length:
        raise GroupError(f"{name}: expected {what} as a tuple of {length} ints, got {value!r}")
    return tuple(_check_int(name, what, v) for v in value)
