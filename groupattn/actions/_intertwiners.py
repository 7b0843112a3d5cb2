"""Intertwiners: a basis of the equivariant linear maps between two representations."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import NamedTuple

import torch

from ..groups import Group, GroupError
from ..groups._base import _describe
from ._representations import Representation

__all__ = [
    "INTERTWINER_BUDGET",
    "INTERTWINER_TOLERANCE",
    "IntertwinerCacheInfo",
    "clear_intertwiner_cache",
    "intertwiner_basis",
    "intertwiner_cache_info",
]

#: Relative tolerance of the null-space solve: an eigenvalue ``λ`` of the constraint
#: Gram matrix ``Σ_g C_gᵀ C_g`` counts as zero when ``λ ≤ tol · max(1, λ_max)``
#: (``λ`` is a squared singular value of the stacked constraints ``C``, so singular
#: values below about ``√tol · max(1, σ_max)`` ≈ ``3e-5·max(1, σ_max)`` are treated as zero).
INTERTWINER_TOLERANCE = 1e-9
"""Relative tolerance of the null-space solve (eigenvalues ≤ tol · max(1, λ_max) count as zero)."""

#: The largest ``dim_out · dim_in`` solved for (the Gram matrix is that size squared);
#: larger problems are refused with ``GroupError``.
INTERTWINER_BUDGET = 4096
"""The largest ``dim_out · dim_in`` solved for; larger problems raise ``GroupError``."""

_CACHE_SIZE = 256
_cache: OrderedDict[Hashable, torch.Tensor] = OrderedDict()
_stats = {"hits": 0, "misses": 0}


class IntertwinerCacheInfo(NamedTuple):
    """Counters of the [`intertwiner_basis`][groupattn.actions.intertwiner_basis] cache."""

    hits: int
    misses: int
    size: int


def intertwiner_cache_info() -> IntertwinerCacheInfo:
    """Hits, misses and current size of the [`intertwiner_basis`][groupattn.actions.intertwiner_basis] cache."""
    return IntertwinerCacheInfo(_stats["hits"], _stats["misses"], len(_cache))


def clear_intertwiner_cache() -> None:
    """Empty the [`intertwiner_basis`][groupattn.actions.intertwiner_basis] cache and reset its counters."""
    _cache.clear()
    _stats["hits"] = _stats["misses"] = 0


def _generator_matrices(rep: Representation, group: Group) -> list[torch.Tensor]:
    """``ρ(s)`` in float64 for every generator ``s`` of ``group``, through ``rep.apply``.

    Reading the matrix off ``rep.apply`` (on the identity matrix, along axis 0) uses
    exactly the action the layers apply, including restriction from an acting group
    to the representation's group and trivial representations without a group.
    """
    eye = torch.eye(rep.dim, dtype=torch.float64)
    out = []
    for s in group.generators():
        m = rep.apply(group, s, eye, 0)
        if m.shape != (rep.dim, rep.dim):
            raise GroupError(
                f"intertwiner_basis: expected a {rep.dim}x{rep.dim} matrix from {rep!r} for {s!r}, "
                f"got shape {tuple(m.shape)}"
            )
        out.append(m.to(torch.float64).contiguous())
    return out


def _permutation_of(m: torch.Tensor) -> torch.Tensor | None:
    """``p`` with ``m[p[k], k] = 1`` if ``m`` is a permutation matrix, else ``None``."""
    if not bool(((m == 0) | (m == 1)).all()):
        return None
    if not (bool((m.sum(0) == 1).all()) and bool((m.sum(1) == 1).all())):
        return None
    return m.argmax(0)


def _orbital_basis(
    perms_in: list[torch.Tensor], perms_out: list[torch.Tensor], d_in: int, d_out: int
) -> torch.Tensor:
    """Normalised indicator matrices of the orbits of ``G`` on (output, input) index pairs."""
    from ._gset import connected_labels

    pair_perms = [
        (po[:, None] * d_in + pi[None, :]).reshape(-1) for pi, po in zip(perms_in, perms_out)
    ]
    labels = connected_labels(d_out * d_in, pair_perms).reshape(d_out, d_in)
    k = int(labels.max()) + 1 if labels.numel() else 0
    indicators = (labels[None] == torch.arange(k)[:, None, None]).to(torch.float64)
    return indicators / indicators.sum(dim=(1, 2), keepdim=True).sqrt()


def _null_space_basis(
    mats_in: list[torch.Tensor], mats_out: list[torch.Tensor], d_in: int, d_out: int, tol: float
) -> torch.Tensor:
    """Orthonormal basis of ``{W : ρ_out(s) W = W ρ_in(s) for every generator s}``."""
    d = d_in * d_out
    eye_in = torch.eye(d_in, dtype=torch.float64)
    eye_out = torch.eye(d_out, dtype=torch.float64)
    gram = torch.zeros(d, d, dtype=torch.float64)
    for a_in, a_out in zip(mats_in, mats_out):
        # row-major vec: vec(A W) = (A ⊗ I) vec(W), vec(W B) = (I ⊗ Bᵀ) vec(W)
        c = torch.kron(a_out, eye_in) - torch.kron(eye_out, a_in.T.contiguous())
        gram += c.T @ c
    evals, evecs = torch.linalg.eigh(gram)
    scale = max(1.0, float(evals.max())) if evals.numel() else 1.0
    null = evecs[:, evals <= tol * scale]  # (d, k), orthonormal columns
    return null.T.reshape(null.shape[1], d_out, d_in).contiguous()


def intertwiner_basis(
    rep_in: Representation,
    rep_out: Representation,
    group: Group,
    tol: float = INTERTWINER_TOLERANCE,
) -> torch.Tensor:
    """A basis of the intertwiners from ``rep_in`` to ``rep_out`` under ``group``.

    ``W`` (shape ``(dim_out, dim_in)``) is an intertwiner when
    ``ρ_out(g) W = W ρ_in(g)`` for every ``g`` in ``group``; then ``x ↦ W x`` commutes
    with the group's action on channels. It suffices to impose this for the
    generators: the constraints ``(ρ_out(s) ⊗ I − I ⊗ ρ_in(s)ᵀ) vec(W) = 0`` for every
    generator ``s`` are solved once as the null space of their Gram matrix
    ``Σ_s C_sᵀ C_s`` with ``torch.linalg.eigh`` in float64 (eigenvalues at most
    ``tol · max(1, λ_max)`` count as zero; see [`INTERTWINER_TOLERANCE`][groupattn.actions.INTERTWINER_TOLERANCE]). When
    every generator acts by permutation matrices on both sides (trivial, regular,
    permutation representations and their direct sums), the basis is instead the
    normalised indicator matrices of the orbits of the group on (output, input) index
    pairs — exact, sparse, constant on orbits. Either way the dimension equals the
    character inner product ``(1/|G|) Σ_g χ_in(g) χ_out(g)`` (real representations).

    The matrices are read off ``rep.apply`` (so an acting group that restricts to the
    representation's group, e.g. p4 acting on a C4 representation, works, and a
    trivial representation needs no group). Results are cached by
    ``(rep_in, rep_out, group, tol)`` (LRU, 256 entries; see
    [`intertwiner_cache_info`][groupattn.actions.intertwiner_cache_info], [`clear_intertwiner_cache`][groupattn.actions.clear_intertwiner_cache]), so layers that
    repeat a pair of representations solve once; a fresh copy is returned each time.

    Parameters
    ----------
    rep_in, rep_out
        [`Representation`][groupattn.actions.Representation] objects of ``group`` (or of a group
        ``group`` restricts to).
    group
        The group imposing the constraints (only its generators are used).
    tol
        Relative eigenvalue tolerance of the null-space solve.

    Returns
    -------
    torch.Tensor
        ``(k, dim_out, dim_in)``, float64, orthonormal under the Frobenius inner
        product ``⟨A, B⟩ = Σ A ⊙ B``; ``k = 0`` when only the zero map commutes.

    Raises
    ------
    GroupError
        If an argument has the wrong type, a representation's matrix has the wrong
        shape, or ``dim_out · dim_in`` exceeds [`INTERTWINER_BUDGET`][groupattn.actions.INTERTWINER_BUDGET].

    Examples
    --------
    >>> from groupattn.groups import CyclicGroup
    >>> from groupattn.actions import RegularRepresentation, TrivialRepresentation
    >>> C4 = CyclicGroup(4)
    >>> intertwiner_basis(RegularRepresentation(C4), TrivialRepresentation(1), C4).shape
    torch.Size([1, 1, 4])
    """
    for what, rep in (("rep_in", rep_in), ("rep_out", rep_out)):
        if not isinstance(rep, Representation):
            raise GroupError(
                f"intertwiner_basis: expected {what} as a Representation, got {_describe(rep)}"
            )
    if not isinstance(group, Group):
        raise GroupError(f"intertwiner_basis: expected a Group, got {_describe(group)}")
    if isinstance(tol, bool) or not isinstance(tol, int | float) or not 0 <= tol < 1:
        raise GroupError(f"intertwiner_basis: expected a tolerance in [0, 1), got {_describe(tol)}")
    d_in, d_out = rep_in.dim, rep_out.dim
    if d_in * d_out > INTERTWINER_BUDGET:
        raise GroupError(
            f"intertwiner_basis: expected dim_out·dim_in at most INTERTWINER_BUDGET={INTERTWINER_BUDGET}, "
            f"got {d_out}·{d_in} = {d_out * d_in} ({rep_out!r} from {rep_in!r})"
        )
    key: Hashable | None = (rep_in, rep_out, group, float(tol))
    try:
        cached = _cache.get(key)  # type: ignore[arg-type]
    except TypeError:  # an unhashable user representation: no caching
        key, cached = None, None
    if cached is not None:
        _stats["hits"] += 1
        _cache.move_to_end(key)
        return cached.clone()
    _stats["misses"] += 1
    mats_in = _generator_matrices(rep_in, group)
    mats_out = _generator_matrices(rep_out, group)
    perms_in = [_permutation_of(m) for m in mats_in]
    perms_out = [_permutation_of(m) for m in mats_out]
    if all(p is not None for p in perms_in + perms_out):
        basis = _orbital_basis(perms_in, perms_out, d_in, d_out)  # type: ignore[arg-type]
    else:
        basis = _null_space_basis(mats_in, mats_out, d_in, d_out, float(tol))
    if key is not None:
        _cache[key] = basis
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return basis.clone()
