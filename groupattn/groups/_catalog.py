"""The catalogue of built-in groups and an axiom / action-law self-check."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ._base import Group, GroupError, _describe
from ._permutation import PermutationGroup, SymmetricGroup
from ._point import CyclicGroup, DihedralGroup
from ._products import RotoTranslationGroup, p4, p4m
from ._translations import GridTranslations, TorusTranslations

__all__ = ["AxiomReport", "builtin_groups", "check_group_axioms"]


def _hexagon() -> Group:
    """The symmetries of a hexagon's six vertices (D6 as a permutation group)."""
    return PermutationGroup([[1, 2, 3, 4, 5, 0], [0, 5, 4, 3, 2, 1]], name="hexagon")


def _petersen() -> Group:
    """The automorphism group of the Petersen graph (S5 acting on its ten vertices)."""
    import networkx as nx

    from ._permutation import graph_automorphism_group

    return graph_automorphism_group(nx.petersen_graph())


#: The groups that need no size, by catalogue name (also names ``parse_group_name`` accepts).
_FIXED_GROUPS: dict[str, Callable[[], Group]] = {
    "trivial": lambda: CyclicGroup(1),
    "z2": GridTranslations,
    "s5": lambda: SymmetricGroup(5),
    "hexagon": _hexagon,
    "petersen": _petersen,
}


def builtin_groups() -> dict[str, Group]:
    """One representative of every built-in family, keyed by a short name.

    Every key is a name [`parse_group_name`][groupattn.groups.parse_group_name] accepts; the
    families that act on an ``H × W`` grid (``torus``, ``p4``, ``p4m``) are shown on an
    ``8 × 8`` one here (``parse_group_name("p4", (8, 8)) == builtin_groups()["p4"]``).
    """
    return {
        "trivial": _FIXED_GROUPS["trivial"](),
        "c4": CyclicGroup(4),
        "c8": CyclicGroup(8),
        "d4": DihedralGroup(4),
        "torus": TorusTranslations(8, 8),
        "z2": _FIXED_GROUPS["z2"](),
        "p4": p4(8),
        "p4m": p4m(8),
        "s5": _FIXED_GROUPS["s5"](),
        "hexagon": _FIXED_GROUPS["hexagon"](),
        "petersen": _FIXED_GROUPS["petersen"](),
    }


@dataclass
class AxiomReport:
    """Outcome of [`check_group_axioms`][groupattn.groups.check_group_axioms] for one group."""

    group: Group
    checked_triples: int
    failures: list[str]
    #: What the action law was checked on: ``"points"``, ``"images"``, ``"coordinates"``
    #: or ``"none …"`` for a group with no built-in action.
    action: str = "none"

    @property
    def ok(self) -> bool:
        """Whether every axiom held."""
        return not self.failures


def check_group_axioms(group: Group, max_elements: int = 24, seed: int = 0) -> AxiomReport:
    """Check identity, inverses, closure and associativity on (a sample of) the elements.

    All elements are used when the group has at most ``max_elements``; otherwise a
    seeded sample of that many. Also checks the action law ``g·(h·x) = (gh)·x``: exactly
    on points for permutation groups, exactly on images for translations and point groups
    acting exactly on the grid (C4, D4, p4, p4m, …), and on float coordinates for other
    point groups (C8, D6, …). Groups without a built-in action (e.g. a user subclass of
    [`FiniteGroup`][groupattn.groups.FiniteGroup]) get the axioms only (``AxiomReport.action`` says which).
    """
    if not isinstance(group, Group):
        raise GroupError(f"check_group_axioms: expected a Group, got {_describe(group)}")
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
    action = _check_action_law(group, pairs, failures)
    return AxiomReport(group, len(triples), failures, action)


def _check_action_law(group: Group, pairs: list[tuple[Any, Any]], failures: list[str]) -> str:
    """Append action-law failures; return what the group was checked acting on."""
    from ..actions import (  # actions sits above groups
        GridField,
        GSet,
        act_on_coordinates,
        point_group_of,
    )

    if isinstance(group, PermutationGroup):
        gset = GSet.natural(group)
        for a, b in pairs:
            pa, pb = gset.permutation(a), gset.permutation(b)
            if not torch.equal(pa[pb], gset.permutation(group.compose(a, b))):
                failures.append(f"action law on points fails for {a!r}, {b!r}")
        return "points"
    try:
        point_group = point_group_of(group)
    except GroupError:
        return "none (not a permutation or spatial group)"
    if point_group is None or point_group.acts_exactly_on_grid:
        field = GridField()
        # a finite translation part acts on images of its own size (a torus), Z² on any
        height, width = 8, 8
        if isinstance(group, TorusTranslations):
            height, width = group.height * group.stride, group.width * group.stride
        elif isinstance(group, RotoTranslationGroup) and group.size is not None:
            height = width = group.size
        x = torch.arange(height * width, dtype=torch.float64).reshape(1, 1, height, width)
        for a, b in pairs:
            lhs = field.act(group, a, field.act(group, b, x))
            if not torch.equal(lhs, field.act(group, group.compose(a, b), x)):
                failures.append(f"action law on images fails for {a!r}, {b!r}")
        return "images"
    coords = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.5, -2.0], [3.0, 1.5]], dtype=torch.float64)
    for a, b in pairs:
        lhs = act_on_coordinates(group, a, act_on_coordinates(group, b, coords))
        rhs = act_on_coordinates(group, group.compose(a, b), coords)
        if not torch.allclose(lhs, rhs, rtol=0.0, atol=1e-12):
            failures.append(f"action law on coordinates fails for {a!r}, {b!r}")
    return "coordinates"
