"""Recording canonicalizer decisions: margins, ties, near-ties and non-finite scores.

Every canonicalizer in [`groupattn.canonical`][groupattn.canonical] decides through
[`argmax_with_margin`][groupattn.canonical.argmax_with_margin], which reports its scores here while a
[`record_canonicalizations`][groupattn.canonical.record_canonicalizations] block is active — including canonicalizations done
inside other modules (a [`PatchEmbedding`][groupattn.nn.PatchEmbedding] anchors without returning
a [`Canonicalized`][groupattn.canonical.Canonicalized]). [`groupattn.check.verify`][groupattn.check.verify] uses it to
tell a canonicalizer tie or a non-finite input from a real equivariance error.

Outside such a block, and while ``torch.compile`` / ``torch.export`` trace, reporting
is a no-op (one context-variable read).

Ties and near-ties
------------------
A canonicalizer's scores are computed in float64 from the values it receives (see
``groupattn.canonical._precision``), so two kinds of closeness matter:

* a **tie** — the margin is 0, or within [`TIE_ULPS`][groupattn.canonical.TIE_ULPS] roundings of the *score
  arithmetic* (float64): the choice is ambiguous even for an exactly moved input, which
  is summed in another order. Exact ties are the documented limit of anchoring; they are
  what [`groupattn.check.certify`][groupattn.check.certify] and [`groupattn.check.verify`][groupattn.check.verify] report as ties.
* a **near-tie** — the margin is within [`NEAR_TIE_ULPS`][groupattn.canonical.NEAR_TIE_ULPS] roundings of the
  *precision in use* ([`precision_in_use`][groupattn.canonical.precision_in_use]: the coarser of the dtype the
  canonicalizer's input arrived in and the autocast dtype active on its device). It is
  a risk only if the values the canonicalizer receives were computed upstream, in that
  precision, by layers that are not bit-exact under the group (a reduction in another
  order): for a canonicalizer applied to the network's input (every registry model's
  patch-embedding anchoring) the received values move exactly, and no near-tie is at
  risk whatever the precision. One forward pass cannot tell the two apart, so
  [`CanonicalizationEvent.near_tied`][groupattn.canonical.CanonicalizationEvent] is an *a-priori* flag;
  [`near_ties_between`][groupattn.canonical.near_ties_between] compares the scores on an
  input and on its moved copy and keeps the near-ties of a canonicalizer whose received
  values were observed *not* to move exactly (scores that are not the same numbers in
  another order, beyond the float64 rounding of a tie) — what
  [`verify`][groupattn.check.verify] reports as near-ties.
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
    "near_ties_between",
    "precision_in_use",
    "record_canonicalizations",
    "report_scores",
]

TIE_ULPS = 256.0
"""A margin at most this many units of the scores' rounding (``eps · max|score|`` in the
score dtype, float64) is a tie: the two best candidates are equal up to the rounding of the
arithmetic that scored them, so moving the input (a different summation order) may swap them."""

NEAR_TIE_ULPS = 4.0
"""A margin at most this many units of the rounding of the *precision in use*
(``eps · max|score|``, see [`precision_in_use`][groupattn.canonical.precision_in_use]) is a near-tie: the scores are exact
functions of the values received, but a perturbation of those values by a few roundings of
that precision — what an upstream layer that is not bit-exact under the group (a reduction
in another order, in bf16) leaves behind — can swap the two best candidates. Norm scores
move by at most the relative perturbation of their input. An a-priori flag: see
[`near_ties_between`][groupattn.canonical.near_ties_between] for the near-ties actually at risk."""


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
        ``(B,)`` bool: the two best scores are equal up to the rounding of the arithmetic
        that scored them — margin 0, within [`TIE_ULPS`][groupattn.canonical.TIE_ULPS] ulps of the scores' own dtype
        (float64), or both ``+inf``: the choice is ambiguous even for exactly moved input.
    non_finite
        ``(B,)`` bool: a score is NaN (e.g. the input contains NaN/inf), so the choice is
        meaningless.
    input_dtype
        The dtype of the canonicalizer's input (``None``: not reported).
    margin_ulps
        ``(B,)`` float64: the margin in units of ``precision``'s rounding of the
        largest score, ``margin / (eps · max|score|)`` (``None``: not reported; ``+inf``
        for a single candidate).
    near_tied
        ``(B,)`` bool: not tied, but ``margin_ulps`` is at most [`NEAR_TIE_ULPS`][groupattn.canonical.NEAR_TIE_ULPS] —
        at risk *if* the received values carry rounding of ``precision`` that does not
        move with the group (``None``: not reported). Not counted as ties.
    precision
        The dtype near-ties are judged against: the coarser of ``input_dtype`` (or the
        dtype of ``judging_ties_as``) and the autocast dtype active on the device.
    scores
        ``(B, K)`` float64 on the CPU: the candidates' scores (``None``: not reported), for
        ``near_ties_between``.
    """

    where: str | None
    candidates: int
    margin: torch.Tensor
    tied: torch.Tensor
    non_finite: torch.Tensor
    input_dtype: torch.dtype | None = None
    margin_ulps: torch.Tensor | None = None
    near_tied: torch.Tensor | None = None
    precision: torch.dtype | None = None
    scores: torch.Tensor | None = None

    @property
    def batch(self) -> int:
        """Number of samples decided."""
        return int(self.margin.shape[0])

    @property
    def num_tied(self) -> int:
        """Number of samples counted as ``tied`` (ambiguous up to the score arithmetic's rounding)."""
        return int(self.tied.sum())

    @property
    def num_near_tied(self) -> int:
        """Number of samples flagged as a-priori near-ties (``near_tied``; 0 when not reported)."""
        return 0 if self.near_tied is None else int(self.near_tied.sum())

    @property
    def num_non_finite(self) -> int:
        """Number of samples with a NaN score (``non_finite``): meaningless decisions."""
        return int(self.non_finite.sum())

    @property
    def flagged(self) -> torch.Tensor:
        """``(B,)`` bool: tied or non-finite."""
        return self.tied | self.non_finite


@dataclass
class CanonicalizationRecorder:
    """What [`record_canonicalizations`][groupattn.canonical.record_canonicalizations] yields: the events, in call order."""

    locate: Callable[[], str | None] | None = None
    events: list[CanonicalizationEvent] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.events)

    def __iter__(self) -> Iterator[CanonicalizationEvent]:
        return iter(self.events)

    def since(self, start: int) -> list[CanonicalizationEvent]:
        """The events recorded after the first ``start``."""
        return self.events[start:]


_ACTIVE: ContextVar[tuple[CanonicalizationRecorder, ...]] = ContextVar(
    "groupattn_canonical_recorders", default=()
)
_JUDGED_AS: ContextVar[torch.dtype | None] = ContextVar(
    "groupattn_canonical_tie_dtype", default=None
)


@contextlib.contextmanager
def record_canonicalizations(
    locate: Callable[[], str | None] | None = None,
) -> Iterator[CanonicalizationRecorder]:
    """Record every canonicalizer decision made inside the block.

    Parameters
    ----------
    locate
        Called at each decision; its result is stored as [`CanonicalizationEvent.where`][groupattn.canonical.CanonicalizationEvent]
        (e.g. the name of the module running, kept by forward hooks).

    Yields
    ------
    CanonicalizationRecorder
        Its ``events`` fill up as canonicalizers run. Blocks nest; each sees every event.

    Notes
    -----
    Only eager calls are recorded: inside a function compiled with ``torch.compile`` (or
    traced by ``torch.export`` / ``torch.fx``) the canonicalizers decide as in eager mode
    but report nothing, so a tie there goes unrecorded. Count ties on the eager model; its
    decisions are the same.

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
    blurred anchoring of [`PatchEmbedding`][groupattn.nn.PatchEmbedding] passes a float64 copy with
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


def recording() -> bool:
    """Whether a decision made now would be recorded (a recording is active and nothing is
    being compiled or traced): a canonicalizer can skip work done only for its report."""
    # compiling first: dynamo cannot trace ContextVar.get (and nothing is recorded there)
    return not torch.compiler.is_compiling() and bool(_ACTIVE.get())


def report_scores(
    scores: torch.Tensor,
    margin: torch.Tensor,
    input_dtype: torch.dtype | None = None,
    *,
    scale: torch.Tensor | None = None,
    exact: bool = False,
) -> None:
    """Report one decision to the active recorders (a no-op when none is active).

    Called by [`argmax_with_margin`][groupattn.canonical.argmax_with_margin], the single place where
    canonicalizer margins are produced; a canonicalizer that decides otherwise should
    call it with its ``(B, K)`` scores and ``(B,)`` margins — one row per sample.

    Parameters
    ----------
    scores
        ``(B, K)`` candidate scores.
    margin
        ``(B,)`` best minus second-best score.
    input_dtype
        The dtype of the tensor the scores were computed from (default: the scores'
        dtype; inside ``judging_ties_as``, that block's dtype): a margin within
        [`NEAR_TIE_ULPS`][groupattn.canonical.NEAR_TIE_ULPS] roundings of
        [`precision_in_use`][groupattn.canonical.precision_in_use] of it is a near-tie.
    scale
        ``(B,)`` how much a score moves per unit of relative rounding of the input
        (default: the larger magnitude of the two best scores). Scores that cancel —
        sums of signed values — move by far more than their own magnitude: pass the same
        score computed from the magnitudes of the input.
    exact
        The scores are computed without rounding (integers below ``2**53``): a tie is a
        margin of exactly 0, with no allowance for the scores' own rounding.
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
    precision = precision_in_use(dtype, scores.device)
    if k < 2:
        tied = torch.zeros(b, dtype=torch.bool)
        near_tied = torch.zeros(b, dtype=torch.bool)
        non_finite = torch.zeros(b, dtype=torch.bool)
        ulps = torch.full((b,), float("inf"), dtype=torch.float64)
    else:
        top = torch.topk(scores.detach().to("cpu"), 2, dim=1).values.to(torch.float64)
        non_finite = event_scores.isnan().any(dim=1)
        both_infinite = top[:, 0].isinf() & (top[:, 0] == top[:, 1])
        if scale is None:
            scale = top.abs().nan_to_num(0.0, 0.0, 0.0).amax(dim=1)
        else:
            scale = scale.detach().to("cpu", torch.float64).reshape(b).nan_to_num(0.0, 0.0, 0.0)
        close = (
            torch.zeros(b, dtype=torch.bool)
            if exact
            else margin64.abs() <= TIE_ULPS * _eps(scores.dtype) * scale
        )
        # inf where the scale is 0 and the margin is not
        ulps = margin64.abs() / (_eps(precision) * scale)
        ulps = torch.where(margin64 == 0, torch.zeros_like(ulps), ulps)
        tied = ~non_finite & (both_infinite | close | (margin64 == 0))
        near_tied = ~non_finite & ~tied & (ulps <= NEAR_TIE_ULPS)
    for recorder in recorders:
        where = recorder.locate() if recorder.locate is not None else None
        recorder.events.append(
            CanonicalizationEvent(
                where,
                k,
                margin64,
                tied,
                non_finite,
                dtype,
                ulps,
                near_tied,
                precision,
                event_scores,
            )
        )


def precision_in_use(dtype: torch.dtype, device: torch.device | str) -> torch.dtype:
    """The precision whose rounding a canonicalizer's input may carry: near-ties are judged against it.

    The coarsest (largest machine epsilon) of ``dtype`` — the dtype the input arrived in —,
    the autocast dtype when autocast is active on ``device`` (under bf16 autocast a float32
    input to a canonicalizer was computed by bf16 matrix products upstream; autocast
    leaves float64 alone), and, for float32 on CUDA with TF32 allowed
    (``torch.backends.cuda.matmul.allow_tf32`` or ``torch.backends.cudnn.allow_tf32``, the
    latter on by default), TF32's rounding — 10 mantissa bits, reported as
    ``torch.float16``, the dtype with the same rounding.

    Parameters
    ----------
    dtype
        The dtype of the canonicalizer's input.
    device
        Where it runs.

    Returns
    -------
    torch.dtype
        ``dtype``, or the coarser autocast dtype (``torch.float16`` for TF32).
    """
    if not dtype.is_floating_point:
        return dtype
    kind = torch.device(device).type
    coarsest = dtype
    if (
        dtype != torch.float64
        and torch.amp.is_autocast_available(kind)
        and torch.is_autocast_enabled(kind)
    ):
        autocast = torch.get_autocast_dtype(kind)
        coarsest = autocast if _eps(autocast) > _eps(coarsest) else coarsest
    tf32 = torch.backends.cuda.matmul.allow_tf32 or torch.backends.cudnn.allow_tf32
    if kind == "cuda" and coarsest == torch.float32 and tf32:
        coarsest = torch.float16  # TF32 keeps 10 mantissa bits, as float16 does
    return coarsest


def near_ties_between(
    reference: CanonicalizationEvent, moved: CanonicalizationEvent, samples: int | None = None
) -> torch.Tensor:
    """The near-ties of ``moved`` actually at risk: those on values that did not move exactly.

    ``reference`` is the decision on an input, ``moved`` the same canonicalizer's decision
    on a moved copy of it. Were the values the canonicalizer received exactly moved, the
    candidates' scores would be the same numbers in another order, up to the float64
    rounding of summing them in another order ([`TIE_ULPS`][groupattn.canonical.TIE_ULPS]):
    the largest difference of the sorted score vectors stays within it. Beyond it, upstream
    layers left rounding of the precision in use in the received values, and an a-priori
    near-tie ([`CanonicalizationEvent.near_tied`][groupattn.canonical.CanonicalizationEvent]:
    a margin within [`NEAR_TIE_ULPS`][groupattn.canonical.NEAR_TIE_ULPS] roundings of that
    precision) is at risk. Near-ties on exactly moved values (a canonicalizer on the
    network's input) are not. The margin is judged against the precision's rounding, not
    against the observed difference: the sorted difference is only a lower bound of the
    scores' perturbation, and a perturbation that swaps the two best candidates can leave
    the sorted scores nearly unchanged.

    Parameters
    ----------
    reference, moved
        Two events of the same canonicalizer call, on an input and on its moved copy.
    samples
        Number of samples when each sample's decisions fill several consecutive rows
        (windows, heads: a batch-major ``(samples · n, K)``); the moved rows of a sample
        are then compared with the nearest reference row of the same sample, since the
        group permutes them. ``None``: row ``i`` is compared with row ``i``.

    Returns
    -------
    torch.Tensor
        ``(B,)`` bool over the rows of ``moved``. Without scores to compare (an event not
        reported by [`report_scores`][groupattn.canonical.report_scores], or shapes that differ) the a-priori
        [`near_tied`][groupattn.canonical.CanonicalizationEvent] flags (all ``False`` when absent).
    """
    fallback = (
        moved.near_tied
        if moved.near_tied is not None
        else torch.zeros(moved.batch, dtype=torch.bool)
    )
    a, m = reference.scores, moved.scores
    if a is None or m is None or a.shape != m.shape or a.shape[0] == 0:
        return fallback.clone()
    b, k = m.shape
    blocks = samples if samples is not None and samples > 0 and b % samples == 0 else b
    per = b // blocks
    a_sorted = torch.sort(a, dim=1, descending=True).values.reshape(blocks, 1, per, k)
    m_sorted = torch.sort(m, dim=1, descending=True).values.reshape(blocks, per, 1, k)
    gap = torch.nan_to_num((m_sorted - a_sorted).abs(), nan=0.0).amax(dim=3)  # (blocks, per, per)
    perturbation = gap.amin(dim=2).reshape(b)
    scale = m.abs().nan_to_num(0.0, 0.0, 0.0).amax(dim=1)
    return fallback & (perturbation > TIE_ULPS * _eps(m.dtype) * scale)


def _eps(dtype: torch.dtype) -> float:
    """Machine epsilon of a floating dtype; 0 for integer scores (exact)."""
    return torch.finfo(dtype).eps if dtype.is_floating_point else 0.0


def _tracing(scores: torch.Tensor) -> bool:
    """Whether ``scores`` are symbolic (export, ``make_fx``, fake or meta tensors): nothing to read."""
    if torch.compiler.is_exporting() or torch.jit.is_tracing() or scores.device.type == "meta":
        return True
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(scores, FakeTensor) or type(scores).__name__ in (
        "FunctionalTensor",
        "FakeTensor",
    )
