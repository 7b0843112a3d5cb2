"""Group axioms (hypothesis), the concrete groups' laws, user-defined groups and bad input."""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Hashable
from functools import cache
from typing import Any

import networkx as nx
import pytest
import torch
from custom_groups import KleinFour
from hypothesis import given, settings
from hypothesis import strategies as st

from groupattn.groups import (
    CyclicGroup,
    DihedralGroup,
    DirectProduct,
    FiniteGroup,
    GridTranslations,
    Group,
    GroupElement,
    GroupError,
    PermutationGroup,
    RotoTranslationGroup,
    SemidirectProduct,
    SymmetricGroup,
    TorusTranslations,
    builtin_groups,
    check_group_axioms,
    graph_automorphism_group,
    integer_matrix,
    p4,
    p4m,
    real_matrix,
)
from groupattn.testing.strategies import finite_groups, group_elements


@cache
def _builtins() -> dict[str, Group]:
    return builtin_groups()


def _extra_groups() -> dict[str, Group]:
    return {
        "d6": DihedralGroup(6),
        "c3": CyclicGroup(3),
        "torus_rect": TorusTranslations(3, 5),
        "torus_stride": TorusTranslations(4, 4, stride=2),
        "p4_z2": p4(),
        "p4m_z2": p4m(),
        "t_c2": RotoTranslationGroup(CyclicGroup(2), 4),
        "t_d2": RotoTranslationGroup(DihedralGroup(2), 4),
        "t_d1": RotoTranslationGroup(DihedralGroup(1), 3),
        "c4_x_d4": DirectProduct(CyclicGroup(4), DihedralGroup(4)),
        "z2_x_c4": DirectProduct(GridTranslations(), CyclicGroup(4)),
        "s4": SymmetricGroup(4),
    }


ALL_KEYS = [*builtin_groups().keys(), *_extra_groups().keys()]


def _group(key: str) -> Group:
    return _builtins()[key] if key in _builtins() else _extra_groups()[key]


# ---------------------------------------------------------------- axioms (hypothesis)
@pytest.mark.parametrize("key", ALL_KEYS)
@settings(max_examples=12)
@given(data=st.data())
def test_group_axioms(key: str, data: st.DataObject) -> None:
    group = _group(key)
    elements = group_elements(group)
    a, b, c = data.draw(elements), data.draw(elements), data.draw(elements)
    e = group.identity()
    ab = group.compose(a, b)
    # closure: the product is a valid element of the same group
    assert isinstance(ab, GroupElement) and ab.group == group and group.contains(ab.value)
    # associativity
    assert group.compose(ab, c) == group.compose(a, group.compose(b, c))
    # identity and inverses
    assert group.compose(a, e) == a == group.compose(e, a)
    assert group.compose(a, group.inverse(a)) == e == group.compose(group.inverse(a), a)
    assert a * b == ab and ~a == a.inverse() == group.inverse(a)
    assert group.power(a, 3) == a * a * a and group.power(a, -2) == ~a * ~a


@pytest.mark.parametrize("key", ALL_KEYS)
def test_check_group_axioms_passes_for_every_builtin(key: str) -> None:
    report = check_group_axioms(_group(key), max_elements=12)
    assert report.ok, report.failures
    if key in {"c4_x_d4", "z2_x_c4"}:  # abstract products: no built-in action
        assert report.action.startswith("none")
    else:
        assert report.action in {"points", "images", "coordinates"}


@pytest.mark.parametrize("key", [k for k in ALL_KEYS if _group(k).is_finite])
def test_finite_group_bookkeeping(key: str) -> None:
    group = _group(key)
    assert isinstance(group, FiniteGroup)
    elems = group.elements()
    assert group.order() == len(elems) == len(set(elems)) == len(group)
    assert elems[0] == group.identity()
    assert [group.index(g) for g in elems] == list(range(len(elems)))
    assert all(group.from_index(i) == g for i, g in enumerate(elems))
    if len(elems) <= 64:
        table = group.cayley_table()
        for i, j in itertools.product(range(len(elems)), repeat=2):
            assert elems[table[i][j]] == elems[i] * elems[j]
    inv = group.inverse_indices()
    assert all(elems[i] * elems[inv[i]] == group.identity() for i in range(len(elems)))


@pytest.mark.parametrize("key", [k for k in ALL_KEYS if _group(k).is_finite])
def test_generators_generate_the_group(key: str) -> None:
    group = _group(key)
    generators = group.generators()
    seen = {group.identity()}
    frontier = set(seen)
    while frontier:
        frontier = {g * s for g in frontier for s in generators} - seen
        seen |= frontier
    assert seen == set(group.elements())


def test_elements_compare_and_hash_by_group_and_value() -> None:
    a, b = CyclicGroup(4), CyclicGroup(4)
    assert a == b and hash(a) == hash(b) and a is not b
    assert a.element(1) == b.element(1) and hash(a.element(1)) == hash(b.element(1))
    assert {a.element(1): "x"}[b.element(1)] == "x"
    assert CyclicGroup(4) != CyclicGroup(5) and CyclicGroup(2) != DihedralGroup(1)
    assert CyclicGroup(2).element(1) != DihedralGroup(1).element(1)
    assert TorusTranslations(4, 4) != TorusTranslations(4, 4, stride=2)
    assert p4(8) == p4(8) and p4(8) != p4m(8) and p4(8) != p4(6) and p4() != p4(8)
    assert TorusTranslations(4, 4).element((-1, 5)) == TorusTranslations(4, 4).element((3, 1))


@pytest.mark.parametrize("key", ["c8", "d4", "torus", "z2", "p4", "p4m", "s5", "petersen", "p4_z2"])
def test_sampling_is_seeded_and_valid(key: str) -> None:
    group = _group(key)
    draw = group.sample(20, seed=3)
    assert draw == group.sample(20, seed=3)
    assert draw != group.sample(20, seed=4)
    assert all(g.group == group and group.contains(g.value) for g in draw)


def test_uniform_sampling_reaches_every_element_of_a_small_group() -> None:
    group = DihedralGroup(4)
    assert set(group.sample(400, seed=0)) == set(group.elements())
    z2 = GridTranslations(radius=3)
    assert all(max(abs(v) for v in g.value) <= 3 for g in z2.sample(200, seed=1))


# ---------------------------------------------------------------- concrete laws
@pytest.mark.parametrize(
    "group", [CyclicGroup(8), DihedralGroup(3), DihedralGroup(4), DihedralGroup(6)], ids=repr
)
def test_point_groups_are_orthogonal_matrix_groups(group) -> None:
    mats = {g: torch.tensor(real_matrix(group, g), dtype=torch.float64) for g in group.elements()}
    for a, b in itertools.product(group.elements(), repeat=2):
        assert torch.allclose(mats[a * b], mats[a] @ mats[b], atol=1e-12)
    # faithful: distinct elements, distinct matrices
    assert (
        len({tuple(m.flatten().round(decimals=9).tolist()) for m in mats.values()}) == group.order()
    )
    for g, m in mats.items():
        det = torch.linalg.det(m).item()
        assert math.isclose(det, -1.0 if group.is_reflection(g) else 1.0, abs_tol=1e-12)


def test_integer_matrices_of_d4_and_conventions() -> None:
    d4 = DihedralGroup(4)
    for a, b in itertools.product(d4.elements(), repeat=2):
        ma, mb, mab = (torch.tensor(integer_matrix(d4, g)) for g in (a, b, a * b))
        assert torch.equal(mab, ma @ mb)
    # rotation by 90° is (y, x) -> (-x, y); the reflection is (y, x) -> (y, -x)
    assert integer_matrix(d4, d4.make(1)) == ((0, -1), (1, 0))
    assert integer_matrix(d4, d4.make(0, True)) == ((1, 0), (0, -1))
    # element i = r + n m is rho^r sigma^m
    rho, sigma = d4.make(1), d4.make(0, True)
    for r, m in itertools.product(range(4), range(2)):
        assert d4.element(r + 4 * m) == d4.power(rho, r) * d4.power(sigma, m)
    assert sigma * rho == d4.power(rho, 3) * sigma  # sigma rho sigma^-1 = rho^-1
    with pytest.raises(GroupError, match="acting exactly on the integer grid"):
        integer_matrix(CyclicGroup(8), 1)


@pytest.mark.parametrize("factory", [p4, p4m], ids=["p4", "p4m"])
def test_roto_translation_law_matches_affine_maps(factory) -> None:
    size = 5
    group = factory(size)
    point = group.point_group
    assert group.order() == size * size * point.order()

    def affine(g: GroupElement) -> tuple[torch.Tensor, torch.Tensor]:
        t, h = g.value
        return torch.tensor(integer_matrix(point, h)), torch.tensor(t)

    rng = random.Random(0)
    elems = group.elements()
    for _ in range(60):
        a, b = rng.choice(elems), rng.choice(elems)
        (ma, ta), (mb, tb) = affine(a), affine(b)
        mab, tab = affine(a * b)
        # p -> ma (mb p + tb) + ta
        assert torch.equal(mab, ma @ mb)
        assert torch.equal(tab, (ma @ tb + ta) % size)
    assert group.translation((1, 2)) * group.point(1) == group.element(((1, 2), 1))


def test_roto_translation_variants_and_errors() -> None:
    assert RotoTranslationGroup(CyclicGroup(2), 4).order() == 32
    assert RotoTranslationGroup(DihedralGroup(2), 4).name == "T⋊D2(4x4)"
    infinite = p4m()
    assert not infinite.is_finite and infinite.order() is None
    with pytest.raises(GroupError, match="acting exactly on the square grid"):
        RotoTranslationGroup(CyclicGroup(8), 4)
    with pytest.raises(GroupError, match="expected a point group"):
        RotoTranslationGroup(TorusTranslations(4), 4)  # type: ignore[arg-type]


def test_direct_and_semidirect_products() -> None:
    c4, c2 = CyclicGroup(4), CyclicGroup(2)
    direct = DirectProduct(c4, c2)
    assert isinstance(direct, FiniteGroup) and direct.order() == 8
    assert all(a * b == b * a for a, b in itertools.product(direct.elements(), repeat=2))
    g1, g2 = direct.split(direct.element((3, 1)))
    assert g1 == c4.element(3) and g2 == c2.element(1)
    infinite = DirectProduct(GridTranslations(), c4)
    assert not infinite.is_finite and not isinstance(infinite, FiniteGroup)
    # C_n ⋊ C_2 with inversion is the dihedral group: same order, same element orders
    n = 5
    semi = SemidirectProduct(
        CyclicGroup(n), c2, lambda h, r: r if h == 0 else (-r) % n, name="C5⋊C2"
    )
    d5 = DihedralGroup(n)

    def element_orders(group: FiniteGroup) -> list[int]:
        return sorted(
            next(k for k in range(1, 100) if group.power(g, k) == group.identity())
            for g in group.elements()
        )

    assert isinstance(semi, FiniteGroup)
    assert element_orders(semi) == element_orders(d5)
    assert any(a * b != b * a for a, b in itertools.product(semi.elements(), repeat=2))
    assert check_group_axioms(semi).ok


def test_torus_translations_with_stride() -> None:
    group = TorusTranslations(4, 3, stride=2)
    assert group.order() == 12 and group.shape == (4, 3) and group.stride == 2
    assert group.name == "T(4x3)*2"
    with pytest.raises(GroupError, match="stride >= 1"):
        TorusTranslations(4, 4, stride=0)
    with pytest.raises(GroupError, match="positive grid size"):
        TorusTranslations(0, 4)


def test_permutation_groups() -> None:
    hexagon = PermutationGroup([[1, 2, 3, 4, 5, 0], [0, 5, 4, 3, 2, 1]])
    assert hexagon.order() == 12
    rotation = hexagon.element((1, 2, 3, 4, 5, 0))
    assert hexagon.permutation(rotation * rotation) == (2, 3, 4, 5, 0, 1)
    assert hexagon.permutation(hexagon.from_index(0)) == tuple(range(6))
    for n in range(1, 6):
        sym = SymmetricGroup(n)
        assert len(sym.elements()) == sym.order() == math.factorial(n)
        assert set(sym.permutation(g) for g in sym.elements()) == set(
            itertools.permutations(range(n))
        )


@pytest.mark.parametrize(
    "graph",
    [
        nx.cycle_graph(6),
        nx.path_graph(5),
        nx.complete_bipartite_graph(2, 3),
        nx.star_graph(4),
        nx.house_graph(),
    ],
    ids=["cycle6", "path5", "k23", "star4", "house"],
)
def test_graph_automorphisms_match_brute_force(graph) -> None:
    nodes = list(graph.nodes)
    edges = {frozenset(e) for e in graph.edges}
    brute = {
        p
        for p in itertools.permutations(range(len(nodes)))
        if {frozenset((nodes[p[nodes.index(u)]], nodes[p[nodes.index(v)]])) for u, v in graph.edges}
        == edges
    }
    group = graph_automorphism_group(graph)
    assert group.order() == len(brute)
    assert {group.permutation(g) for g in group.elements()} == brute
    # a small generating set, chosen greedily: at most log2 |Aut| generators
    assert len(group.generators()) <= max(1, math.floor(math.log2(len(brute))))


def test_petersen_automorphisms_are_s5_with_few_generators() -> None:
    group = _builtins()["petersen"]
    assert group.order() == SymmetricGroup(5).order()
    assert len(group.generators()) <= 6
    directed = nx.DiGraph([(0, 1), (1, 2), (2, 0)])
    assert graph_automorphism_group(directed).order() == 3


# ---------------------------------------------------------------- a user-defined group
class NotAGroup(KleinFour):
    """Breaks associativity and inverses on purpose."""

    name = "broken"

    def key(self) -> Hashable:
        return "broken"

    def _compose(self, a: Any, b: Any) -> Any:
        return (a[0] ^ b[0], a[1] & b[1] if a != (0, 0) and b != (0, 0) else a[1] ^ b[1])


def test_user_subclass_of_finite_group() -> None:
    v4 = KleinFour()
    assert v4.order() == 4 and v4.is_finite
    report = check_group_axioms(v4)
    assert report.ok and report.action.startswith("none")
    assert v4.sample(5, seed=1) == v4.sample(5, seed=1)
    with pytest.raises(GroupError, match="pair of bits"):
        v4.element((2, 0))
    broken = check_group_axioms(NotAGroup())
    assert not broken.ok and any("fails" in f for f in broken.failures)


def test_finite_groups_strategy_respects_bound() -> None:
    @settings(max_examples=10)
    @given(finite_groups(max_order=16))
    def inner(group: Group) -> None:
        assert group.is_finite and (group.order() or 0) <= 16

    inner()


# ---------------------------------------------------------------- bad input
def test_composing_elements_of_different_groups_raises() -> None:
    c4, d4 = CyclicGroup(4), DihedralGroup(4)
    with pytest.raises(GroupError, match=r"C4: expected an element of C4, got an element of D4"):
        c4.compose(c4.element(1), d4.element(1))
    with pytest.raises(GroupError, match="expected an element of D4"):
        d4.element(1) * c4.element(1)
    with pytest.raises(GroupError, match="expected an element of C4"):
        CyclicGroup(4).inverse(CyclicGroup(5).element(1))


def test_unknown_elements_raise() -> None:
    with pytest.raises(GroupError, match=r"C4: expected an element in \[0, 4\), got 7"):
        CyclicGroup(4).element(7)
    with pytest.raises(GroupError, match=r"D4: expected an element in \[0, 8\), got 8"):
        DihedralGroup(4).element(8)
    with pytest.raises(GroupError, match="as an int"):
        DihedralGroup(4).element("rho")
    with pytest.raises(GroupError, match=r"expected an element index in \[0, 8\), got 9"):
        DihedralGroup(4).from_index(9)
    with pytest.raises(GroupError, match="tuple of 2 ints"):
        TorusTranslations(4).element((1, 2, 3))
    with pytest.raises(GroupError, match="expected an element as a pair"):
        p4(4).element((1, 2, 3))
    hexagon = PermutationGroup([[1, 2, 3, 4, 5, 0]])
    with pytest.raises(GroupError, match="does not contain"):
        hexagon.element((0, 5, 4, 3, 2, 1))
    with pytest.raises(GroupError, match="expected no reflection"):
        CyclicGroup(4).make(1, reflection=True)
    assert not CyclicGroup(4).contains(4) and 3 in CyclicGroup(4)
    # torch integer scalars are accepted, floats are not
    assert CyclicGroup(4).element(torch.tensor(3)) == CyclicGroup(4).element(3)
    with pytest.raises(GroupError, match="as an int"):
        CyclicGroup(4).element(1.0)


def test_bad_group_parameters_raise() -> None:
    with pytest.raises(GroupError, match="order n >= 1"):
        CyclicGroup(0)
    with pytest.raises(GroupError, match="rotation order n >= 1"):
        DihedralGroup(-2)
    with pytest.raises(GroupError, match="SymmetricGroup: expected n >= 1"):
        SymmetricGroup(0)


@pytest.mark.parametrize(
    ("generators", "message"),
    [
        ([[0, 0, 1]], "each index exactly once"),
        ([[0, 1, 3]], "each index exactly once"),
        ([["a", "b"]], "sequence of ints"),
        ([[1, 0], [0, 2, 1]], "equal length 2"),
        ([], "at least one generator"),
    ],
)
def test_generators_that_are_not_permutations_raise(generators, message) -> None:
    with pytest.raises(GroupError, match=message):
        PermutationGroup(generators)


def test_permutation_group_larger_than_bound_raises() -> None:
    big = PermutationGroup(
        [[1, 0, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5, 6, 0]], max_order=100, name="S7?"
    )
    with pytest.raises(
        GroupError, match=r"S7\?: expected a group of at most max_order=100 elements"
    ):
        big.order()
    with pytest.raises(GroupError, match="max_order=10 automorphisms"):
        graph_automorphism_group(nx.complete_graph(5), max_order=10)
    with pytest.raises(GroupError, match="expected a networkx graph"):
        graph_automorphism_group([(0, 1)])


@pytest.mark.parametrize("size", [None, 4, 8])
@pytest.mark.parametrize("make", [p4, p4m])
def test_roto_translation_groups_survive_copy_and_pickle(make: Any, size: int | None) -> None:
    """Their action is a closure: they are rebuilt from their arguments (``verify``
    deep-copies models, and a model may hold its group)."""
    import copy
    import pickle

    group = make(size)
    for rebuilt in (copy.deepcopy(group), pickle.loads(pickle.dumps(group))):
        assert rebuilt == group and hash(rebuilt) == hash(group) and type(rebuilt) is type(group)
        g = group.sample(1, seed=0)[0]
        assert rebuilt.compose(g, g) == group.compose(g, g)
