"""Large permutation groups without enumeration: Schreier–Sims, graph automorphisms, words.

Checks order, membership, uniform sampling, stabilisers and words in the generators for
S_20 and for the automorphism groups of 100-node graphs, never listing their elements;
closed-form orders of products and tori; words for every element of small groups; sympy
and brute force as oracles on small random groups and graphs.
"""

from __future__ import annotations

import itertools
import math
import random
import re
import time
from collections.abc import Hashable
from functools import cache
from typing import Any, ClassVar

import networkx as nx
import pytest
from custom_groups import KleinFour
from hypothesis import given, settings
from hypothesis import strategies as st

import groupattn.groups._base as base_module
from groupattn.groups import (
    ENUMERATION_BUDGET,
    CyclicGroup,
    DihedralGroup,
    DirectProduct,
    FiniteGroup,
    Group,
    GroupElement,
    GroupError,
    PermutationGroup,
    RotoTranslationGroup,
    SemidirectProduct,
    SymmetricGroup,
    TorusTranslations,
    check_group_axioms,
    graph_automorphism_group,
    group_from_name,
    integer_matrix,
    p4,
    p4m,
    real_matrix,
)

# ---------------------------------------------------------------- helpers


def _evaluate(group: Group, word: list[int]) -> GroupElement:
    """``gens[w[0]] * gens[w[1]] * …`` with the group's own ``*``, left to right."""
    gens = group.generators()
    out = group.identity()
    for k in word:
        out = out * gens[k]
    return out


def _act_by_word(perms: list[tuple[int, ...]], word: list[int], degree: int) -> tuple[int, ...]:
    """The permutation of a word acting on points: the last letter acts first."""
    points = list(range(degree))
    for k in reversed(word):
        points = [perms[k][i] for i in points]
    return tuple(points)


def _paths_graph() -> nx.Graph:
    """Ten disjoint 10-node paths: 2¹⁰·10! automorphisms."""
    return nx.disjoint_union_all([nx.path_graph(10) for _ in range(10)])


GRAPHS = {
    "cycle100": (lambda: nx.cycle_graph(100), 200),
    "grid10x10": (lambda: nx.grid_2d_graph(10, 10), 8),
    "paths10x10": (_paths_graph, 2**10 * math.factorial(10)),
}


@cache
def _graph(key: str) -> nx.Graph:
    return GRAPHS[key][0]()


@cache
def _graph_group(key: str) -> PermutationGroup:
    return graph_automorphism_group(_graph(key))


def _is_automorphism(graph: nx.Graph, perm: tuple[int, ...]) -> bool:
    nodes = list(graph.nodes)
    pos = {v: i for i, v in enumerate(nodes)}
    edges = {frozenset((pos[u], pos[v])) for u, v in graph.edges}
    return {frozenset((perm[a], perm[b])) for a, b in (tuple(e) for e in edges)} == edges


@pytest.fixture
def no_listing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make any enumeration of a group's elements fail loudly."""

    def refuse(self: FiniteGroup) -> list[Any]:
        raise AssertionError(f"{self.name} was enumerated")

    for cls in (PermutationGroup, TorusTranslations, CyclicGroup, DihedralGroup):
        monkeypatch.setattr(cls, "_enumerate", refuse)


class Quaternion(FiniteGroup):
    """Q8 written by hand (a non-abelian user subclass): ``(sign, unit)`` pairs."""

    name = "Q8"
    _UNITS = ("1", "i", "j", "k")
    _TABLE: ClassVar[dict[tuple[str, str], tuple[int, str]]] = {
        ("1", "1"): (1, "1"), ("1", "i"): (1, "i"), ("1", "j"): (1, "j"), ("1", "k"): (1, "k"),
        ("i", "1"): (1, "i"), ("i", "i"): (-1, "1"), ("i", "j"): (1, "k"), ("i", "k"): (-1, "j"),
        ("j", "1"): (1, "j"), ("j", "i"): (-1, "k"), ("j", "j"): (-1, "1"), ("j", "k"): (1, "i"),
        ("k", "1"): (1, "k"), ("k", "i"): (1, "j"), ("k", "j"): (-1, "i"), ("k", "k"): (-1, "1"),
    }  # fmt: skip

    def key(self) -> Hashable:
        return "Q8"

    def _identity(self) -> Any:
        return (1, "1")

    def _compose(self, a: Any, b: Any) -> Any:
        sign, unit = self._TABLE[(a[1], b[1])]
        return (a[0] * b[0] * sign, unit)

    def _inverse(self, a: Any) -> Any:
        return a if a[1] == "1" else (-a[0], a[1])

    def _validate(self, value: Any) -> Any:
        if (
            not isinstance(value, tuple)
            or len(value) != 2
            or value[0] not in (1, -1)
            or value[1] not in self._UNITS
        ):
            raise GroupError(f"Q8: expected (±1, unit), got {value!r}")
        return value

    def generators(self) -> list[GroupElement]:
        return [self.element((1, "i")), self.element((1, "j"))]

    def _enumerate(self) -> list[Any]:
        return [(s, u) for s in (1, -1) for u in self._UNITS]


# ---------------------------------------------------------------- S_20 without listing


def test_symmetric_group_20_without_listing(no_listing: None) -> None:
    start = time.perf_counter()
    s20 = SymmetricGroup(20)
    assert s20.order() == math.factorial(20)
    assert len(s20.generators()) == 2
    samples = s20.sample(200, seed=3)
    assert samples == s20.sample(200, seed=3)  # seeded
    assert len({g.value for g in samples}) == 200  # 200 draws from 20! elements
    rng = random.Random(0)
    for _ in range(50):
        perm = list(range(20))
        rng.shuffle(perm)
        assert s20.contains(perm) and s20.element(perm).value == tuple(perm)
    assert not s20.contains([*range(19), 0])  # not a permutation
    assert s20.stabilizer(7).order() == math.factorial(19)
    assert (
        time.perf_counter() - start < 10
    )  # well under a second alone; generous on a loaded machine


def test_symmetric_group_from_plain_generators_matches() -> None:
    n = 20
    plain = PermutationGroup(
        [[1, 0, *range(2, n)], [(i + 1) % n for i in range(n)]], name="S20 by generators"
    )
    assert plain.order() == math.factorial(n)
    assert len(plain.basic_orbits()) == len(plain.base())
    assert math.prod(len(o) for o in plain.basic_orbits()) == plain.order()
    assert all(plain.contains(g.value) for g in SymmetricGroup(n).sample(20, seed=1))


def test_listing_a_huge_group_is_refused_with_the_order_and_budget() -> None:
    s20 = SymmetricGroup(20)
    with pytest.raises(
        GroupError,
        match=rf"S20: .*at most {ENUMERATION_BUDGET} elements.*ENUMERATION_BUDGET.*order {math.factorial(20)}",
    ):
        s20.elements()
    with pytest.raises(GroupError, match="element index needs the element list"):
        s20.element(3)
    with pytest.raises(GroupError, match=r"order 3715891200"):
        _graph_group("paths10x10").elements()
    with pytest.raises(GroupError, match=r"order 2000000"):
        TorusTranslations(2000, 1000).elements()


def test_max_order_is_a_declared_bound() -> None:
    s7 = PermutationGroup([[1, 0, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5, 6, 0]], max_order=100, name="S7?")
    with pytest.raises(GroupError, match=r"max_order=100 elements, got one of order 5040"):
        s7.order()
    with pytest.raises(GroupError, match=r"max_order=100"):
        s7.elements()
    assert s7.contains([1, 2, 0, 3, 4, 5, 6])  # membership needs no listing
    unbounded = PermutationGroup(s7.generator_permutations())
    assert unbounded.order() == 5040 and len(unbounded.elements()) == 5040


# ---------------------------------------------------------------- graphs on 100 nodes


@pytest.mark.parametrize("key", list(GRAPHS))
def test_graph_automorphisms_of_100_node_graphs(key: str, no_listing: None) -> None:
    graph, expected = _graph(key), GRAPHS[key][1]
    start = time.perf_counter()
    group = graph_automorphism_group(graph)
    assert group.order() == expected
    assert group.degree == 100
    gens = group.generators()
    assert 1 <= len(gens) <= max(1, math.floor(math.log2(expected)))
    assert all(_is_automorphism(graph, g.value) for g in gens)
    samples = group.sample(200, seed=0)
    assert all(_is_automorphism(graph, g.value) for g in samples)
    assert all(group.contains(g.value) and group.element(g.value) == g for g in samples)
    # a transposition of two nodes of different degree (or position) is no automorphism
    wrong = list(range(100))
    wrong[0], wrong[1] = 1, 0
    assert _is_automorphism(graph, tuple(wrong)) == group.contains(wrong)
    assert time.perf_counter() - start < 10


def test_uniform_sampling_of_a_graph_group() -> None:
    """Each of the 200 automorphisms of C_100 appears about equally often."""
    group = _graph_group("cycle100")
    counts: dict[tuple[int, ...], int] = {}
    for g in group.sample(4000, seed=5):
        counts[g.value] = counts.get(g.value, 0) + 1
    assert len(counts) == 200
    assert max(counts.values()) < 3 * 20 and min(counts.values()) > 20 // 3


@pytest.mark.parametrize("key", list(GRAPHS))
def test_stabilizers_of_graph_groups(key: str) -> None:
    group = _graph_group(key)
    for point in (0, 37, 99):
        stab = group.stabilizer(point)
        assert isinstance(stab, PermutationGroup)
        assert stab.order() * len(group.orbit(point)) == group.order()
        assert all(g.value[point] == point for g in stab.generators())
        assert all(group.contains(g.value) for g in stab.sample(20, seed=point))
        assert all(g.value[point] == point for g in stab.sample(20, seed=point))


def test_petersen_and_small_graphs_match_vf2() -> None:
    from networkx.algorithms import isomorphism

    for graph in [
        nx.petersen_graph(),
        nx.cycle_graph(7),
        nx.star_graph(5),
        nx.complete_bipartite_graph(3, 3),
        nx.empty_graph(4),
    ]:
        nodes = list(graph.nodes)
        pos = {v: i for i, v in enumerate(nodes)}
        vf2 = {
            tuple(pos[m[v]] for v in nodes)
            for m in isomorphism.GraphMatcher(graph, graph).isomorphisms_iter()
        }
        group = graph_automorphism_group(graph)
        assert group.order() == len(vf2)
        assert {g.value for g in group.elements()} == vf2


@st.composite
def small_graphs(draw: st.DrawFn) -> nx.Graph:
    n = draw(st.integers(1, 7))
    directed = draw(st.booleans())
    pairs = [(a, b) for a in range(n) for b in range(n) if (a != b if directed else a < b)]
    edges = (
        draw(st.lists(st.sampled_from(pairs), unique=True, max_size=len(pairs))) if pairs else []
    )
    graph = nx.DiGraph() if directed else nx.Graph()
    graph.add_nodes_from(range(n))
    graph.add_edges_from(edges)
    if draw(st.booleans()) and n:
        graph.add_edge(0, 0)  # a self-loop
    return graph


@settings(max_examples=40)
@given(small_graphs())
def test_graph_automorphisms_match_brute_force_on_random_graphs(graph: nx.Graph) -> None:
    n = graph.number_of_nodes()
    edges = set(graph.edges)
    if not graph.is_directed():
        edges = {frozenset(e) for e in edges}

    def image(p: tuple[int, ...]) -> set[Any]:
        moved = {(p[u], p[v]) for u, v in graph.edges}
        return moved if graph.is_directed() else {frozenset(e) for e in moved}

    brute = {p for p in itertools.permutations(range(n)) if image(p) == edges}
    group = graph_automorphism_group(graph)
    assert group.order() == len(brute)
    assert {g.value for g in group.elements()} == brute
    assert len(group.generators()) <= max(1, math.floor(math.log2(len(brute))))


# ---------------------------------------------------------------- Schreier–Sims against sympy


@st.composite
def permutation_generators(draw: st.DrawFn) -> tuple[int, list[list[int]]]:
    degree = draw(st.integers(1, 9))
    gens = draw(st.lists(st.permutations(list(range(degree))), min_size=1, max_size=3))
    return degree, [list(g) for g in gens]


@given(permutation_generators(), st.integers(0, 2**16))
def test_schreier_sims_matches_sympy(data: tuple[int, list[list[int]]], seed: int) -> None:
    from sympy.combinatorics import Permutation as SymPermutation
    from sympy.combinatorics import PermutationGroup as SymGroup

    degree, gens = data
    ours = PermutationGroup(gens, degree=degree)
    theirs = SymGroup([SymPermutation(g) for g in gens])
    assert ours.order() == theirs.order()
    rng = random.Random(seed)
    for _ in range(10):
        perm = list(range(degree))
        rng.shuffle(perm)
        assert ours.contains(perm) == theirs.contains(SymPermutation(perm))
    point = rng.randrange(degree)
    stab = ours.stabilizer(point)
    assert stab.order() == theirs.stabilizer(point).order()
    assert all(g.value[point] == point for g in stab.generators())
    for g in ours.sample(5, seed=seed):
        assert theirs.contains(SymPermutation(list(g.value)))


def test_schreier_sims_matches_listing_on_small_groups() -> None:
    for gens in (
        [[1, 2, 3, 4, 5, 0], [0, 5, 4, 3, 2, 1]],
        [[1, 0, 2, 3], [0, 1, 3, 2]],
        [[2, 0, 1, 4, 3]],
    ):
        group = PermutationGroup(gens)
        listed = group._enumerate()
        assert group.order() == len(listed) == len(set(listed))
        assert all(group.contains(p) for p in listed)


# ---------------------------------------------------------------- closed-form orders


def test_closed_form_orders_do_not_list(no_listing: None) -> None:
    assert TorusTranslations(512, 256).order() == 512 * 256
    assert p4(64).order() == 64 * 64 * 4 and p4m(64).order() == 64 * 64 * 8
    assert DihedralGroup(1000).order() == 2000 and CyclicGroup(10**9).order() == 10**9
    big = DirectProduct(SymmetricGroup(20), CyclicGroup(2))
    assert big.order() == 2 * math.factorial(20)
    g = big.sample(3, seed=0)
    assert all(big.contains(x) for x in g)
    assert DirectProduct(TorusTranslations(300, 300), DihedralGroup(4)).order() == 300 * 300 * 8


def test_user_subclass_order_still_lists() -> None:
    assert KleinFour().order() == 4 and Quaternion().order() == 8


# ---------------------------------------------------------------- words


def _check_every_word(group: FiniteGroup) -> None:
    gens = group.generators()
    for g in group.elements():
        word = group.word(g)
        assert all(isinstance(k, int) and 0 <= k < len(gens) for k in word)
        assert _evaluate(group, word) == g, (g, word)
    assert group.word(group.identity()) == []


@pytest.mark.parametrize(
    "make",
    [
        lambda: CyclicGroup(4),
        lambda: CyclicGroup(1),
        lambda: DihedralGroup(4),
        lambda: DihedralGroup(1),
        lambda: p4(4),
        lambda: p4m(3),
        lambda: DirectProduct(CyclicGroup(4), CyclicGroup(2)),
        lambda: DirectProduct(DihedralGroup(3), SymmetricGroup(3)),
        lambda: TorusTranslations(3, 5),
        lambda: TorusTranslations(1, 4),
        lambda: KleinFour(),
        lambda: Quaternion(),
        lambda: SymmetricGroup(4),
        lambda: PermutationGroup([[1, 2, 3, 4, 5, 0], [0, 5, 4, 3, 2, 1]], name="hexagon"),
        lambda: graph_automorphism_group(nx.petersen_graph()),
    ],
    ids=[
        "C4",
        "C1",
        "D4",
        "D1",
        "p4(4)",
        "p4m(3)",
        "C4xC2",
        "D3xS3",
        "T(3x5)",
        "T(1x4)",
        "V4",
        "Q8",
        "S4",
        "hexagon",
        "petersen",
    ],
)
def test_word_for_every_element(make: Any) -> None:
    _check_every_word(make())


def test_semidirect_product_words() -> None:
    c5 = CyclicGroup(5)
    semi = SemidirectProduct(c5, CyclicGroup(2), lambda h, n: n if h == 0 else (-n) % 5)
    _check_every_word(semi)  # type: ignore[arg-type]


def test_breadth_first_words_are_shortest() -> None:
    q8 = Quaternion()
    lengths = sorted(len(q8.word(g)) for g in q8.elements())
    # 1 | i, j | i² = -1, ij = k, ji = -k | -i = i³, -j = j³
    assert lengths == [0, 1, 1, 2, 2, 2, 3, 3]
    hexagon = PermutationGroup([[1, 2, 3, 4, 5, 0], [0, 5, 4, 3, 2, 1]])
    assert max(len(hexagon.word(g)) for g in hexagon.elements()) <= 4


def _large(which: str) -> PermutationGroup:
    if which == "S20":
        return SymmetricGroup(20)  # closed-form words
    if which == "S20 by generators":  # the same group through Schreier–Sims and the word table
        return PermutationGroup([[1, 0, *range(2, 20)], [(i + 1) % 20 for i in range(20)]])
    return _graph_group(which)


@pytest.mark.parametrize("which", ["S20", "S20 by generators", "cycle100", "paths10x10"])
def test_words_for_random_elements_of_large_groups(which: str, no_listing: None) -> None:
    group = _large(which)
    perms = group.generator_permutations()
    for g in group.sample(200, seed=11):
        word = group.word(g)
        assert _act_by_word(perms, word, group.degree) == g.value
    # and through the group's own composition, for a few
    for g in group.sample(5, seed=12):
        assert _evaluate(group, group.word(g)) == g
    assert group.word(group.identity()) == []


@given(permutation_generators(), st.integers(0, 2**16))
def test_schreier_sims_words_on_random_groups(data: tuple[int, list[list[int]]], seed: int) -> None:
    """The word table (not the breadth-first search) on random groups: sampled elements
    and, where small, every element."""
    import groupattn.groups._permutation as permutation_module

    degree, gens = data
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(permutation_module, "_SHORTEST_WORDS_UP_TO", 0)  # force the table
        group = PermutationGroup(gens, degree=degree)
        perms = group.generator_permutations()
        elements = group.elements() if group.order() <= 200 else group.sample(50, seed=seed)
        for g in elements:
            assert _act_by_word(perms, group.word(g), degree) == g.value


def test_word_table_with_long_cycles() -> None:
    """Generators of large order: inverses are written as long runs and reduced."""
    gens = [
        [*range(1, 11), 0, 11, 12],
        [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 11],
        [1, 0, *range(2, 13)],
    ]
    group = PermutationGroup(gens)
    assert group.order() == math.factorial(11) * 2
    perms = group.generator_permutations()
    for g in group.sample(30, seed=4):
        assert _act_by_word(perms, group.word(g), 13) == g.value


def test_word_of_a_product_with_large_factor(no_listing: None) -> None:
    big = DirectProduct(SymmetricGroup(20), CyclicGroup(3))
    for g in big.sample(10, seed=2):
        assert _evaluate(big, big.word(g)) == g


def test_symmetric_group_words_for_every_element_of_small_n() -> None:
    for n in range(1, 6):
        _check_every_word(SymmetricGroup(n))
    s60 = SymmetricGroup(60)  # closed form: no table, any n
    perms = s60.generator_permutations()
    for g in s60.sample(3, seed=0):
        assert _act_by_word(perms, s60.word(g), 60) == g.value


def test_word_table_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    import groupattn.groups._permutation as permutation_module

    monkeypatch.setattr(permutation_module, "WORD_TABLE_BUDGET", 50)
    group = graph_automorphism_group(_paths_graph())
    with pytest.raises(
        GroupError, match=r"WORD_TABLE_BUDGET=50 transversal slots for words, got 1\d\d"
    ):
        group.word(group.sample(1, seed=0)[0])


def test_word_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(GroupError, match=r"S20: expected a permutation of 0\.\.19"):
        SymmetricGroup(20).word([*range(19), 0])
    with pytest.raises(GroupError, match="does not contain"):
        PermutationGroup([[1, 2, 0, 3]]).word([1, 0, 2, 3])
    monkeypatch.setattr(base_module, "WORD_BUDGET", 5)
    with pytest.raises(GroupError, match="WORD_BUDGET=5"):
        Quaternion().word((1, "k"))

    class NotGenerated(KleinFour):
        """Claims only one generator, which does not generate V4."""

        def key(self) -> Hashable:
            return "V4-one-generator"

        def generators(self) -> list[GroupElement]:
            return [self.element((1, 0))]

    monkeypatch.setattr(base_module, "WORD_BUDGET", 100)
    with pytest.raises(GroupError, match="expected the generators to generate the group"):
        NotGenerated().word((0, 1))


# ---------------------------------------------------------------- equality and bad input


def test_permutation_groups_compare_by_their_elements() -> None:
    a = PermutationGroup([[1, 2, 3, 0], [3, 2, 1, 0]])
    b = PermutationGroup([[3, 0, 1, 2], [1, 0, 3, 2]])  # other generators of the same D4
    c = PermutationGroup([[1, 2, 3, 0]])
    assert a == b and hash(a) == hash(b) and a != c
    assert a.element([0, 3, 2, 1]) == b.element([0, 3, 2, 1])
    assert b.element(a.element([2, 3, 0, 1])) == b.element(
        [2, 3, 0, 1]
    )  # an element of an equal group
    with pytest.raises(GroupError, match="expected an element of"):
        c.element(a.element([3, 2, 1, 0]))
    cycle = _graph_group("cycle100")
    rotation, reflection = [(i + 1) % 100 for i in range(100)], [(-i) % 100 for i in range(100)]
    assert cycle == PermutationGroup([rotation, reflection], name="D100 on a 100-gon")


_PRIVATE = re.compile(r"(?<![\w.])_[A-Za-z]\w*")


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda: DirectProduct(CyclicGroup(2), "C2"),
            "DirectProduct: expected the second factor as a Group, got 'C2'",
        ),
        (
            lambda: DirectProduct(3, CyclicGroup(2)),
            "DirectProduct: expected the first factor as a Group",
        ),
        (
            lambda: SemidirectProduct(CyclicGroup(5), 2, lambda h, n: n),
            "SemidirectProduct: expected the acting group",
        ),
        (
            lambda: SemidirectProduct(CyclicGroup(5), CyclicGroup(2), "phi"),
            "expected the automorphism as a callable",
        ),
        (lambda: RotoTranslationGroup(p4(4)), r"expected a point group.*RotoTranslationGroup"),
        (
            lambda: RotoTranslationGroup(DirectProduct(p4(2), CyclicGroup(2))),
            "expected a point group",
        ),
        (
            lambda: PermutationGroup(CyclicGroup(4)),
            "PermutationGroup: expected generator permutations",
        ),
        (
            lambda: PermutationGroup([CyclicGroup(4)]),
            "expected a permutation as a sequence of ints",
        ),
        (lambda: SymmetricGroup("3"), "SymmetricGroup: expected n >= 1, got '3'"),
        (lambda: graph_automorphism_group(p4(4)), "expected a networkx graph, got the group p4"),
        (
            lambda: graph_automorphism_group(object()),
            "expected a networkx graph, got an instance of object",
        ),
        (lambda: group_from_name(3, (4, 4)), "group_from_name: expected a group name"),
        (lambda: check_group_axioms("C4"), "check_group_axioms: expected a Group, got 'C4'"),
        (
            lambda: integer_matrix(p4(4), 1),
            r"integer_matrix: expected a point group .*RotoTranslationGroup",
        ),
        (
            lambda: real_matrix(SymmetricGroup(3), 1),
            r"real_matrix: expected a point group .*SymmetricGroup",
        ),
    ],
)
def test_wrong_group_types_raise_without_private_names(make: Any, message: str) -> None:
    with pytest.raises(GroupError, match=message) as info:
        make()
    assert not _PRIVATE.search(str(info.value)), str(info.value)


def test_stabilizer_and_orbit_errors() -> None:
    group = SymmetricGroup(5)
    with pytest.raises(GroupError, match=r"expected a point in \[0, 5\), got 5"):
        group.stabilizer(5)
    with pytest.raises(GroupError, match="as an int"):
        group.orbit("0")  # type: ignore[arg-type]
