"""Patch-grid anchoring: pick the phase of a ``p × p`` patch grid invariantly under p4 / p4m.

A ``p × p`` patch grid on an ``S × S`` torus (``p`` dividing ``S``) has ``p²`` phases:
the grid with phase ``(a, b)`` has its patches' top-left corners at ``(a + kp, b + lp)``.
A translation by ``t`` maps the grid of phase ``φ`` onto the grid of phase ``φ + t mod p``,
and a quarter turn (or a reflection) about the image centre maps it onto the grid of phase
``h·φ mod p`` — the same linear map that turns a translation vector. The *set* of
patches of a grid therefore moves with the image under every element of p4 / p4m, and
so does every score computed from that set alone. Anchoring picks the best-scoring phase
and rolls the image so that this grid starts at the origin: an input moved by ``(t, h)``
gives an output moved by ``(t', h)`` with ``t'`` a multiple of ``p`` — the group
[`StridedRotoTranslationGroup`][groupattn.canonical.StridedRotoTranslationGroup] of the
canonicalizer's contract, to which a ViT over ``p × p`` patches is exactly invariant.

Scores
------
Per patch and channel: its *ring sums* ``r_k`` — the sums over the orbits of D4 about the
patch centre ([`patch_rings`][groupattn.canonical.patch_rings]: for ``p = 4`` the 4 central
pixels, the 8 edge pixels and the 4 corners), each added up in an order every turn and
reflection of the patch keeps (pairs of opposite pixels first; floating-point addition is
commutative), so a turned or reflected patch gives the same numbers bit for bit — and its
pixel sum
``v = Σ_k r_k`` (rings added in a fixed order). Per phase, a cascade of statistics of its
``(S/p)²`` patches, each again a sum of sorted values, so a moved input permutes the phase
scores *exactly*, in every dtype, without any rounding of summation order:

1. ``Σ_patches (Σ_c v_c²)²`` (the L4-style energy of the patch sums; the primary score),
2. ``Σ_patches Σ_c v_c²``,
3. ``Σ_{neighbouring patches i, j} Σ_c v_c(i) v_c(j)`` (right and lower neighbours on
   the coarse torus: a set of unordered pairs every element of D4 maps onto itself),
4. for each ring ``k``, from the centre outwards: ``Σ_patches (Σ_c r_{k,c}²)²`` (where in
   its patches the image's mass lies: this separates the phases of a single bright pixel),
5. ``max_patches Σ_c v_c²``.

Ties
----
The phases are compared lexicographically by the cascade: a later score decides only
among the phases tied on all earlier ones. The set of phases tied on every score moves
with the input exactly (the scores are permuted exactly), so the rule is consistent
with every rotation, reflection and translation **except** in a *full tie* (two phases
equal on every score), where the lowest phase index wins. A full tie is harmless when the
images anchored at the tied phases differ by an element of the strided group — a model
invariant to that group then gives the same output for either choice. That is the case
for the full ties of a constant image (all phases give the same image), of an image equal
to its own quarter turn (``φ`` ties with ``h·φ``), and of a single bright pixel (the ring
scores leave the four phases that put it on a patch's central pixels, which a quarter turn
about the image centre and a shift by a multiple of ``p`` relate). Only a full tie
between phases whose anchored images no element of the strided group relates can break
invariance. Every full tie is reported as a tie (margin 0) to
[`record_canonicalizations`][groupattn.canonical.record_canonicalizations], like every
tie of [`polyphase_anchor`][groupattn.canonical.polyphase_anchor], harmless or not (the
canonicalizer cannot tell them apart cheaply); the checker's numerical verification then
sets those samples aside.

Centre anchoring
----------------
With ``p = S`` the phases are all ``S²`` translations of the torus, and anchoring fixes the
whole translation: what is left of p4 / p4m is ``StridedRotoTranslationGroup(H, S,
stride=S)``, the turns and reflections about the image centre alone, to which a body with
rotation-invariant *absolute* positions is exactly invariant.
[`CentreAnchor`][groupattn.canonical.CentreAnchor] is that anchor with a cheap cascade:
the ring scores of a Gaussian blur of the image restricted to the central
``window × window`` block of each phase's ``S × S`` patch, from the centre outwards; the
first (the blurred mass on the 4 pixels about the centre) rolls the blurred image's
maximum to the image centre. The blur is computed on the image quantized to integers,
with integer weights, every number below ``2**53``: each sum is exact whatever order it is
added in, so the blur moves with the image under every element of p4m bit for bit (see
``_integer_blur``), and the ring scores are again permuted exactly.

Precision
---------
Scores in float64 ([`score_dtype`][groupattn.canonical.score_dtype]) with autocast
disabled; the roll runs in the input's dtype (the output is a permutation of the input,
bit for bit). ``CentreAnchor`` scores images on a device without float64 on the CPU (its
exact blur needs float64's bits).
"""

from __future__ import annotations

import math
import numbers
import random
from collections.abc import Callable, Hashable
from typing import Any

import torch
from torch import nn

from .._errors import ConfigurationError, ShapeError
from .._sealed import sealed
from ..actions import GridField
from ..contracts import Contract
from ..groups import (
    Group,
    GroupElement,
    GroupError,
    PointGroup,
    RotoTranslationGroup,
    TorusTranslations,
)
from ..groups._base import Group as _Group
from ..groups._products import _FiniteRotoTranslationGroup
from ..positional._constants import constant_cache
from ._argmax import argmax_with_margin
from ._exact_blur import (
    blur_exactly,
    circulant_matrix,
    gaussian_weight,
    integer_circulant_row,
    significand_bits,
)
from ._polyphase import _check_stride, _gather_roll
from ._precision import (
    check_real_input,
    score_dtype,
    score_source,
    scoring,
    to_score_dtype,
)
from ._types import Canonicalized

#: The largest ``window`` of ``CentreAnchor`` (memory grows with its number of rings, about
#: ``window² / 8``, times the image's pixels).
_MAX_CENTRE_WINDOW = 32

__all__ = [
    "CentreAnchor",
    "PatchGridAnchor",
    "StridedRotoTranslationGroup",
    "centre_anchor",
    "num_patch_grid_scores",
    "patch_grid_anchor",
    "patch_grid_phase",
    "patch_grid_scores",
    "patch_rings",
]


class StridedRotoTranslationGroup(_FiniteRotoTranslationGroup):
    """Roto-translations ``T_s ⋊ H`` of the ``n × n`` torus whose translations are multiples of ``s``.

    The subgroup of ``RotoTranslationGroup(H, n)`` (p4 for ``H = C4``, p4m for ``D4``)
    made of the elements ``p ↦ h·p + t`` with both offsets of ``t`` multiples of ``s``
    (``h`` turns or reflects about the image centre, as in p4). It is what
    [`PatchGridAnchor`][groupattn.canonical.PatchGridAnchor] leaves of p4 / p4m: a model over
    ``s × s`` patches with invariant positional information is invariant to it.

    Elements are pairs ``((dy, dx), h)`` in **pixels** (like ``RotoTranslationGroup``;
    ``dy`` and ``dx`` multiples of ``s``, reduced modulo ``n``), so images, lifted fields
    and tokens move by it exactly as by the same element of p4.
    Generators: ``((s, 0), e)``, ``((0, s), e)`` and the point group's.

    Parameters
    ----------
    point_group
        ``H``, acting exactly on the grid (C1, C2, C4, D1, D2, D4).
    size
        The torus side ``n`` in pixels.
    stride
        ``s ≥ 1``, dividing ``n``.

    Raises
    ------
    GroupError
        For a stride that does not divide the size, or a point group that does not act
        exactly on the grid.
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> StridedRotoTranslationGroup:
        # always this class (``RotoTranslationGroup.__new__`` picks its own finite
        # subclass); no required arguments, so that copy and pickle can rebuild it
        return _Group.__new__(cls)

    def __init__(self, point_group: PointGroup, size: int, stride: int = 1) -> None:
        stride = _check_stride("StridedRotoTranslationGroup", stride)
        if isinstance(size, bool) or not isinstance(size, int) or size < 1 or size % stride:
            raise GroupError(
                f"StridedRotoTranslationGroup: expected a size divisible by the stride {stride}, got {size!r}"
            )
        RotoTranslationGroup.__init__(self, point_group, size)
        self.stride = stride
        if stride > 1:
            self.name = f"{self.name}*{stride}"

    def key(self) -> Hashable:
        return (self.point_group, self.size, self.stride)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return (StridedRotoTranslationGroup, (self.point_group, self.size, self.stride))

    def _validate(self, value: Any) -> tuple[Any, Any]:
        t, h = super()._validate(value)
        if t[0] % self.stride or t[1] % self.stride:
            raise GroupError(
                f"{self.name}: expected a translation by multiples of {self.stride}, got {t}"
            )
        return (t, h)

    def _enumerate(self) -> list[Any]:
        n, s = self.size, self.stride
        assert n is not None
        shifts = [(i, j) for i in range(0, n, s) for j in range(0, n, s)]
        return [(t, h) for h in self.point_group._values() for t in shifts]

    def _order_without_enumeration(self) -> int:
        assert self.size is not None
        side = self.size // self.stride
        return side * side * self.point_group.order()

    def _sample(self, rng: random.Random) -> Any:
        assert self.size is not None
        side = self.size // self.stride
        k = rng.randrange(side * side)
        t = ((k // side) * self.stride, (k % side) * self.stride)
        return (t, self.point_group._sample(rng))

    def generators(self) -> list[GroupElement]:
        e = self.point_group._identity()
        s = self.stride % (self.size or 1)
        gens = [GroupElement(self, ((s, 0), e)), GroupElement(self, ((0, s), e))]
        gens += [GroupElement(self, ((0, 0), h.value)) for h in self.point_group.generators()]
        return gens

    def word(self, g: Any) -> list[int]:
        """``dy/s`` steps of the first generator, ``dx/s`` of the second, then the point group's word."""
        (dy, dx), h = self.element(g).value
        s = self.stride
        return [0] * (dy // s) + [1] * (dx // s) + [2 + k for k in self.point_group.word(h)]


def _window_view(x: torch.Tensor, p: int) -> torch.Tensor:
    """``(B, C, S, S, p, p)`` view: the circular ``p × p`` window whose top-left corner is each pixel."""
    if p > 1:
        x = torch.cat([x, x[:, :, : p - 1]], dim=2)
        x = torch.cat([x, x[:, :, :, : p - 1]], dim=3)
    return x.unfold(2, p, 1).unfold(3, p, 1)


def _ring_orbits(p: int) -> list[list[tuple[tuple[int, int], ...]]]:
    """Per ring of [`patch_rings`][groupattn.canonical.patch_rings]: its C4 orbits, each as
    ``(o, r²o, r·o, r³o)`` (``r``: a quarter turn about the patch centre), or ``(o,)`` for
    the centre pixel of an odd patch."""
    out: list[list[tuple[tuple[int, int], ...]]] = []
    for ring in patch_rings(p):
        seen: set[tuple[int, int]] = set()
        orbits: list[tuple[tuple[int, int], ...]] = []
        for flat in ring:
            o = (flat // p, flat % p)
            if o in seen:
                continue
            turns = [o]
            for _ in range(3):
                u, v = turns[-1]
                turns.append((v, p - 1 - u))
            seen.update(turns)
            orbits.append((o,) if turns[1] == o else (turns[0], turns[2], turns[1], turns[3]))
        out.append(orbits)
    return out


def _ring_sums(w: torch.Tensor, p: int) -> list[torch.Tensor]:
    """Ring sums ``(B, C, S, S)`` from the window view, each the same float for a turned or reflected patch.

    A C4 orbit ``(o, r²o, r·o, r³o)`` is summed as ``(x_o + x_{r²o}) + (x_{ro} + x_{r³o})``:
    a quarter turn swaps the two pairs, a half turn swaps within both, a reflection maps
    the pairs onto pairs, and floating-point addition is commutative, so the sum is the
    same float. A ring made of two C4 orbits (the mirror images of each other) adds their
    sums, again commutatively.
    """
    sums = []
    for orbits in _ring_orbits(p):
        parts = []
        for orbit in orbits:
            if len(orbit) == 1:
                parts.append(w[..., orbit[0][0], orbit[0][1]])
                continue
            a, c, b, d = (w[..., u, v] for u, v in orbit)
            parts.append((a + c) + (b + d))
        sums.append(parts[0] if len(parts) == 1 else parts[0] + parts[1])
    return sums


def patch_rings(patch_size: int) -> tuple[tuple[int, ...], ...]:
    """The orbits of D4 (turns and reflections about the patch centre) on a patch's pixels.

    Parameters
    ----------
    patch_size
        ``p ≥ 1``.

    Returns
    -------
    tuple of tuple of int
        Flat offsets ``u·p + v`` of each orbit ("ring"), from the centre outwards (three
        rings for ``p = 4``: the 4 central pixels, the 8 edge pixels, the 4 corners).
    """
    p = _check_stride("patch_rings", patch_size)
    rings: dict[tuple[int, int], list[int]] = {}
    for u in range(p):
        for v in range(p):
            a, b = abs(2 * u - (p - 1)), abs(2 * v - (p - 1))
            rings.setdefault((min(a, b), max(a, b)), []).append(u * p + v)
    keys = sorted(rings, key=lambda k: (k[0] ** 2 + k[1] ** 2, k))
    return tuple(tuple(rings[k]) for k in keys)


def num_patch_grid_scores(patch_size: int) -> int:
    """Length of the cascade of [`patch_grid_scores`][groupattn.canonical.patch_grid_scores] for ``p``.

    Parameters
    ----------
    patch_size
        ``p ≥ 1``.

    Returns
    -------
    int
        ``4 +`` the number of [`patch_rings`][groupattn.canonical.patch_rings] (7 for ``p = 4``).
    """
    return 4 + len(patch_rings(patch_size))


def _sorted_sum(v: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Sum of ``v`` along ``dim`` in ascending order: the same float for any permutation."""
    return torch.sort(v, dim=dim).values.sum(dim=dim)


def _phase_major(q: torch.Tensor, p: int) -> torch.Tensor:
    """``(B, S, S) → (B, p², (S/p)²)``: row ``a·p + b`` lists the patches of phase ``(a, b)``."""
    b, s = q.shape[0], q.shape[1]
    m = s // p
    return q.reshape(b, m, p, m, p).permute(0, 2, 4, 1, 3).reshape(b, p * p, m * m)


def _scores(x: torch.Tensor, p: int) -> torch.Tensor:
    """[`patch_grid_scores`][groupattn.canonical.patch_grid_scores] after the checks, in the dtype of ``x``."""
    b, _, s, _ = x.shape
    m = s // p
    # ring sums (B, C, S, S); the patch sum adds them in ring order: every number below is
    # the same float for a turned or reflected patch
    rings = _ring_sums(_window_view(x, p), p)
    v = rings[0]
    for r in rings[1:]:
        v = v + r
    q = (v * v).sum(dim=1)  # channels in a fixed order
    # neighbour products of each phase's coarse grid: right and lower neighbours
    vp = v.reshape(b, v.shape[1], m, p, m, p).permute(0, 3, 5, 1, 2, 4)  # (B, p, p, C, m, m)
    right = (vp * torch.roll(vp, -1, dims=5)).sum(dim=3)
    down = (vp * torch.roll(vp, -1, dims=4)).sum(dim=3)
    pairs = torch.cat([right.reshape(b, p * p, m * m), down.reshape(b, p * p, m * m)], dim=2)
    qp = _phase_major(q, p)
    stats = [_sorted_sum(qp * qp), _sorted_sum(qp), _sorted_sum(pairs)]
    for r in rings:
        e = _phase_major((r * r).sum(dim=1), p)
        stats.append(_sorted_sum(e * e))
    stats.append(qp.amax(dim=2))
    return torch.stack(stats, dim=1)


def _check_input(module: str, x: torch.Tensor, p: int) -> None:
    check_real_input(x, module)
    GridField().check(x, module)
    height, width = int(x.shape[2]), int(x.shape[3])
    if height != width:
        raise GroupError(f"{module}: expected a square image, got {height}x{width}")
    if height % p:
        raise GroupError(
            f"{module}: expected an image side divisible by the patch size {p}, got {height}x{width}"
        )


def patch_grid_scores(x: torch.Tensor, patch_size: int) -> torch.Tensor:
    """The cascade of scores of every phase of the ``p × p`` patch grid.

    Parameters
    ----------
    x
        Images ``(B, C, S, S)``, ``S`` divisible by ``p``.
    patch_size
        ``p ≥ 1``.

    Returns
    -------
    torch.Tensor
        ``(B, n, p²)`` (``n = num_patch_grid_scores(p)``) in float64 (the score dtype), computed with
        autocast disabled; column ``a·p + b`` scores phase ``(a, b)`` (patches with
        top-left corners at ``(a + kp, b + lp)``), rows in cascade order (see the module
        docs). Moving ``x`` by any element of p4m permutes the columns exactly.
    """
    p = _check_stride("patch_grid_scores", patch_size)
    _check_input("patch_grid_scores", x, p)
    with scoring(x.device):
        return _scores(to_score_dtype(x), p)


def _lexicographic(scores: torch.Tensor) -> torch.Tensor:
    """The scores that decide each sample: ``(B, K)`` from a cascade ``(B, n, K)``.

    Per sample, the first score of the cascade that leaves a single best phase among the
    phases tied on all earlier ones (the last score when none does), restricted to those
    phases: the others are set just below the lowest of them. Its arg-max (lowest index
    on a tie) is the lexicographic choice, and its margin is the deciding score's margin.
    NaN in any score makes the row NaN. A single score (``n = 1``) is returned as a view
    of ``scores``, which its NaN rows are written into (unless it requires grad).
    """
    b, n, k = scores.shape
    if n == 1:  # a single score decides
        s = scores[:, 0]
        # the row's maximum is NaN exactly when the row has a NaN (amax propagates it): a
        # (B, 1) test, broadcast, and no (B, K) temporaries
        nan = s.amax(dim=1, keepdim=True).isnan()
        if s.requires_grad:
            return s.masked_fill(nan, float("nan"))
        # the callers pass a fresh cascade: fill it in place (no (B, K) temporary)
        return s.masked_fill_(nan, float("nan"))
    candidates = torch.ones(b, k, dtype=torch.bool, device=scores.device)
    decided = torch.zeros(b, 1, dtype=torch.bool, device=scores.device)
    minus_inf = torch.tensor(float("-inf"), dtype=scores.dtype, device=scores.device)
    plus_inf = torch.tensor(float("inf"), dtype=scores.dtype, device=scores.device)
    chosen = scores[:, 0]
    for i in range(n):
        s = scores[:, i]
        lowest = torch.where(candidates, s, plus_inf).amin(dim=1, keepdim=True)
        restricted = torch.where(candidates, s, torch.nextafter(lowest, minus_inf))
        chosen = torch.where(decided, chosen, restricted)
        best = torch.where(candidates, s, minus_inf).amax(dim=1, keepdim=True)
        candidates = candidates & (s == best)
        decided = decided | (candidates.sum(dim=1, keepdim=True) == 1)
    nan = scores.isnan().any(dim=2).any(dim=1, keepdim=True)
    return torch.where(nan, torch.full_like(chosen, float("nan")), chosen)


def patch_grid_phase(x: torch.Tensor, patch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The anchoring phase of each sample and its margin (see [`patch_grid_anchor`][groupattn.canonical.patch_grid_anchor]).

    Parameters
    ----------
    x
        Images ``(B, C, S, S)``.
    patch_size
        ``p``.

    Returns
    -------
    tuple of torch.Tensor
        ``frame`` long ``(B, 2)`` phase ``(a, b)``; ``margin`` ``(B,)`` float64, the
        margin of the deciding score of the cascade (0 on a full tie).
    """
    p = _check_stride("patch_grid_phase", patch_size)
    deciding = _lexicographic(patch_grid_scores(x, p))
    index, margin = argmax_with_margin(deciding, x.dtype)
    row = torch.div(index, p, rounding_mode="floor")
    return torch.stack([row, index - row * p], dim=1), margin


def patch_grid_anchor(x: torch.Tensor, patch_size: int) -> Canonicalized:
    """Roll each sample so that its best-scoring ``p × p`` patch grid starts at the origin.

    Contract: canonicalizing under p4 / p4m of the ``S × S`` torus (and their subgroups
    containing all translations, and under the point group alone) with output group
    ``StridedRotoTranslationGroup(H, S, stride=p)``: an input moved by ``(t, h)`` gives an
    output moved by ``(t', h)``, ``t'`` a multiple of ``p`` (see the module docs for ties).

    Parameters
    ----------
    x
        Images ``(B, C, S, S)``, ``S`` divisible by ``p``.
    patch_size
        ``p ≥ 1``.

    Returns
    -------
    Canonicalized
        ``output`` ``(B, C, S, S)`` in the dtype of ``x`` (``x`` rolled by ``(−a, −b)``);
        ``frame`` long ``(B, 2)`` the phase ``(a, b)``; ``margin`` ``(B,)`` float64, the
        deciding score's margin (0 on a full tie, where the lowest phase index
        ``a·p + b`` wins; ``+inf`` for ``p = 1``).
    """
    frame, margin = patch_grid_phase(x, patch_size)
    return Canonicalized(_gather_roll(x, frame[:, 0], frame[:, 1], None), frame, margin)


@sealed
class PatchGridAnchor(nn.Module):
    """Patch-grid anchoring as a module (see [`patch_grid_anchor`][groupattn.canonical.patch_grid_anchor]).

    Contract (images ``GridField → GridField``), on the ``S × S`` torus:

    * under ``RotoTranslationGroup(H, S)`` (p4, p4m, ``T ⋊ H`` for ``H ⊆ D4``):
      *canonicalizing* with output group ``StridedRotoTranslationGroup(H, S, stride=p)``;
    * under ``TorusTranslations(S, S)``: *canonicalizing* with output group
      ``TorusTranslations(S/p, S/p, stride=p)``;
    * under a point group ``H`` alone (turns and reflections about the centre):
      *canonicalizing* with output group ``StridedRotoTranslationGroup(H, S, stride=p)``
      (the phase moves, so the output is turned and shifted by a multiple of ``p``);
    * under ``StridedRotoTranslationGroup(H, S, stride)`` (a subgroup of the first case):
      *canonicalizing* with the same output group (a turn still moves the phase);
    * anything else (other sizes, strided translations, groups off the grid): *unknown*.

    Parameters
    ----------
    patch_size
        ``p ≥ 1``.
    image_size
        ``S``, used only to state the contract without an input.
    """

    def __init__(self, patch_size: int, image_size: int | None = None) -> None:
        super().__init__()
        self.patch_size = _check_stride("PatchGridAnchor", patch_size)
        if image_size is not None and image_size % self.patch_size:
            raise GroupError(
                f"PatchGridAnchor: expected an image size divisible by the patch size "
                f"{self.patch_size}, got {image_size}"
            )
        self.image_size = image_size

    def forward(self, x: torch.Tensor) -> Canonicalized:
        """Anchor images ``(B, C, S, S)``; see [`patch_grid_anchor`][groupattn.canonical.patch_grid_anchor]."""
        _check_input("PatchGridAnchor", x, self.patch_size)
        return patch_grid_anchor(x, self.patch_size)

    def _size(self, group: Group) -> int | None:
        if self.image_size is not None:
            return self.image_size
        if isinstance(group, RotoTranslationGroup):
            return group.size
        if isinstance(group, TorusTranslations) and group.height == group.width:
            return group.height * group.stride
        return None

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """See the class docstring."""
        field = GridField()
        name = type(self).__name__
        size, p = self._size(group), self.patch_size
        if size is None or size % p:
            return Contract.unknown(
                f"{name}: promises nothing for {group.name}; expected p4, p4m or translations "
                f"of a square torus whose side is a multiple of {p}",
                field,
            )
        return torus_anchor_contract(
            name,
            group,
            size,
            TorusTranslations(size // p, size // p, stride=p),
            lambda point: StridedRotoTranslationGroup(point, size, p),
        )

    def extra_repr(self) -> str:
        return f"patch_size={self.patch_size}" + (
            f", image_size={self.image_size}" if self.image_size else ""
        )


def torus_anchor_contract(
    name: str,
    group: Group,
    size: int,
    translations_output: Group,
    point_output: Callable[[PointGroup], Group],
) -> Contract:
    """The contract of an anchor of images on the ``size × size`` torus (``GridField`` in
    and out): *canonicalizing* under ``TorusTranslations(size, size)`` with output group
    ``translations_output``, and under p4 / p4m of that torus (or its point group alone,
    ``H ⊆ D4``) with output group ``point_output(H)``; *unknown* for anything else."""
    field = GridField()
    if isinstance(group, TorusTranslations):
        if group.stride != 1 or (group.height, group.width) != (size, size):
            return Contract.unknown(
                f"{name}: promises nothing for {group.name}; expected T({size}x{size})", field
            )
        return Contract.canonicalizing(field, field, translations_output)
    point: PointGroup | None = None
    if isinstance(group, PointGroup):
        point = group
    elif isinstance(group, RotoTranslationGroup) and group.size == size:
        point = group.point_group
    if point is None or not point.acts_exactly_on_grid:
        return Contract.unknown(
            f"{name}: promises nothing for {group.name}; expected p4, p4m (T ⋊ H, H ⊆ D4) "
            f"or translations of the {size}x{size} torus",
            field,
        )
    return Contract.canonicalizing(field, field, point_output(point))


# ---------------------------------------------------------------- centre anchoring


@constant_cache(maxsize=32)
def _blur_matrices(
    size: int, sigma: float, offset: int, box: int, mantissa: int
) -> tuple[torch.Tensor, torch.Tensor, float]:
    """``(left, right, levels)`` of ``_integer_blur``: integer matrices ``(S, S)`` (float64, CPU)."""
    # ceil(3σ) taps each side, at most 64 turns of the torus (wider is flat to 13 bits);
    # exp(−(d/σ)²/2) stays finite for any finite σ > 0 (0 beyond 40σ, 1 at d = 0)
    r = max(1, math.ceil(min(3 * sigma, 64 * size)))
    taps = [(d, gaussian_weight(d, sigma)) for d in range(-r, r + 1)]
    # 13 bits of weights in float64 (5 in float32); symmetric, so K is its own transpose
    # and the same matrix for a turned or reflected image
    row = integer_circulant_row(taps, size, (mantissa - 1) // 4)
    kernel = circulant_matrix(row)
    left = torch.roll(kernel, -offset, dims=0)  # left[i] = K[i + offset]
    right = torch.roll(kernel, -offset, dims=1)
    for u in range(1, box):  # sums over a box × box block: rows i..i+box−1, columns alike
        left = left + torch.roll(kernel, -offset - u, dims=0)
        right = right + torch.roll(kernel, -offset - u, dims=1)
    total_bits = (sum(row) * box).bit_length()
    # |q| ≤ levels and every partial sum ≤ levels · total² < 2**(mantissa − 1)
    return left, right, 2.0 ** (mantissa - 1 - 2 * total_bits)


def _integer_blur(
    x: torch.Tensor,
    sigma: float,
    offset: int = 0,
    box: int = 1,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """A circular Gaussian blur that moves with the image under every element of p4m, bit for bit.

    Every number is an integer small enough for the floating dtype of ``x`` (float64: below
    ``2**52``), so every sum is exact whatever order a matrix product adds its terms in:

    1. each sample is quantized, ``q = round(x / m · 2**b)`` with ``m`` its largest
       ``|x|`` (an elementwise map with a per-sample constant, so ``q(g·x) = g·q(x)``
       exactly for every permutation ``g`` of the pixels); ``b`` is 24 bits in float64;
    2. ``blur(q) = K q K`` with ``K`` the symmetric circulant matrix of ``integer_circulant_row``
       (integer weights adding up to about ``2**13`` in float64): computed exactly, so it
       is the mathematical blur, which commutes with every circular shift, turn and
       reflection of a square torus (``K`` is symmetric and circulant).

    The result is rolled by ``(−offset, −offset)`` and, for ``box > 1``, summed over the
    ``box × box`` block whose top-left corner is each pixel (both folded into the
    matrices, still exact).

    Parameters
    ----------
    x
        Images ``(B, C, S, S)`` in float64 (or float32 on a device without float64: fewer
        quantization levels).
    sigma
        The Gaussian's standard deviation in pixels, ``> 0``.
    offset
        A roll of the result by ``(−offset, −offset)``.
    box
        The side of the summed block, ``≥ 1``.
    dtype
        The dtype of the arithmetic (default: the dtype of ``x``; a wider one casts ``x``
        up exactly, without a copy).

    Returns
    -------
    torch.Tensor
        ``(B, C, S, S)``: integers in ``dtype``; NaN / inf throughout a sample that has a
        non-finite pixel.
    """
    dtype = x.dtype if dtype is None else dtype
    left, right, levels = _blur_matrices(
        int(x.shape[-1]), sigma, offset, box, significand_bits(dtype)
    )
    return blur_exactly(x, left, right, levels, dtype)


def _centre_scores(
    x: torch.Tensor, sigma: float, window: int, dtype: torch.dtype | None = None
) -> torch.Tensor:
    """The ring scores ``(B, n, S²)`` of every phase (``n = len(patch_rings(window))``), in ``dtype``.

    ``dtype`` defaults to the dtype of ``x``; a wider one casts ``x`` up exactly (no copy).

    Column ``a·S + b`` scores phase ``(a, b)``: the ``window × window`` block at the centre
    of the ``S × S`` patch whose top-left corner is ``(a, b)`` — its top-left corner at
    ``(a, b) + (S − window)/2`` — of the blurred image. Row ``k``: ``Σ_c ring_k²`` of that
    block (the rings of [`patch_rings`][groupattn.canonical.patch_rings]`(window)`, from the
    centre outwards; they are the innermost rings of the ``S × S`` patch about the same
    centre).
    """
    b, _, s, _ = x.shape
    if window == 2:  # a single ring, the 2 × 2 block: summed inside the exact products
        block = _integer_blur(x, sigma, (s - window) // 2, box=2, dtype=dtype).square_()
        return (block if block.shape[1] == 1 else block.sum(dim=1)).reshape(b, 1, s * s)
    blurred = _integer_blur(x, sigma, (s - window) // 2, dtype=dtype)
    rings = _ring_sums(_window_view(blurred, window), window)
    return torch.stack([(r * r).sum(dim=1).reshape(b, s * s) for r in rings], dim=1)


def _check_sigma(module: str, sigma: float) -> float:
    if (
        isinstance(sigma, bool)
        or not isinstance(sigma, numbers.Real)
        or not math.isfinite(float(sigma))
        or sigma <= 0
    ):
        raise ConfigurationError(
            f"{module}: expected sigma as a finite number > 0 (pixels), got {sigma!r}"
        )
    return float(sigma)


def _check_window(module: str, window: int, size: int | None) -> int:
    if isinstance(window, bool) or not isinstance(window, int) or window < 2 or window % 2:
        raise ConfigurationError(f"{module}: expected window as an even int >= 2, got {window!r}")
    if window > _MAX_CENTRE_WINDOW:
        # one score per ring and phase: (window²/8 rings) × S² numbers, kept for the cascade
        raise ConfigurationError(
            f"{module}: expected window <= {_MAX_CENTRE_WINDOW} (each of its ~window²/8 rings "
            f"is scored at every pixel), got window={window}"
        )
    if size is not None and window > size:
        raise ConfigurationError(
            f"{module}: expected window <= the image size {size}, got window={window}"
        )
    return window


def _check_centre_input(module: str, x: torch.Tensor, window: int) -> int:
    _check_input(module, x, 1)
    if x.dim() == 4 and x.shape[1] == 0:
        raise ShapeError(f"{module}: expected images with at least one channel, got 0 channels")
    side = int(x.shape[-1])
    if side % 2:
        raise ShapeError(f"{module}: expected an even image side, got {side}x{side}")
    if window > side:
        raise ShapeError(f"{module}: expected an image side >= window={window}, got {side}x{side}")
    return side


def _centre_score_device(device: torch.device) -> torch.device:
    """Where ``CentreAnchor`` scores images held on ``device``: there, or on the CPU when
    ``device`` has no float64 (Apple ``mps``).

    The exact blur needs float64's 53 bits: in float32 the weights of a wide blur get about
    5 bits (``σ = 9.6`` on 32 × 32: every weight rounds to 1, the blur is flat and every
    phase ties), so a device without float64 sends the image to the CPU to be scored and
    gets the decision back (a host round trip) — the same decisions as on the CPU.
    """
    return device if score_dtype(device) == torch.float64 else torch.device("cpu")


def _centre_anchor(x: torch.Tensor, sigma: float, window: int) -> Canonicalized:
    """[`centre_anchor`][groupattn.canonical.centre_anchor] after the checks."""
    side = int(x.shape[-1])
    device = _centre_score_device(x.device)
    # the scores are integers of a rounded image: nothing to differentiate
    with scoring(device), torch.no_grad():
        # the blur casts a float input up to the score dtype exactly inside its first
        # division (no float64 copy of the image)
        source, dtype = score_source(x.detach().to(device))
        scores = _centre_scores(source, sigma, window, dtype)
        deciding = _lexicographic(scores)
    index, margin = argmax_with_margin(deciding, x.dtype)  # reports ties when recording
    if device != x.device:  # scored on the CPU: the decision goes back to the data
        index = index.to(x.device)
        margin = margin.to(x.device, score_dtype(x.device))
    row = torch.div(index, side, rounding_mode="floor")
    col = index - row * side
    return Canonicalized(_gather_roll(x, row, col, None), torch.stack([row, col], dim=1), margin)


def centre_anchor(x: torch.Tensor, sigma: float = 6.0, window: int = 8) -> Canonicalized:
    """Roll each sample so that the centre of its blurred mass sits at the image centre, exactly under p4m.

    Patch-grid anchoring with ``p = S`` (see [`CentreAnchor`][groupattn.canonical.CentreAnchor]):
    every one of the ``S²`` translations is a phase; the phase ``(a, b)`` is scored by the
    ring energies ``Σ_c ring_k²`` (from the centre outwards) of the central
    ``window × window`` block of the ``S × S`` patch at ``(a, b)`` in a D4-symmetric
    Gaussian blur of the image, compared lexicographically; the winner is rolled to the
    origin, which puts its block at the image centre.

    Contract: canonicalizing under p4 / p4m of the ``S × S`` torus (and all its
    translations, and the point group alone) with output group
    ``StridedRotoTranslationGroup(H, S, stride=S)``: an input moved by ``(t, h)`` gives the
    output turned (reflected) by ``h`` about the image centre, whatever ``t``.

    Parameters
    ----------
    x
        Images ``(B, C, S, S)``, ``S`` even and ``≥ window``.
    sigma
        The blur's standard deviation in pixels (``> 0``; 6 suits 28 × 28 digits on a
        32 × 32 canvas).
    window
        The side of the scored central block, even, ``≤ 32``.

    Returns
    -------
    Canonicalized
        ``output`` ``(B, C, S, S)`` in the dtype of ``x`` (``x`` rolled by ``(−a, −b)``);
        ``frame`` long ``(B, 2)`` the phase ``(a, b)``; ``margin`` ``(B,)`` float64, the
        deciding score's margin (0 on a full tie, where the lowest index ``a·S + b``
        wins; every decision is reported to
        [`record_canonicalizations`][groupattn.canonical.record_canonicalizations]).

    Raises
    ------
    ConfigurationError
        For a ``sigma`` that is not a finite number > 0, or a ``window`` that is not an
        even int ≥ 2.
    GroupError
        For an input that is not a batch of square images with an even side ≥ ``window``.
    """
    sigma = _check_sigma("centre_anchor", sigma)
    window = _check_window("centre_anchor", window, None)
    _check_centre_input("centre_anchor", x, window)
    return _centre_anchor(x, sigma, window)


@sealed
class CentreAnchor(PatchGridAnchor):
    """Anchor the whole translation: roll the blurred image's centre to the image centre, exactly under p4m.

    [`PatchGridAnchor`][groupattn.canonical.PatchGridAnchor] with ``patch_size = image_size``:
    the ``S²`` phases of the ``S × S`` "patch grid" are all the translations of the torus,
    so what is left of p4 / p4m after anchoring is
    ``StridedRotoTranslationGroup(H, S, stride=S)`` — the turns and reflections about the
    image centre alone. A body that is invariant to those *with absolute positions*
    (``GroupViT`` / ``GroupSwin`` with their rotation-invariant
    [`LiftedOrbitPositionalEncoding`][groupattn.positional.LiftedOrbitPositionalEncoding])
    is then invariant to all of p4 / p4m. The group models learn far better with absolute
    positions than without them, which the patch-size anchor must give up.

    Scores (cheap: no ``S × S`` cascade): the image is blurred by a circular Gaussian of
    standard deviation ``sigma`` (truncated at ``3σ``), and phase ``(a, b)`` is scored by the
    ring energies ``Σ_c ring_k²`` of the central ``window × window`` block of its
    ``S × S`` patch (top-left corner ``(a, b) + (S − window)/2``; the rings are the D4
    orbits about the block's centre, [`patch_rings`][groupattn.canonical.patch_rings]
    ``(window)``, centre outwards: the first is the blurred mass on the 4 pixels about the
    centre, so the blurred image's maximum is rolled to the image centre), compared
    lexicographically (a later ring decides only among the phases tied on all earlier
    ones).

    Why it is exact: the blur is computed in integers — each sample quantized to
    ``round(x / max|x| · 2²⁴)``, then multiplied on both sides by a symmetric circulant
    matrix of integer weights (adding up to about ``2¹³``) — so every number stays below
    ``2⁵²`` in float64 and every sum is exact whatever order the matrix product adds in:
    the computed blur *is* the mathematical one, which commutes with every circular
    shift, turn and reflection of the square torus. A ring sum is the same float for a
    turned or reflected block (opposite pixels first), and a turn about the image centre
    maps the block of phase ``φ`` onto the block of phase ``h·φ mod S`` (``S`` and
    ``window`` even: every block is centred on a pixel corner, as is the image). So a
    moved input permutes the scores exactly, and the arg-max moves with it. (With
    ``window = 2`` the single ring, the 2 × 2 block sum, is folded into the matrices: two
    matrix products per forward.) The quantization makes the decision a function of
    ``x / max|x|`` to 24 bits: images that differ by less tie or move together.

    Ties: only a *full tie* (phases equal on every ring score) falls back to the lowest
    index ``a·S + b`` and is reported as a tie (margin 0) to
    [`record_canonicalizations`][groupattn.canonical.record_canonicalizations]. It is
    harmless when the anchored images of the tied phases differ by a turn about the
    centre — a constant image (every phase gives the same image) or an image equal to its
    own quarter turn (``φ`` ties with ``h·φ``); only a full tie between phases whose
    anchored images no turn relates (e.g. two equal blobs related by a shift) can break
    invariance. Generic images, such as digits, have no tie. The integer blur adds two
    sources of ties, reported like the others: structure below ``2⁻²⁴`` of the image's
    largest pixel is quantized away (one pixel ``2²⁶`` times brighter than the rest leaves
    an image of one bright pixel), and a blur nearly as wide as the image scores many phases alike
    (wrapped around the torus, the Gaussian is flat to its weights' 13 bits above about
    ``σ = 0.6 S``: of 300 MNIST test digits on 32 × 32, none tie at ``σ = 19``, 200 at
    ``σ = 20``).

    Contract: [`PatchGridAnchor`][groupattn.canonical.PatchGridAnchor]'s with ``p = S``:
    canonicalizing under ``RotoTranslationGroup(H, S)`` (p4, p4m) and under ``H`` with
    output group ``StridedRotoTranslationGroup(H, S, stride=S)``; under
    ``TorusTranslations(S, S)`` with the trivial output group ``TorusTranslations(1, 1,
    stride=S)`` (invariant).

    Shapes: ``(B, C, S, S) → Canonicalized(output (B, C, S, S), frame (B, 2), margin (B,))``
    (see [`centre_anchor`][groupattn.canonical.centre_anchor]); scores in float64 with
    autocast disabled, the output in the input's dtype. On a device without float64
    (Apple ``mps``) the image is scored on the CPU and the decision moved back (a host
    round trip): float32 would leave a wide blur's integer weights too few bits (at
    ``σ = 9.6`` on 32 × 32 every weight rounds to 1, and every phase would tie).

    Parameters
    ----------
    image_size
        ``S``, even.
    sigma
        The blur's standard deviation in pixels, ``> 0``.
    window
        The side of the scored central block: even, ``≤ S`` and ``≤ 32``.

    Raises
    ------
    ConfigurationError
        For an odd or non-int ``image_size``, a ``sigma`` that is not a finite number > 0,
        or a ``window`` that is odd or larger than ``image_size``.
    """

    def __init__(self, image_size: int, sigma: float = 6.0, window: int = 8) -> None:
        if (
            isinstance(image_size, bool)
            or not isinstance(image_size, int)
            or image_size < 2
            or image_size % 2
        ):
            raise ConfigurationError(
                f"CentreAnchor: expected an even image size as an int >= 2, got {image_size!r}"
            )
        super().__init__(image_size, image_size)
        self.sigma = _check_sigma("CentreAnchor", sigma)
        self.window = _check_window("CentreAnchor", window, image_size)

    def forward(self, x: torch.Tensor) -> Canonicalized:
        """Anchor images ``(B, C, S, S)``; see [`centre_anchor`][groupattn.canonical.centre_anchor]."""
        side = _check_centre_input("CentreAnchor", x, self.window)
        if side != self.image_size:
            raise ShapeError(
                f"CentreAnchor: expected images of side image_size={self.image_size}, "
                f"got {side}x{side}"
            )
        return _centre_anchor(x, self.sigma, self.window)

    def extra_repr(self) -> str:
        return f"image_size={self.image_size}, sigma={self.sigma:g}, window={self.window}"
