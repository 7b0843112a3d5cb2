"""Canonicalizers: pick a group element from the data and apply it (polyphase anchoring, APS, orientation)."""

from ._argmax import ArgmaxCanonicalizer, argmax_with_margin
from ._mass_centre import CentreOfMassAnchor, centre_of_mass_anchor, centre_of_mass_scores
from ._orientation import OrientationCanonicalizer, orientation_canonicalize
from ._patch_grid import (
    CentreAnchor,
    PatchGridAnchor,
    StridedRotoTranslationGroup,
    centre_anchor,
    num_patch_grid_scores,
    patch_grid_anchor,
    patch_grid_phase,
    patch_grid_scores,
    patch_rings,
)
from ._polyphase import (
    AdaptivePolyphaseDownsample,
    AdaptivePolyphaseUpsample,
    PolyphaseAnchor,
    PolyphaseUnanchor,
    gather_tokens,
    polyphase_anchor,
    polyphase_norms,
    polyphase_phase,
    polyphase_unanchor,
    shifted_token_index,
)
from ._precision import SCORE_DTYPE, score_dtype
from ._record import (
    NEAR_TIE_ULPS,
    TIE_ULPS,
    CanonicalizationEvent,
    CanonicalizationRecorder,
    near_ties_between,
    precision_in_use,
    record_canonicalizations,
    report_scores,
)
from ._types import Canonicalized

__all__ = [
    "NEAR_TIE_ULPS",
    "SCORE_DTYPE",
    "TIE_ULPS",
    "AdaptivePolyphaseDownsample",
    "AdaptivePolyphaseUpsample",
    "ArgmaxCanonicalizer",
    "CanonicalizationEvent",
    "CanonicalizationRecorder",
    "Canonicalized",
    "CentreAnchor",
    "CentreOfMassAnchor",
    "OrientationCanonicalizer",
    "PatchGridAnchor",
    "PolyphaseAnchor",
    "PolyphaseUnanchor",
    "StridedRotoTranslationGroup",
    "argmax_with_margin",
    "centre_anchor",
    "centre_of_mass_anchor",
    "centre_of_mass_scores",
    "gather_tokens",
    "near_ties_between",
    "num_patch_grid_scores",
    "orientation_canonicalize",
    "patch_grid_anchor",
    "patch_grid_phase",
    "patch_grid_scores",
    "patch_rings",
    "polyphase_anchor",
    "polyphase_norms",
    "polyphase_phase",
    "polyphase_unanchor",
    "precision_in_use",
    "record_canonicalizations",
    "report_scores",
    "score_dtype",
    "shifted_token_index",
]
