"""Groups: the algebra only (identity, composition, inverse, elements, generators).

Concrete groups: :class:`CyclicGroup`, :class:`DihedralGroup`, translations on a torus
(:class:`TorusTranslations`) and on Z² (:class:`GridTranslations`), direct and
semidirect products, roto-translations (:func:`p4`, :func:`p4m`,
:class:`RotoTranslationGroup`), permutation groups from generators, the symmetric group
and graph automorphism groups. Define a new group by subclassing :class:`Group` or
:class:`FiniteGroup`, or by giving generator permutations to :class:`PermutationGroup`.
"""

from ._base import FiniteGroup, Group, GroupElement, GroupError
from ._catalog import AxiomReport, builtin_groups, check_group_axioms
from ._named import GROUP_NAMES, group_from_name
from ._permutation import PermutationGroup, SymmetricGroup, graph_automorphism_group
from ._point import CyclicGroup, DihedralGroup, PointGroup, integer_matrix, real_matrix
from ._products import DirectProduct, RotoTranslationGroup, SemidirectProduct, p4, p4m
from ._translations import GridTranslations, TorusTranslations

__all__ = [
    "GROUP_NAMES",
    "AxiomReport",
    "CyclicGroup",
    "DihedralGroup",
    "DirectProduct",
    "FiniteGroup",
    "GridTranslations",
    "Group",
    "GroupElement",
    "GroupError",
    "PermutationGroup",
    "PointGroup",
    "RotoTranslationGroup",
    "SemidirectProduct",
    "SymmetricGroup",
    "TorusTranslations",
    "builtin_groups",
    "check_group_axioms",
    "graph_automorphism_group",
    "group_from_name",
    "integer_matrix",
    "p4",
    "p4m",
    "real_matrix",
]
