"""Recording canonicalizer decisions: margins, ties and non-finite scores.

Every canonicalizer in :mod:`groupattn.canonical` decides through
:func:`~groupattn.canonical.argmax_with_margin`, which reports its scores here while a
:func:`record_canonicalizations` block is active — including canonicalizations done
inside other modules (a :class:`~groupattn.nn.PatchEmbedding` anchors without returning
a :class:`~groupattn.canonical.Canonicalized`). :func:`groupattn.check.verify` uses it to
tell a canonicalizer tie or a non-finite input from a real equivariance error.

Outside such a block, and while ``torch.compile`` / ``torch.export`` trace, reporting
is a no-op (one context-variable read).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field

import torch

__all__ = [
    "NEAR_TIE_ULPS",
    "TIE_ULPS",
    "CanonicalizationEvent",
    "CanonicalizationRecorder",
    "judging_ties_as",
    "record_canonicalizations",
    "report_scores",
]

TIE_ULPS = 256.0
"""A margin at most this many units of the scores' rounding (``eps · max|score|`` in the
score dtype, float64) is a tie: the two best candidates are equal up to the rounding of the
arithmetic that scored them, so moving the input (a different summation order) may swap them."""

NEAR_TIE_ULPS = 4.0
"""A margin at most this many units of the *input's* rounding (``eps · max|score|`` in the
dtype the canonicalizer's input arrived in) is a near-tie: the scores are exact functions
of the values received, but a perturbation of those values by a few roundings of their own
dtype — what an upstream layer that is not bit-exact under the group (a reduction in
another order, in bf16) leaves behind — can swap the two best candidates. Norm scores move
by at most the relative perturbation of their input."""


@dataclass
class CanonicalizationEvent:
    """One canonicalizer decision over a batch.

    Attributes
    ----------
    where
        Who decided (what the recorder's ``locate`` returned; ``None`` without one).
    candidates
        How many candidates were scored.
    margin
        ``(B,)`` best minus second-best score, float64 on the CPU.
    tied
        ``(B,)`` bool: the two best scores are equal up to rounding — margin 0, within
        :data:`TIE_ULPS` ulps of the scores' own dtype, within :data:`NEAR_TIE_ULPS` ulps of
        the input's dtype (a near-tie: at risk from a perturbation of the input by its
        own rounding), or both ``+inf``: the choice is ambiguous or fragile.
    non_finite
        ``(B,)`` bool: a score is NaN (e.g. the input contains NaN/inf), so the choice is
        meaningless.
    input_dtype
        The dtype of the canonicalizer's input (``None``: not reported).
    margin_ulps
        ``(B,)`` float64: the margin in units of the input dtype's rounding of the largest
        score, ``margin / (eps · max|score|)`` (``None``: not reported; ``+inf`` for a
        single candidate). Below :data:`NEAR_TIE_ULPS` the sample is counted as tied.
    """

    where: str | None
    candidates: int
    margin: torch.Tensor
    tied: torch.Tensor
    non_finite: torch.Tensor
    input_dtype: torch.dtype | None = None
    margin_ulps: torch.Tensor | None = None

    @property
    def batch(self) -> int:
        """Number of samples decided."""
        return int(self.margin.shape[0])

    @property
    def num_tied(self) -> int:
        return int(self.tied.sum())

    @property
    def num_non_finite(self) -> int:
        return int(self.non_finite.sum())

    @property
    def flagged(self) -> torch.Tensor:
        """``(B,)`` bool: tied or non-finite."""
        return self.tied | self.non_finite


@dataclass
class CanonicalizationRecorder:
    """What :func:`record_canonicalizations` yields: the events, in call order."""

    locate: Callable[[], str | None] | None = None
    events: list[CanonicalizationEvent] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.events)

    def __iter__(self) -> Iterator[CanonicalizationEvent]:
        return iter(self.events)

    def since(self, start: int) -> list[CanonicalizationEvent]:
        """The events recorded after the first ``start``."""
        return self.events[start:]


_ACTIVE: ContextVar[tuple[CanonicalizationRecorder, ...]] = ContextVar("groupattn_canonical_recorders", default=())
_JUDGED_AS: ContextVar[torch.dtype | None] = ContextVar("groupattn_canonical_tie_dtype", default=None)


@contextlib.contextmanager
def record_canonicalizations(
    locate: Callable[[], str | None] | None = None,
) -> Iterator[CanonicalizationRecorder]:
    """Record every canonicalizer decision made inside the block.

    Parameters
    ----------
    locate
        Called at each decision; its result is stored as :attr:`CanonicalizationEvent.where`
        (e.g. the name of the module running, kept by forward hooks).

    Yields
    ------
    CanonicalizationRecorder
        Its ``events`` fill up as canonicalizers run. Blocks nest; each sees every event.

    Examples
    --------
    >>> import torch
    >>> from groupattn.canonical import polyphase_anchor
    >>> with record_canonicalizations() as rec:
    ...     _ = polyphase_anchor(torch.ones(2, 1, 4, 4), 2)
    >>> rec.events[0].num_tied
    2
    """
    recorder = CanonicalizationRecorder(locate)
    token = _ACTIVE.set((*_ACTIVE.get(), recorder))
    try:
        yield recorder
    finally:
        _ACTIVE.reset(token)


def judging_ties_as(dtype: torch.dtype) -> contextlib.AbstractContextManager[object]:
    """Judge near-ties of the decisions made inside the block against ``dtype``'s rounding.

    For a layer that widens its input before handing it to a canonicalizer module (the
    blurred anchoring of :class:`~groupattn.nn.PatchEmbedding` passes a float64 copy with
    an extra score channel): the recorded near-ties then refer to the dtype the data
    arrived in. A no-op while ``torch.compile`` traces (nothing is recorded then).

    Parameters
    ----------
    dtype
        The dtype the canonicalizer's data arrived in.

    Returns
    -------
    contextlib.AbstractContextManager
        The context.
    """
    if torch.compiler.is_compiling():
        return contextlib.nullcontext()
    return _judged_as(dtype)


@contextlib.contextmanager
def _judged_as(dtype: torch.dtype) -> Iterator[None]:
    token = _JUDGED_AS.set(dtype)
    try:
        yield
    finally:
        _JUDGED_AS.reset(token)


def report_scores(scores: torch.Tensor, margin: torch.Tensor, input_dtype: torch.dtype | None = None) -> None:
    """Report one decision to the active recorders (a no-op when none is active).

    Called by :func:`~groupattn.canonical.argmax_with_margin`, the single place where
    canonicalizer margins are produced; a canonicalizer that decides otherwise should
    call it with its ``(B, K)`` scores and ``(B,)`` margins.

    Parameters
    ----------
    scores
        ``(B, K)`` candidate scores.
    margin
        ``(B,)`` best minus second-best score.
    input_dtype
        The dtype of the tensor the scores were computed from: a margin within
        :data:`NEAR_TIE_ULPS` of its rounding is a near-tie (default: the scores' dtype;
        inside :func:`judging_ties_as`, that block's dtype).
    """
    if torch.compiler.is_compiling():
        return
    recorders = _ACTIVE.get()
    if not recorders or _tracing(scores):
        return
    event_scores = scores.detach().to("cpu", torch.float64)
    b, k = event_scores.shape
    margin64 = margin.detach().to("cpu", torch.float64).reshape(b)
    dtype = _JUDGED_AS.get() or (scores.dtype if input_dtype is None else input_dtype)
    if k < 2:
        tied = torch.zeros(b, dtype=torch.bool)
        non_finite = torch.zeros(b, dtype=torch.bool)
        ulps = torch.full((b,), float("inf"), dtype=torch.float64)
    else:
        top = torch.topk(scores.detach().to("cpu"), 2, dim=1).values.to(torch.float64)
        non_finite = event_scores.isnan().any(dim=1)
        both_infinite = top[:, 0].isinf() & (top[:, 0] == top[:, 1])
        scale = top.abs().nan_to_num(0.0, 0.0, 0.0).amax(dim=1)
        close = margin64.abs() <= TIE_ULPS * _eps(scores.dtype) * scale
        ulps = margin64.abs() / (_eps(dtype) * scale)  # inf where the scale is 0 and the margin is not
        ulps = torch.where(margin64 == 0, torch.zeros_like(ulps), ulps)
        near = ulps <= NEAR_TIE_ULPS
        tied = ~non_finite & (both_infinite | close | near | (margin64 == 0))
    for recorder in recorders:
        where = recorder.locate() if recorder.locate is not None else None
        recorder.events.append(CanonicalizationEvent(where, k, margin64, tied, non_finite, dtype, ulps))


def _eps(dtype: torch.dtype) -> float:
    """Machine epsilon of a floating dtype; 0 for integer scores (exact)."""
    return torch.finfo(dtype).eps if dtype.is_floating_point else 0.0


def _tracing(scores: torch.Tensor) -> bool:
    """Whether ``scores`` are symbolic (export, ``make_fx``, fake or meta tensors): nothing to read."""
    if torch.compiler.is_exporting() or torch.jit.is_tracing() or scores.device.type == "meta":
        return True
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(scores, FakeTensor) or type(scores).__name__ in ("FunctionalTensor", "FakeTensor")
