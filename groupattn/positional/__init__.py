"""Positional encodings, each with its contract: invariant ones built from orbitals, and baselines.

Pairwise biases share one code path, a table indexed by a label per token pair
(:class:`PairTableBias`): :class:`OrbitalBias` (a learned value per orbital of any
G-set), :class:`ContinuousOrbitalBias` (an MLP of a pair invariant),
:class:`CirculantRelativeBias` (the orbitals of torus translations), and the
baselines :class:`PairwiseBias` and :class:`ClippedRelativeBias`.
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
