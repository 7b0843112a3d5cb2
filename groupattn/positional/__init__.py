"""Positional encodings, each with its contract: invariant ones built from orbitals, and baselines.

Every encoding indexed by orbital shares one code path, :class:`IndexedTable` (an index
the module owns, a plain tensor attribute, and the gather of a table by it). Pairwise
biases, a table indexed by a label per token pair (:class:`PairTableBias`):
:class:`OrbitalBias` (a learned value per orbital of any G-set),
:class:`ContinuousOrbitalBias` (an MLP of a pair invariant),
:class:`CirculantRelativeBias` (the orbitals of torus translations), and the baselines
:class:`PairwiseBias` and :class:`ClippedRelativeBias`. Roto-translations:
:class:`OrbitalTableEncoding` (a learned value per orbital of ``T ⋊ H`` on the
(output, key) pairs of lifting and group attention, labels from the closed form of
:func:`relative_geometry`).
"""

from ._group import (
    ContinuousGroupEncoding,
    GroupPositionalEncoding,
    OrbitalTableEncoding,
    RelativeGeometry,
    WindowTiling,
    point_group_tables,
    relative_geometry,
    window_tiling,
)
from ._orbital import (
    ContinuousOrbitalBias,
    IndexedTable,
    OrbitalBias,
    PairTableBias,
    PairwiseBias,
    gather_pair_table,
    labels_contract,
    token_permutation,
)
from ._translation import (
    AbsolutePositionalEncoding,
    CirculantRelativeBias,
    ClippedRelativeBias,
    ConvPositionalEncoding,
    translation_contract,
)

__all__ = [
    "AbsolutePositionalEncoding",
    "CirculantRelativeBias",
    "ClippedRelativeBias",
    "ContinuousGroupEncoding",
    "ContinuousOrbitalBias",
    "ConvPositionalEncoding",
    "GroupPositionalEncoding",
    "IndexedTable",
    "OrbitalBias",
    "OrbitalTableEncoding",
    "PairTableBias",
    "PairwiseBias",
    "RelativeGeometry",
    "WindowTiling",
    "gather_pair_table",
    "labels_contract",
    "point_group_tables",
    "relative_geometry",
    "token_permutation",
    "translation_contract",
    "window_tiling",
]
