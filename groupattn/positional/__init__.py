"""Positional encodings, each with its contract: invariant ones built from orbitals, and baselines.

Every encoding indexed by orbital shares one code path, [`IndexedTable`][groupattn.positional.IndexedTable] (an index
the module owns, a plain tensor attribute, and the gather of a table by it). Pairwise
biases, a table indexed by a label per token pair ([`PairTableBias`][groupattn.positional.PairTableBias]):
[`OrbitalBias`][groupattn.positional.OrbitalBias] (a learned value per orbital of any G-set),
[`ContinuousOrbitalBias`][groupattn.positional.ContinuousOrbitalBias] (an MLP of a pair invariant),
[`CirculantRelativeBias`][groupattn.positional.CirculantRelativeBias] (the orbitals of torus translations), and the baselines
[`PairwiseBias`][groupattn.positional.PairwiseBias] and [`ClippedRelativeBias`][groupattn.positional.ClippedRelativeBias]. Roto-translations:
[`OrbitalTableEncoding`][groupattn.positional.OrbitalTableEncoding] (a learned value per orbital of ``T ⋊ H`` on the
(output, key) pairs of lifting and group attention, labels from the closed form of
[`relative_geometry`][groupattn.positional.relative_geometry]). Absolute (non-invariant) baselines:
[`AbsolutePositionalEncoding`][groupattn.positional.AbsolutePositionalEncoding] on tokens and
[`LiftedAbsolutePositionalEncoding`][groupattn.positional.LiftedAbsolutePositionalEncoding] on lifted fields.

Encodings from the literature, each with a contract decided from its pair labels:
[`SinusoidalPositionalEncoding`][groupattn.positional.SinusoidalPositionalEncoding] (absolute, breaks every symmetry that
moves a token), [`RotaryPositionalEncoding`][groupattn.positional.RotaryPositionalEncoding] (RoPE, planar or torus
frequencies; used by [`RotarySelfAttention`][groupattn.positional.RotarySelfAttention], rotation by
[`apply_rotary`][groupattn.positional.apply_rotary]), [`ALiBiBias`][groupattn.positional.ALiBiBias] and
[`LogSpacedContinuousBias`][groupattn.positional.LogSpacedContinuousBias] (SwinV2).
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
from ._lifted import LiftedAbsolutePositionalEncoding, LiftedOrbitPositionalEncoding
from ._literature import (
    ALiBiBias,
    LogSpacedContinuousBias,
    RotaryPositionalEncoding,
    RotarySelfAttention,
    SinusoidalPositionalEncoding,
    apply_rotary,
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
    "ALiBiBias",
    "AbsolutePositionalEncoding",
    "CirculantRelativeBias",
    "ClippedRelativeBias",
    "ContinuousGroupEncoding",
    "ContinuousOrbitalBias",
    "ConvPositionalEncoding",
    "GroupPositionalEncoding",
    "IndexedTable",
    "LiftedAbsolutePositionalEncoding",
    "LiftedOrbitPositionalEncoding",
    "LogSpacedContinuousBias",
    "OrbitalBias",
    "OrbitalTableEncoding",
    "PairTableBias",
    "PairwiseBias",
    "RelativeGeometry",
    "RotaryPositionalEncoding",
    "RotarySelfAttention",
    "SinusoidalPositionalEncoding",
    "WindowTiling",
    "apply_rotary",
    "gather_pair_table",
    "labels_contract",
    "point_group_tables",
    "relative_geometry",
    "token_permutation",
    "translation_contract",
    "window_tiling",
]
