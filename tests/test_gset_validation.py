"""G-set validation: a G-set map must be a permutation action, ``perm(g·h) = perm(g)[perm(h)]``.

Bad maps (not permutations, not homomorphisms, identity not fixed) are rejected with a
:class:`GroupError` naming the G-set, what was expected and what was got; wrong group
types are rejected without leaking private class names; every built-in G-set satisfies
the stated composition convention.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

import networkx as nx
import pytest
import torch
from custom_groups import KleinFour
from hypothesis import given
from hypothesis import strategies as st

from groupattn.actions import GridField, GSet
from groupattn.groups import (
    CyclicGroup,
    DihedralGroup,
    DirectProduct,
    GridTranslations,
    GroupElement,
    GroupError,
    PermutationGroup,
    SymmetricGroup,
    TorusTranslations,
    graph_automorphism_group,
    p4,
    p4m,
)

_PRIVATE = re.compile(r"(?<![\w.])_[A-Za-z]\w*")


def _square_vertices(g: GroupElement) -> list[int]:
    """D4 on the vertices 0…3 of a square: ρʳσᵐ sends i to (−1)ᵐ i + r (mod 4)."""
    r, m = g.value % 4, g.value // 4
    return [((-i if m else i) + r) % 4 for i in range(4)]


def _klein_corners(g: GroupElement) -> list[int]:
    fy, fx = g.value
    return [2 * (y ^ fy) + (x ^ fx) for y in range(2) for x in range(2)]


GOOD = {
    "C4 on 4 points": lambda: GSet(
        CyclicGroup(4), 4, lambda g: [(i + g.value) % 4 for i in range(4)]
    ),
    "D4 on a square": lambda: GSet(DihedralGroup(4), 4, _square_vertices, name="square"),
    "V4 on corners": lambda: GSet(KleinFour(), 4, _klein_corners),
    "trivial action": lambda: GSet(p4(2), 5, lambda g: list(range(5))),
    "S5 natural": lambda: GSet.natural(SymmetricGroup(5)),
    "S20 natural": lambda: GSet.natural(SymmetricGroup(20)),
    "C100 graph": lambda: GSet.natural(graph_automorphism_group(nx.cycle_graph(100))),
    "p4m grid": lambda: GSet.grid(p4m(4), 4, 4),
    "p4 lifted": lambda: GSet.lifted_grid(p4(4), p4(4).point_group, 4, 4),
    "Z2 on a torus": lambda: GSet.grid(GridTranslations(), 3, 5),
    "strided torus": lambda: GSet.grid(TorusTranslations(2, 3, stride=2), 4, 6),
    "C4xC2": lambda: GSet(
        DirectProduct(CyclicGroup(4), CyclicGroup(2)),
        6,
        lambda g: (
            [(i + g.value[0]) % 4 for i in range(4)] + [4 + (i + g.value[1]) % 2 for i in range(2)]
        ),
    ),
}


@cache
def _good(key: str) -> GSet:
    return GOOD[key]()


@pytest.mark.parametrize("key", list(GOOD))
def test_valid_gsets_pass_validation(key: str) -> None:
    gset = GOOD[key]()
    assert gset.validate() is gset
    assert gset._validated
    assert torch.equal(gset.permutation(gset.group.identity()), torch.arange(gset.num_points))


@pytest.mark.parametrize("key", list(GOOD))
@given(data=st.data())
def test_composition_convention(key: str, data: st.DataObject) -> None:
    """``perm(g·h) == perm(g)[perm(h)]``: point i goes to perm(h)[i], then on by g."""
    gset = _good(key)
    g, h = gset.group.sample(2, seed=data.draw(st.integers(0, 2**31 - 1)))
    pg, ph = gset.permutation(g), gset.permutation(h)
    assert torch.equal(gset.permutation(g * h), pg[ph])


def test_convention_on_every_pair_of_small_gsets() -> None:
    for key in ("D4 on a square", "V4 on corners", "C4xC2"):
        gset = _good(key)
        elems = gset.group.elements()  # type: ignore[attr-defined]
        for g in elems:
            for h in elems:
                assert torch.equal(
                    gset.permutation(g * h), gset.permutation(g)[gset.permutation(h)]
                )


# ---------------------------------------------------------------- bad maps


def test_constant_map_is_rejected() -> None:
    n = 4
    gset = GSet(CyclicGroup(4), n, lambda g: [0] * n, name="constant")  # lazy: built without error
    message = r"constant: expected permutation\(C4\[1\]\) to be a permutation of range\(4\) .*got \[0, 0, 0, 0\] \(repeats \[0\]; misses \[1, 2, 3\]\)"
    with pytest.raises(GroupError, match=message):
        gset.validate()
    with pytest.raises(GroupError, match=message):
        gset.permutation(0)
    with pytest.raises(GroupError, match=message):
        gset.orbits()
    with pytest.raises(GroupError, match=message):
        gset.orbitals()


def test_non_homomorphism_is_rejected() -> None:
    # a valid permutation for every element, but rotating by r² instead of r
    bad = GSet(
        CyclicGroup(4), 4, lambda g: [(i + g.value**2) % 4 for i in range(4)], name="squared"
    )
    with pytest.raises(
        GroupError,
        match=r"squared: expected a group action, permutation\(g·h\) == permutation\(g\)\[permutation\(h\)\], for g = C4\[1\], h = C4\[1\]: expected \[2, 3, 0, 1\], got \[0, 1, 2, 3\]",
    ):
        bad.validate()
    # D4 → C4 forgetting the reflection is no homomorphism
    forget = GSet(
        DihedralGroup(4), 4, lambda g: [(i + g.value) % 4 for i in range(4)], name="forget"
    )
    with pytest.raises(GroupError, match="forget: expected a group action"):
        forget.permutation(1)


def test_wrong_map_caught_only_away_from_generators_is_rejected() -> None:
    """Right on the generators, wrong on some other elements: caught by the random checks."""

    def almost(g: GroupElement) -> list[int]:
        r = g.value
        return [(i + r) % 8 for i in range(8)] if r in (0, 1) else [(i - r) % 8 for i in range(8)]

    with pytest.raises(GroupError, match="expected a group action"):
        GSet(CyclicGroup(8), 8, almost, name="almost").validate()


def test_identity_must_map_to_identity() -> None:
    swap = [1, 0, 2]
    gset = GSet(CyclicGroup(3), 3, lambda g: swap, name="stuck")
    with pytest.raises(
        GroupError,
        match=r"stuck: expected the identity to map to the identity permutation, got \[1, 0, 2\]",
    ):
        gset.validate()


@pytest.mark.parametrize(
    ("fn", "message"),
    [
        (lambda g: [0, 1], r"expected a permutation of length 3, got shape \(2,\)"),
        (lambda g: [[0, 1, 2]], r"expected a permutation of length 3, got shape \(1, 3\)"),
        (lambda g: [0.0, 1.5, 2.0], r"as integers, got \[0\.0, 1\.5, 2\.0\]"),
        (lambda g: [0, 1, 3], r"permutation of range\(3\).*out of range \[3\]"),
        (lambda g: [-1, 0, 1], r"permutation of range\(3\).*out of range \[-1\]"),
        (lambda g: [True, False, True], "as integers, got dtype torch.bool"),
        (lambda g: "abc", "as a sequence of 3 ints, got 'abc'"),
    ],
)
def test_malformed_permutations_are_rejected(fn: Any, message: str) -> None:
    gset = GSet(CyclicGroup(3), 3, fn, name="bad")
    with pytest.raises(GroupError, match="bad: .*" + message):
        gset.permutation(1)


def test_integral_floats_are_accepted() -> None:
    gset = GSet(CyclicGroup(3), 3, lambda g: [float((i + g.value) % 3) for i in range(3)])
    assert gset.permutation(1).dtype == torch.long
    assert gset.permutation(1).tolist() == [1, 2, 0]


def test_each_later_permutation_is_checked() -> None:
    """A map valid on everything validation looks at still fails loudly where it is not a permutation."""
    s20 = SymmetricGroup(20)
    target = s20.sample(1, seed=99)[0]

    def fn(g: GroupElement) -> list[int]:
        return [0] * 20 if g == target else list(g.value)

    gset = GSet(s20, 20, fn, name="rare").validate()
    with pytest.raises(GroupError, match="rare: expected permutation"):
        gset.permutation(target)


# ---------------------------------------------------------------- wrong types


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda: GSet.natural(CyclicGroup(4)),
            r"GSet\.natural: expected a PermutationGroup .*got the group C4 \(CyclicGroup\)",
        ),
        (lambda: GSet.natural(p4(4)), r"got the group p4\(4x4\) \(RotoTranslationGroup\)"),
        (lambda: GSet.natural([[1, 0]]), "GSet.natural: expected a PermutationGroup"),
        (lambda: GSet(5, 4, lambda g: g), "GSet: expected the acting group as a Group, got 5"),
        (lambda: GSet(CyclicGroup, 4, lambda g: g), "got the class CyclicGroup"),
        (
            lambda: GSet(CyclicGroup(4), -1, lambda g: g),
            "expected the number of points as an int >= 0, got -1",
        ),
        (lambda: GSet(CyclicGroup(4), 4, [0, 1, 2, 3]), "expected permutation_fn as a callable"),
        (
            lambda: GSet.grid("p4", 4, 4),
            r"GSet\.of_field: expected the acting group as a Group, got 'p4'",
        ),
        (
            lambda: GSet.of_field(p4(4), p4(4), (4, 4)),
            r"GSet\.of_field: expected a FieldType, got the group p4",
        ),
        (lambda: GSet.of_field(GridField(), p4(4), (4, 0)), "expected positive sizes"),
        (
            lambda: GSet.lifted_grid(p4(4), p4(4), 4, 4),
            r"GSet\.lifted_grid: expected a point group .*RotoTranslationGroup",
        ),
        (lambda: GSet.lifted_grid(p4(4), CyclicGroup, 4, 4), "got the class CyclicGroup"),
    ],
)
def test_wrong_types_raise_group_error_without_private_names(make: Any, message: str) -> None:
    with pytest.raises(GroupError, match=message) as info:
        make()
    assert not _PRIVATE.search(str(info.value)), str(info.value)


def test_element_of_another_group_is_rejected() -> None:
    gset = _good("S5 natural")
    with pytest.raises(GroupError, match="expected an element of S5"):
        gset.permutation(SymmetricGroup(4).identity())
    perm_group = PermutationGroup([[1, 2, 3, 4, 0]], name="C5 on points")
    assert GSet.natural(perm_group).num_orbits() == 1
