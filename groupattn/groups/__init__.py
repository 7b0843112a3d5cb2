"""Groups: the algebra only (identity, composition, inverse, elements, generators).

Concrete groups: :class:`CyclicGroup`, :class:`DihedralGroup`, translations on a torus
(:class:`TorusTranslations`) and on Z² (:class:`GridTranslations`), direct and
semidirect products, roto-translations (:func:`p4`, :func:`p4m`,
:class:`RotoTranslationGroup`), permutation groups from generators, the symmetric group
and graph automorphism groups. Define a new group by subclassing :class:`Group` or
:class:`FiniteGroup`, or by giving generator permutations to :class:`PermutationGroup`.

Every finite group writes its elements as words in its generators
(:meth:`FiniteGroup.word`: ``g == gens[w[0]] * gens[w[1]] * …``). Permutation groups
(including :class:`SymmetricGroup` and :func:`graph_automorphism_group`) keep a
stabiliser chain computed by Schreier–Sims, so order, membership, uniform sampling,
words and point stabilisers never list the elements; listing is refused beyond
:data:`ENUMERATION_BUDGET` elements.
"""

from ._base import ENUMERATION_BUDGET, WORD_BUDGET, FiniteGroup, Group, GroupElement, GroupError
from ._catalog import AxiomReport, builtin_groups, check_group_axioms
from ._named import GROUP_NAMES, group_from_name
from ._permutation import PermutationGroup, SymmetricGroup, graph_automorphism_group
from ._point import CyclicGroup, DihedralGroup, PointGroup, integer_matrix, real_matrix
from ._products import DirectProduct, RotoTranslationGroup, SemidirectProduct, p4, p4m
from ._translations import GridTranslations, TorusTranslations

__all__ = [
    "ENUMERATION_BUDGET",
    "GROUP_NAMES",
    "WORD_BUDGET",
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
