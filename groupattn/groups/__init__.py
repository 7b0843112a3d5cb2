"""Groups: the algebra only (identity, composition, inverse, elements, generators).

Concrete groups: [`CyclicGroup`][groupattn.groups.CyclicGroup], [`DihedralGroup`][groupattn.groups.DihedralGroup], translations on a torus
([`TorusTranslations`][groupattn.groups.TorusTranslations]) and on Z² ([`GridTranslations`][groupattn.groups.GridTranslations]), direct and
semidirect products, roto-translations ([`p4`][groupattn.groups.p4], [`p4m`][groupattn.groups.p4m],
[`RotoTranslationGroup`][groupattn.groups.RotoTranslationGroup]), permutation groups from generators, the symmetric group
and graph automorphism groups. Define a new group by subclassing [`Group`][groupattn.groups.Group] or
[`FiniteGroup`][groupattn.groups.FiniteGroup], or by giving generator permutations to [`PermutationGroup`][groupattn.groups.PermutationGroup].
Groups by name: [`parse_group_name`][groupattn.groups.parse_group_name], the one parser of every name the library and
its command lines accept.

Every finite group writes its elements as words in its generators
([`FiniteGroup.word`][groupattn.groups.FiniteGroup.word]: ``g == gens[w[0]] * gens[w[1]] * …``). Permutation groups
(including [`SymmetricGroup`][groupattn.groups.SymmetricGroup] and [`graph_automorphism_group`][groupattn.groups.graph_automorphism_group]) keep a
stabiliser chain computed by Schreier–Sims, so order, membership, uniform sampling,
words and point stabilisers never list the elements; listing is refused beyond
[`ENUMERATION_BUDGET`][groupattn.groups.ENUMERATION_BUDGET] elements.
"""

from ._base import ENUMERATION_BUDGET, WORD_BUDGET, FiniteGroup, Group, GroupElement, GroupError
from ._catalog import AxiomReport, builtin_groups, check_group_axioms
from ._named import GROUP_NAMES, describe_group_names, group_from_name, parse_group_name
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
    "describe_group_names",
    "graph_automorphism_group",
    "group_from_name",
    "integer_matrix",
    "p4",
    "p4m",
    "parse_group_name",
    "real_matrix",
]
