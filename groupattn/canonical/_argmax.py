"""The generic arg-max canonicalizer over a finite group or a set of coset representatives."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from .._sealed import sealed
from ..actions import FieldType, GridField
from ..contracts import Contract
from ..groups import FiniteGroup, Group, GroupElement, GroupError
from ._precision import scoring, to_score_dtype
from ._record import report_scores
from ._types import Canonicalized

__all__ = ["ArgmaxCanonicalizer", "argmax_with_margin"]


def argmax_with_margin(
    scores: torch.Tensor, input_dtype: torch.dtype | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Best candidate per sample and the gap between the two best scores.

    The scores are cast up to the score dtype (float64, see
    [`score_dtype`][groupattn.canonical.score_dtype]; exact) before the margin is taken, so the
    margin of low-precision scores is their exact difference. Ties are resolved
    deterministically: the **lowest index** among the best scores wins (``torch.max``
    returns the first maximum), and the margin is then exactly 0. Every decision is
    reported to [`record_canonicalizations`][groupattn.canonical.record_canonicalizations] when a recording is
    active (ties, near-ties within the rounding of ``input_dtype``, NaN scores).

    Parameters
    ----------
    scores
        ``(B, K)`` score of each of ``K`` candidates.
    input_dtype
        The dtype of the tensor the scores were computed from; near-ties are judged
        against its rounding (default: the dtype of ``scores``).

    Returns
    -------
    tuple of torch.Tensor
        ``index`` — long ``(B,)``; ``margin`` — ``(B,)`` best minus second-best score, in
        the score dtype (``+inf`` when there is a single candidate).

    Raises
    ------
    GroupError
        If ``scores`` is not a non-empty ``(B, K)`` tensor.
    """
    if scores.dim() != 2 or scores.shape[1] < 1:
        raise GroupError(
            f"argmax_with_margin: expected scores of shape (B, K) with K >= 1, got {tuple(scores.shape)}"
        )
    if input_dtype is None:
        input_dtype = scores.dtype
    scores = to_score_dtype(scores)
    index, margin = best_and_margin(scores)
    report_scores(scores, margin, input_dtype)  # to record_canonicalizations(), when one is active
    return index, margin


def best_and_margin(scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``argmax_with_margin`` of ``(B, K)`` scores already in the score dtype, unreported."""
    # torch.max returns the first maximum's index, like torch.argmax (NaN counts as the
    # largest value, as there)
    best, index = torch.max(scores, dim=1)
    if scores.shape[1] == 1:
        return index, torch.full_like(best, float("inf"))
    # the second-best score: the best of the others once the chosen one is set aside (a
    # tied best stays among them, so a tie gives 0; inf − inf and NaN give NaN) — the same
    # numbers as the top two of topk, in half its time
    rest = scores.scatter(1, index[:, None], float("-inf"))
    return index, best - rest.amax(dim=1)


@sealed
class ArgmaxCanonicalizer(nn.Module):
    """Score every candidate element, pick the best, apply it.

    For each candidate ``g_k`` (all elements of a finite group, or a list of coset
    representatives) the canonicalizer computes ``score(g_k · x)`` per sample, picks
    ``k* = argmax_k`` (lowest ``k`` on a tie) and returns ``g_{k*} · x``. This is the
    reference implementation for any finite group and field type (orientation
    canonicalization for C4 / D4 is this class with the rotations, or rotations and
    reflections, as candidates); polyphase anchoring ([`PolyphaseAnchor`][groupattn.canonical.PolyphaseAnchor]) is a fast
    special case for translations.

    Precision: the candidates are moved in the input's dtype (the output keeps it), but
    scored on a copy cast up to float64 ([`score_dtype`][groupattn.canonical.score_dtype]) with
    autocast disabled, so the decision does not depend on the precision the network
    runs in (bf16 / fp16 autocast, bf16 weights). A score function with parameters of
    its own (a learned score) may need its input in their dtype: pass
    ``fixed_precision=False`` to score in the input's dtype (autocast still disabled).

    Contract: *canonicalizing* — ``f(h·x) = h'·f(x)`` for a data-dependent ``h'`` of
    ``output_group`` (by default the acting group; when the candidates are all elements
    of the group the output is invariant up to ties) — with ``fixed_precision=True``
    only: scores rounded in the input's dtype can tie where float64 ones do not, so with
    ``fixed_precision=False`` nothing is promised and the checker reports *unverified*.

    Parameters
    ----------
    group
        The finite group the candidates belong to.
    score
        Maps a batch ``(B, ...)`` in ``field_type``'s layout to scores ``(B,)``; it must
        itself be invariant under the group for the result to be canonicalizing.
    field_type
        How the group acts on the input (default: images).
    candidates
        Elements (or raw values) to score; all elements of ``group`` by default.
    output_group
        The group acting on the output, if it differs from ``group``.
    fixed_precision
        Score in float64 (default) rather than in the input's dtype; ``False`` gives up
        the contract (see above).

    Examples
    --------
    >>> import torch
    >>> from groupattn.groups import CyclicGroup
    >>> canon = ArgmaxCanonicalizer(CyclicGroup(4), lambda x: x[:, 0, 0, -1])
    >>> out = canon(torch.randn(2, 1, 5, 5))
    >>> out.frame.shape
    torch.Size([2])
    """

    def __init__(
        self,
        group: FiniteGroup,
        score: Callable[[torch.Tensor], torch.Tensor],
        field_type: FieldType | None = None,
        candidates: Sequence[Any] | None = None,
        output_group: Group | None = None,
        fixed_precision: bool = True,
    ) -> None:
        super().__init__()
        if not isinstance(group, FiniteGroup):
            raise GroupError(f"ArgmaxCanonicalizer: expected a finite group, got {group!r}")
        self.group = group
        self.score = score
        self.field_type = field_type or GridField()
        elems = group.elements() if candidates is None else [group.element(c) for c in candidates]
        if not elems:
            raise GroupError(
                "ArgmaxCanonicalizer: expected at least one candidate element, got none"
            )
        self.candidates: list[GroupElement] = elems
        self.output_group = output_group
        self.fixed_precision = bool(fixed_precision)

    def forward(self, x: torch.Tensor) -> Canonicalized:
        """Canonicalize ``x``.

        Parameters
        ----------
        x
            ``(B, ...)`` in the layout of ``field_type``.

        Returns
        -------
        Canonicalized
            ``output`` same shape as ``x``; ``frame`` long ``(B,)`` index into
            ``candidates``; ``margin`` ``(B,)`` in the score dtype (float64).
        """
        self.field_type.check(x, "ArgmaxCanonicalizer")
        moved = torch.stack([self.field_type.act(self.group, g, x) for g in self.candidates])
        k, b = moved.shape[0], moved.shape[1]
        candidates = moved.reshape(k * b, *moved.shape[2:])
        with scoring(x.device):
            scores = self.score(to_score_dtype(candidates) if self.fixed_precision else candidates)
        if scores.shape != (k * b,):
            raise GroupError(
                f"ArgmaxCanonicalizer: expected the score function to return shape ({k * b},), "
                f"got {tuple(scores.shape)}"
            )
        index, margin = argmax_with_margin(scores.reshape(k, b).transpose(0, 1), x.dtype)
        output = moved[index, torch.arange(b, device=x.device)]
        return Canonicalized(output, index, margin)

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """Canonicalizing under ``group`` with ``field_type`` in and out.

        Only with ``fixed_precision=True``: scored in the input's dtype, two candidates
        whose exact scores differ can round to a tie, which the lowest index then breaks
        — a choice that does not move with the input — so with ``fixed_precision=False``
        nothing is promised (the checker reports the network *unverified*).
        """
        if group != self.group:
            return Contract.unknown(
                f"ArgmaxCanonicalizer: scores candidates of {self.group.name}, not {group.name}",
                input_type or self.field_type,
            )
        if not self.fixed_precision:
            return Contract.unknown(
                "ArgmaxCanonicalizer: with fixed_precision=False its scores are computed in the input's "
                "dtype, whose rounding can tie candidates and break the tie by index; expected "
                "fixed_precision=True (scores in float64) for a canonicalizing contract",
                input_type or self.field_type,
            )
        if (
            self.output_group is not None
            and isinstance(self.output_group, FiniteGroup)
            and self.output_group.order() == 1
        ):
            # invariance (a trivial output group) holds only when every element is scored:
            # with fewer candidates, g·x and x can pick candidates that differ by an
            # element outside the set
            order = self.group.order() if isinstance(self.group, FiniteGroup) else None
            covered = set(self.candidates)
            if order is None or len(covered) != order:
                return Contract.unknown(
                    f"ArgmaxCanonicalizer: a trivial output group needs every element of "
                    f"{self.group.name} as a candidate, got {len(covered)} of {order}",
                    input_type or self.field_type,
                )
        return Contract.canonicalizing(self.field_type, self.field_type, self.output_group)
