"""Orbits, stabilizers and orbitals of G-sets, checked against Burnside's lemma and brute force."""

from __future__ import annotations

import itertools
from functools import cache

import networkx as nx
import pytest
import torch
from custom_groups import KleinFour
from hypothesis import given, settings
from hypothesis import strategies as st

from groupattn.actions import GSet, SetField
from groupattn.groups import (
    CyclicGroup,
    FiniteGroup,
    GroupElement,
    GroupError,
    PermutationGroup,
    SymmetricGroup,
    TorusTranslations,
    check_group_axioms,
    graph_automorphism_group,
    p4,
    p4m,
)
from groupattn.testing.strategies import group_elements, signals


def _permutations(gset: GSet) -> list[list[int]]:
    assert isinstance(gset.group, FiniteGroup)
    return [gset.permutation(g).tolist() for g in gset.group.elements()]


def _burnside_orbits(perms: list[list[int]]) -> int:
    """(1/|G|) Σ_g fix(g), fixed points counted one by one."""
    total = sum(sum(1 for i, j in enumerate(p) if i == j) for p in perms)
    assert total % len(perms) == 0
    return total // len(perms)


def _burnside_orbitals(perms: list[list[int]]) -> int:
    """(1/|G|) Σ_g fix(g)²: g fixes the pair (i, j) iff it fixes i and j."""
    total = sum(sum(1 for i, j in enumerate(p) if i == j) ** 2 for p in perms)
    assert total % len(perms) == 0
    return total // len(perms)


def _check_orbital_partition(gset: GSet, perms: list[list[int]]) -> None:
    """Labels are invariant under every element, and pairs with one label are related by some element."""
    labels = gset.orbitals()
    n = gset.num_points
    assert labels.shape == (n, n) and labels.dtype == torch.long
    for p in perms:
        pt = torch.tensor(p)
        assert torch.equal(labels[pt][:, pt], labels)  # labels[p[i], p[j]] = labels[i, j]
    # brute force: the orbit of the pair (0, j) under all elements is exactly its label class
    for j in range(0, n, max(1, n // 7)):
        images = {(p[0], p[j]) for p in perms}
        cls = {
            (a, b) for a, b in zip(*torch.nonzero(labels == labels[0, j], as_tuple=True)) if a == 0
        }
        assert {(0, b) for (a, b) in images if a == 0} == {(0, int(b)) for _, b in cls}


@pytest.mark.parametrize("n", [3, 4, 6])
def test_translations_on_a_torus_have_n_squared_orbitals(n: int) -> None:
    gset = GSet.grid(TorusTranslations(n, n), n, n)
    perms = _permutations(gset)
    assert gset.num_orbitals() == _burnside_orbitals(perms) == n * n
    assert gset.num_orbits() == _burnside_orbits(perms) == 1
    _check_orbital_partition(gset, perms)
    # the label is a function of the circular offset (j - i) mod n only
    coords = torch.tensor(list(itertools.product(range(n), repeat=2)))
    offsets = (coords[None, :, :] - coords[:, None, :]) % n
    key = offsets[..., 0] * n + offsets[..., 1]
    labels = gset.orbitals()
    for k in range(n * n):
        assert labels[key == k].unique().numel() == 1


@pytest.mark.parametrize(("factory", "expected"), [(p4, 18), (p4m, 15)], ids=["p4", "p4m"])
def test_p4_and_p4m_on_8x8_torus(factory, expected: int) -> None:
    group = factory(8)
    gset = GSet.grid(group, 8, 8)
    perms = _permutations(gset)
    assert _burnside_orbitals(perms) == expected
    assert gset.num_orbitals() == expected
    assert gset.num_orbits() == _burnside_orbits(perms) == 1
    _check_orbital_partition(gset, perms)


@pytest.mark.parametrize("n", [2, 4, 5])
def test_symmetric_group_has_two_orbitals(n: int) -> None:
    gset = GSet.natural(SymmetricGroup(n))
    perms = _permutations(gset)
    assert gset.num_orbitals() == _burnside_orbitals(perms) == 2
    labels = gset.orbitals()
    assert torch.equal(labels == labels[0, 0], torch.eye(n, dtype=torch.bool))


def test_orbitals_of_a_large_group_need_only_generators() -> None:
    big = SymmetricGroup(12, max_order=1000)  # 12! elements: never enumerated
    gset = GSet.natural(big)
    assert gset.num_orbitals() == 2 and gset.num_orbits() == 1
    with pytest.raises(GroupError, match="max_order"):
        big.elements()


@pytest.mark.parametrize(
    "make",
    [
        lambda: GSet.grid(p4(4), 4, 4),
        lambda: GSet.grid(TorusTranslations(2, 3, stride=2), 4, 6),
        lambda: GSet.lifted_grid(p4m(4), p4m(4).point_group, 4, 4),
        lambda: GSet.natural(graph_automorphism_group(nx.petersen_graph())),
    ],
    ids=["p4-grid", "strided-torus", "p4m-lifted", "petersen"],
)
def test_orbit_stabilizer_theorem(make) -> None:
    gset = make()
    group = gset.group
    orbits = gset.orbits()
    perms = _permutations(gset)
    assert gset.num_orbits() == _burnside_orbits(perms)
    for point in range(0, gset.num_points, max(1, gset.num_points // 6)):
        orbit = {p[point] for p in perms}
        assert orbit == set(torch.nonzero(orbits == orbits[point]).flatten().tolist())
        stabilizer = gset.stabilizer(point)
        assert all(int(gset.permutation(g)[point]) == point for g in stabilizer)
        assert len(orbit) * len(stabilizer) == group.order()


def test_strided_torus_has_stride_squared_orbits() -> None:
    gset = GSet.grid(TorusTranslations(3, 3, stride=2), 6, 6)
    assert gset.num_orbits() == 4  # the four polyphase components
    assert gset.num_orbitals() == _burnside_orbitals(_permutations(gset))


# ---------------------------------------------------------------- custom groups, no library change
def test_hexagon_from_two_generator_permutations() -> None:
    rotate = [1, 2, 3, 4, 5, 0]
    reflect = [0, 5, 4, 3, 2, 1]
    hexagon = PermutationGroup([rotate, reflect], name="hexagon")
    gset = GSet.natural(hexagon)
    perms = _permutations(gset)
    assert hexagon.order() == 12
    assert gset.num_orbits() == 1
    assert gset.num_orbitals() == _burnside_orbitals(perms)
    # for the hexagon the orbitals are the cyclic distances 0, 1, 2, 3
    labels = gset.orbitals()
    distance = torch.tensor([[min((i - j) % 6, (j - i) % 6) for j in range(6)] for i in range(6)])
    for d in range(4):
        assert labels[distance == d].unique().numel() == 1
    assert gset.num_orbitals() == 4
    assert len(gset.stabilizer(0)) == 2
    _check_orbital_partition(gset, perms)


@settings(max_examples=8)
@given(data=st.data())
def test_hexagon_acts_on_token_sets(data: st.DataObject) -> None:
    hexagon = PermutationGroup([[1, 2, 3, 4, 5, 0], [0, 5, 4, 3, 2, 1]], name="hexagon")
    field = SetField(6)
    x = data.draw(signals(field))
    g, h = data.draw(group_elements(hexagon)), data.draw(group_elements(hexagon))
    assert torch.equal(
        field.act(hexagon, g, field.act(hexagon, h, x)), field.act(hexagon, g * h, x)
    )


@pytest.mark.parametrize(
    "graph",
    [nx.house_graph(), nx.path_graph(5), nx.cycle_graph(5), nx.balanced_tree(2, 2)],
    ids=["house", "path5", "cycle5", "tree"],
)
def test_graph_automorphism_orbits_and_orbitals(graph) -> None:
    group = graph_automorphism_group(graph)
    gset = GSet.natural(group)
    perms = _permutations(gset)
    assert gset.num_orbits() == _burnside_orbits(perms)
    assert gset.num_orbitals() == _burnside_orbitals(perms)
    _check_orbital_partition(gset, perms)
    # shortest-path distance is an invariant of the pair: constant on each orbital
    nodes = list(graph.nodes)
    lengths = dict(nx.all_pairs_shortest_path_length(graph))
    distance = torch.tensor([[lengths[u].get(v, -1) for v in nodes] for u in nodes])
    labels = gset.orbitals()
    for k in range(gset.num_orbitals()):
        assert distance[labels == k].unique().numel() == 1


def _corner_permutation(g: GroupElement) -> list[int]:
    """Corners (y, x) ∈ {0,1}², index 2y + x; bit 0 flips y, bit 1 flips x."""
    fy, fx = g.value
    return [2 * (y ^ fy) + (x ^ fx) for y in range(2) for x in range(2)]


def test_user_subclass_works_with_gset_and_axioms() -> None:
    v4 = KleinFour()
    assert check_group_axioms(v4).ok
    gset = GSet(v4, 4, _corner_permutation, name="V4 on corners")
    perms = _permutations(gset)
    for a, b in itertools.product(v4.elements(), repeat=2):  # action law
        pa, pb = gset.permutation(a), gset.permutation(b)
        assert torch.equal(pa[pb], gset.permutation(a * b))
    assert gset.num_orbits() == _burnside_orbits(perms) == 1
    assert gset.num_orbitals() == _burnside_orbitals(perms) == 4  # regular action: |G| orbitals
    assert gset.stabilizer(2) == [v4.identity()]


def test_gset_errors() -> None:
    gset = GSet(CyclicGroup(3), 3, lambda g: [0, 1], name="bad")
    with pytest.raises(
        GroupError, match=r"bad: expected a permutation of length 3, got shape \(2,\)"
    ):
        gset.permutation(1)
    good = GSet.natural(SymmetricGroup(3))
    with pytest.raises(GroupError, match=r"expected a point in \[0, 3\), got 5"):
        good.stabilizer(5)
    from groupattn.groups import GridTranslations

    with pytest.raises(GroupError, match="expected a finite group for stabilizers"):
        GSet.grid(GridTranslations(), 3, 3).stabilizer(0)


GSETS = {
    "torus-grid": lambda: GSet.grid(TorusTranslations(4, 3), 4, 3),
    "p4m-grid": lambda: GSet.grid(p4m(4), 4, 4),
    "p4-lifted": lambda: GSet.lifted_grid(p4(4), p4(4).point_group, 4, 4),
    "s5-points": lambda: GSet.natural(SymmetricGroup(5)),
    "petersen": lambda: GSet.natural(graph_automorphism_group(nx.petersen_graph())),
}


@cache
def _cached_gset(key: str) -> GSet:
    return GSETS[key]()


@pytest.mark.parametrize("key", list(GSETS))
@settings(max_examples=8)
@given(data=st.data())
def test_gset_action_law_is_exact(key: str, data: st.DataObject) -> None:
    gset = _cached_gset(key)
    g, h = data.draw(group_elements(gset.group)), data.draw(group_elements(gset.group))
    pg, ph = gset.permutation(g), gset.permutation(h)
    # i -> ph[i] -> pg[ph[i]] equals the permutation of g·h
    assert torch.equal(pg[ph], gset.permutation(g * h))
    assert torch.equal(gset.permutation(gset.group.identity()), torch.arange(gset.num_points))
    assert torch.equal(torch.sort(pg).values, torch.arange(gset.num_points))


def test_large_permutation_group_is_enumerated_at_most_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    n = 7
    big = PermutationGroup(
        [[1, 0, *range(2, n)], [(i + 1) % n for i in range(n)]], max_order=200, name="big"
    )
    calls = []
    original = PermutationGroup._enumerate

    def counting(self: PermutationGroup) -> list[tuple[int, ...]]:
        calls.append(1)
        return original(self)

    monkeypatch.setattr(PermutationGroup, "_enumerate", counting)
    gset = GSet.natural(big)
    assert gset.num_orbitals() == 2 and gset.num_orbits() == 1
    a, b = big.generators()
    assert big.permutation(a * b) == tuple(a.value[i] for i in b.value)
    assert len(calls) <= 1  # never enumerated (Schreier–Sims), or the failed closure is remembered
    with pytest.raises(GroupError, match="max_order=200"):
        big.elements()


def test_orbitals_are_a_copy_the_cache_cannot_be_edited_through() -> None:
    """Editing the returned labels in place must not change the G-set (attack finding)."""
    from groupattn.actions import GSet
    from groupattn.groups import SymmetricGroup

    gset = GSet.natural(SymmetricGroup(4))
    labels = gset.orbitals()
    labels.fill_(7)
    again = gset.orbitals()
    assert again.max() == 1 and again.min() == 0
    assert gset.num_orbitals() == 2
