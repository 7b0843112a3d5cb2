"""Circular blurs computed exactly: integer images times integer circulant matrices.

A canonicalizer's scores must move with the image *bit for bit*: a shifted (turned,
reflected) input has to give the shifted (turned, reflected) scores, with no rounding
that depends on where a pixel sits. A blur written as a sum of rolled copies achieves
that by adding the same terms in the same order at every pixel, at the price of one pass
over the image per tap. A matrix product is far faster but adds its terms in an order
tied to absolute positions — unless every sum is exact. So:

1. each sample is quantized to integers, ``q = round(x / m · L)`` with ``m`` the sample's
   largest ``|x|`` and ``L`` a power of two (an elementwise map with a per-sample
   constant: it commutes with every permutation of the pixels, exactly);
2. the blur is ``K_y q K_xᵀ`` with integer circulant matrices ``K`` whose weights add up
   to about ``2**13``, and ``L`` is chosen so that every partial sum stays below
   ``2**52`` (float64; ``2**23`` in float32): each product and sum is exact whatever
   order the matrix product uses, so the result *is* the mathematical blur, which
   commutes with every circular shift (and, for symmetric weights on a square torus,
   with every turn and reflection).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

__all__ = [
    "blur_exactly",
    "circulant_matrix",
    "gaussian_weight",
    "integer_circulant_row",
    "quantize_per_sample",
    "significand_bits",
]


def significand_bits(dtype: torch.dtype) -> int:
    """The significand of a score dtype in bits (53 for float64, 24 for float32)."""
    return {torch.float64: 53, torch.float32: 24}[dtype]


def gaussian_weight(offset: int, sigma: float) -> float:
    """``exp(−(offset/σ)² / 2)`` for any finite ``σ > 0``: 1 at offset 0, and 0 beyond ``40σ``
    (where it would underflow anyway; the square would overflow for a tiny ``σ``)."""
    t = abs(offset) / sigma
    return 0.0 if t > 40.0 else math.exp(-0.5 * t * t)


def integer_circulant_row(
    taps: Sequence[tuple[int, float]], size: int, budget_bits: int
) -> list[int]:
    """Integer weights ``c_j`` (``j = 0..size−1``) of the circular filter ``Σ_k w_k · roll(x, k)``.

    The taps are folded onto the cycle (``k mod size``; a wide filter wraps more than
    once), scaled so that the weights add up to about ``2**budget_bits`` and rounded. For
    symmetric taps (``w_k = w_{−k}``) the result is symmetric exactly: ``c_j = c_{size−j}``
    (the half ``j ≤ size / 2`` is rounded and mirrored).

    Parameters
    ----------
    taps
        ``(offset, weight)`` pairs, weights ``≥ 0`` and not all 0.
    size
        The cycle's length ``≥ 1``.
    budget_bits
        About ``log2`` of the weights' total.

    Returns
    -------
    list of int
        ``size`` non-negative integers; the filter is ``out[i] = Σ_j c_{(i−j) mod size} x[j]``.
    """
    folded = [0.0] * size
    for k, w in taps:
        folded[k % size] += w
    scale = 2.0**budget_bits / sum(folded)
    symmetric = sorted(taps) == sorted((-k, w) for k, w in taps)
    if symmetric:
        half = [round(folded[j] * scale) for j in range(size // 2 + 1)]
        return [half[min(j, size - j)] for j in range(size)]
    return [round(v * scale) for v in folded]


def circulant_matrix(row: Sequence[int]) -> torch.Tensor:
    """``K[i, j] = row[(i − j) mod n]`` as float64 ``(n, n)`` on the CPU."""
    n = len(row)
    index = (torch.arange(n)[:, None] - torch.arange(n)) % n
    return torch.tensor(list(row), dtype=torch.float64)[index]


def quantize_per_sample(
    x: torch.Tensor, levels: float, dtype: torch.dtype | None = None
) -> torch.Tensor:
    """``round(x / max|x| · levels)`` per sample (the largest magnitude becomes ``±levels``).

    A sample that is all zeros stays zeros; a sample with a NaN or infinite entry keeps
    its non-finite entries (whatever is computed from it is non-finite), and the other
    samples are not affected.

    Parameters
    ----------
    x
        ``(B, ...)`` floating point.
    levels
        A power of two.
    dtype
        The floating dtype of the result and of the arithmetic (default: the dtype of
        ``x``). A wider one than ``x``'s gives the same numbers as quantizing ``x`` cast up
        to it (the cast is exact), without a copy of ``x`` in that dtype.

    Returns
    -------
    torch.Tensor
        ``(B, ...)`` integers in ``dtype``.
    """
    dims = tuple(range(1, x.dim()))
    # max |x| per sample (NaN propagates); abs().amax is several times faster than
    # linalg.vector_norm(ord=inf) or aminmax on the CPU and gives the same float (in x's
    # dtype: the maximum of a cast-up tensor is the cast-up maximum)
    scale = x.abs().amax(dim=dims, keepdim=True).to(dtype or x.dtype)
    # 0 < scale < inf is False for NaN too: such a sample is divided by 1
    usable = torch.logical_and(scale > 0, scale < math.inf)
    # the division promotes x to the divisor's dtype exactly; dividing by the scale first
    # and then multiplying by levels (not dividing by scale / levels, which underflows for
    # a subnormal scale) keeps every finite sample's quotient within [−1, 1]
    q = torch.div(x, torch.where(usable, scale, 1.0))
    return q.mul_(levels).round_()  # in place: one temporary


def blur_exactly(
    x: torch.Tensor,
    left: torch.Tensor,
    right: torch.Tensor,
    levels: float,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """``left · q · right`` with ``q = quantize_per_sample(x, levels)``: exact integer arithmetic.

    Parameters
    ----------
    x
        ``(B, C, H, W)``, floating point (float64, or float32 on a device without it, or
        any narrower float with a wider ``dtype``).
    left, right
        Integer matrices ``(H, H)`` and ``(W, W)`` (float64, any device; moved to ``x``'s),
        sized with ``levels`` so that every partial sum stays below ``2**(significand − 1)``.
    levels
        The quantization levels (a power of two).
    dtype
        The dtype of the arithmetic and the result (default: the dtype of ``x``; a wider
        one casts ``x`` up exactly, see ``quantize_per_sample``).

    Returns
    -------
    torch.Tensor
        ``(B, C, H, W)``: integers in ``dtype``.
    """
    dtype = x.dtype if dtype is None else dtype
    left = left.to(device=x.device, dtype=dtype)
    right = right.to(device=x.device, dtype=dtype)
    return torch.matmul(torch.matmul(left, quantize_per_sample(x, levels, dtype)), right)
