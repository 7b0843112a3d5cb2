"""The catalogue of built-in groups and an axiom / action-law self-check."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch

from ._base import Group
from ._permutation import PermutationGroup, SymmetricGroup
from ._point import CyclicGroup, DihedralGroup
from ._products import p4, p4m
from ._translations import GridTranslations, TorusTranslations

__all__ = ["AxiomReport", "builtin_groups", "check_group_axioms"]


def builtin_groups() -> dict[str, Group]:
    """One representative of every built-in family, keyed by a short name."""
    import networkx as nx

    from ._permutation import graph_automorphism_group

    return {
        "trivial": CyclicGroup(1),
        "c4": CyclicGroup(4),
        "c8": CyclicGroup(8),
        "d4": DihedralGroup(4),
        "torus": TorusTranslations(8, 8),
        "z2": GridTranslations(),
        "p4": p4(8),
        "p4m": p4m(8),
        "s5": SymmetricGroup(5),
        "hexagon": PermutationGroup([[1, 2, 3, 4, 5, 0], [0, 5, 4, 3, 2, 1]], name="hexagon"),
        "petersen": graph_automorphism_group(nx.petersen_graph()),
    }


@dataclass
class AxiomReport:
    """Outcome of :func:`check_group_axioms` for one group."""

    group: Group
    checked_triples: int
    failures: list[str]

    @property
    def ok(self) -> bool:
        """Whether every axiom held."""
        return not self.failures


def check_group_axioms(group: Group, max_elements: int = 24, seed: int = 0) -> AxiomReport:
    """Check identity, inverses, closure and associativity on (a sample of) the elements.

    All elements are used when the group has at most ``max_elements``; otherwise a
    seeded sample of that many. Also checks the action law on images for spatial groups
    and on points for permutation groups.
    """
    from ..actions import GridField, GSet  # local: actions sits above groups

    if group.is_finite and (group.order() or 0) <= max_elements:
        elems = group.elements()  # type: ignore[attr-defined]
    else:
        elems = group.sample(max_elements, seed=seed)
    failures: list[str] = []
    e = group.identity()
    for a in elems:
        if group.compose(a, e) != a or group.compose(e, a) != a:
            failures.append(f"identity fails for {a!r}")
        if group.compose(a, group.inverse(a)) != e:
            failures.append(f"inverse fails for {a!r}")
    triples = list(itertools.product(elems[:10], repeat=3))
    for a, b, c in triples:
        ab_c = group.compose(group.compose(a, b), c)
        a_bc = group.compose(a, group.compose(b, c))
        if ab_c != a_bc:
            failures.append(f"associativity fails for {a!r}, {b!r}, {c!r}")
        if not group.contains(ab_c):
            failures.append(f"closure fails for {a!r}, {b!r}, {c!r}")
    # action law
    pairs = list(itertools.product(elems[:6], repeat=2))
    if isinstance(group, PermutationGroup):
        gset = GSet.natural(group)
        for a, b in pairs:
            pa, pb = gset.permutation(a), gset.permutation(b)
            if not torch.equal(pa[pb], gset.permutation(group.compose(a, b))):
                failures.append(f"action law fails for {a!r}, {b!r}")
    else:
        try:
            field = GridField()
            x = torch.arange(64, dtype=torch.float64).reshape(1, 1, 8, 8)
            for a, b in pairs:
                lhs = field.act(group, a, field.act(group, b, x))
                if not torch.equal(lhs, field.act(group, group.compose(a, b), x)):
                    failures.append(f"action law on images fails for {a!r}, {b!r}")
        except ValueError as err:
            if "acting exactly" not in str(err):
                raise
    return AxiomReport(group, len(triples), failures)
