"""The result type every canonicalizer returns."""

from __future__ import annotations

from typing import NamedTuple

import torch

__all__ = ["Canonicalized"]


class Canonicalized(NamedTuple):
    """What a canonicalizer returns.

    Attributes
    ----------
    output
        The canonicalized tensor (same layout as the input).
    frame
        The chosen group element per sample (the *frame*): a long tensor, ``(B,)``
        element indices or ``(B, 2)`` offsets for translations; for
        [`OrientationCanonicalizer`][groupattn.canonical.OrientationCanonicalizer] a float
        ``(B,)`` angle in radians.
    margin
        ``(B,)`` difference between the best and second-best scores; 0 marks a tie,
        resolved deterministically (the lowest index wins).
    """

    output: torch.Tensor
    frame: torch.Tensor
    margin: torch.Tensor
