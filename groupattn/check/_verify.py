"""``verify``: measure equivariance numerically — every output, any group, ties and NaN told apart.

[`verify`][groupattn.check.verify] runs a float64 copy of the model on ``x`` and on ``g·x`` for a few group
elements and compares every tensor leaf of the output pytree with the moved output.
[`attach_verification`][groupattn.check.attach_verification] is how [`certify`][groupattn.check.certify] (``verify=True``)
and ``groupattn check`` fold the measurement into a [`Certificate`][groupattn.check.Certificate]: a certified
network that the numbers refute is *not* certified (its verdict becomes
``UNVERIFIED`` and the disagreement is listed), unless the failing samples are exactly
those where a canonicalizer met a tie or the input is not finite.
"""

from __future__ import annotations

import contextlib
import copy
import math
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import GetAttrKey, keystr, tree_flatten_with_path

from .._errors import VerificationBudgetError  # defined with the library's error hierarchy
from ..actions import FieldType, GridField, InvariantField, TokenField
from ..canonical import (
    NEAR_TIE_ULPS,
    CanonicalizationEvent,
    CanonicalizationRecorder,
    Canonicalized,
    near_ties_between,
    record_canonicalizations,
)
from ..contracts import Status
from ..groups import FiniteGroup, Group, GroupElement, GroupError, TorusTranslations
from ..testing import default_tolerance, representative_elements
from ..testing._equivariance import ENUMERATION_LIMIT, _cheap_order, _widen
from ._certificate import Certificate, VerificationReport

__all__ = [
    "DetailedVerificationReport",
    "OutputCheck",
    "VerificationBudgetError",
    "VerificationCost",
    "attach_verification",
    "estimate_verification",
    "verify",
]

#: How much slower a float64 forward is than the model's own dtype, for estimates.
FLOAT64_FACTOR = 2.0


# ---------------------------------------------------------------------------- report
@dataclass
class OutputCheck:
    """The numerical check of one tensor leaf of the model's output.

    Attributes
    ----------
    path
        The leaf's path in the output pytree (``torch.utils._pytree.keystr``): ``""``
        for a plain tensor, ``"[1]"``, ``"['logits']"``, ``".output"``.
    description
        How the leaf was moved (the field type's description, and its group).
    source
        Where that type came from: ``"argument"``, ``"certificate"``, ``"contract"``
        or ``"guess"`` (from the shapes).
    up_to_frame
        Whether the leaf was compared up to a canonicalizer's frame.
    errors
        Relative error per element, worst sample.
    clean_errors
        Relative error per element over the samples without a canonicalizer tie or
        non-finite values (absent when every sample was excused).
    skipped
        Why the leaf was not compared (``None`` when it was).
    """

    path: str
    description: str = ""
    source: str = ""
    up_to_frame: bool = False
    errors: dict[GroupElement, float] = field(default_factory=dict)
    clean_errors: dict[GroupElement, float] = field(default_factory=dict)
    skipped: str | None = None

    @property
    def label(self) -> str:
        """``"output"`` followed by the path: ``output``, ``output[1]``, ``output['logits']``."""
        return "output" + self.path

    @property
    def max_error(self) -> float:
        """The largest error over the tested elements and every sample (0 when nothing was compared)."""
        return max(self.errors.values(), default=0.0)

    @property
    def max_clean_error(self) -> float:
        """The largest error over the samples that are not excused (0 when every sample was)."""
        return max(self.clean_errors.values(), default=0.0)

    def to_json(self) -> dict[str, Any]:
        """The attributes, both largest errors and the worst element (its ``repr``), JSON-serialisable."""
        worst = max(self.errors, key=self.errors.__getitem__) if self.errors else None
        return {
            "path": self.path,
            "field": self.description,
            "source": self.source,
            "up_to_frame": self.up_to_frame,
            "max_error": self.max_error,
            "max_clean_error": self.max_clean_error,
            "worst_element": repr(worst) if worst is not None else None,
            "skipped": self.skipped,
        }


@dataclass
class DetailedVerificationReport(VerificationReport):
    """A [`VerificationReport`][groupattn.check.VerificationReport] with one entry per output leaf and the excused samples.

    ``errors`` (and ``max_error``, ``equivariant``) cover every compared leaf and every
    sample; [`refuted`][groupattn.check.DetailedVerificationReport.refuted] counts only the samples without a canonicalizer tie or
    non-finite values.

    Attributes
    ----------
    outputs
        One [`OutputCheck`][groupattn.check.OutputCheck] per leaf of the output pytree (flatten order).
    excused
        ``{sample index: why}`` for the samples whose errors do not count against the
        network: a canonicalizer tie (the frame is ambiguous) or NaN/inf in the input or
        in a canonicalizer's scores.
    non_finite
        What was not finite (the input, canonicalizer scores), in words.
    seconds
        Wall time of the measurement.
    """

    outputs: list[OutputCheck] = field(default_factory=list)
    excused: dict[int, str] = field(default_factory=dict)
    non_finite: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def compared(self) -> list[OutputCheck]:
        """The leaves that were compared."""
        return [o for o in self.outputs if o.skipped is None]

    @property
    def max_clean_error(self) -> float:
        """The largest error over samples that are not excused."""
        return max((o.max_clean_error for o in self.compared), default=0.0)

    @property
    def conclusive(self) -> bool:
        """Whether some leaf was compared on some sample that is not excused."""
        return any(o.clean_errors for o in self.compared)

    @property
    def refuted(self) -> bool:
        """Whether some sample that is not excused is off by more than the tolerance."""
        return self.max_clean_error > self.tolerance

    def worst(self, clean: bool = True) -> tuple[OutputCheck, GroupElement] | None:
        """The leaf and element with the largest (clean) error."""
        best: tuple[float, OutputCheck, GroupElement] | None = None
        for o in self.compared:
            errs = o.clean_errors if clean else o.errors
            for g, e in errs.items():
                if best is None or e > best[0]:
                    best = (e, o, g)
        return None if best is None else (best[1], best[2])

    def lines(self) -> list[str]:
        """One line per output leaf, then the excused samples."""
        out = []
        for o in self.outputs:
            if o.skipped is not None:
                out.append(f"{o.label}: not compared ({o.skipped})")
                continue
            text = f"{o.label}: max relative error {o.max_error:.3e} ({o.description}, from the {o.source})"
            if o.up_to_frame:
                text += " up to frame"
            if o.max_clean_error != o.max_error:
                text += (
                    f"; {o.max_clean_error:.3e} without the excused samples"
                    if o.clean_errors
                    else "; every sample excused"
                )
            out.append(text)
        out += [f"excused sample {b}: {why}" for b, why in sorted(self.excused.items())]
        return out

    def to_json(self) -> dict[str, Any]:
        """[`VerificationReport.to_json`][groupattn.check.VerificationReport.to_json] and the details.

        Adds one entry per output leaf ([`OutputCheck.to_json`][groupattn.check.OutputCheck.to_json]),
        the largest error without the excused samples, ``refuted``, ``conclusive``, the
        excused samples with their reasons, ``non_finite`` and the time taken.
        """
        data = super().to_json()
        data.update(
            {
                "outputs": [o.to_json() for o in self.outputs],
                "max_clean_error": self.max_clean_error,
                "refuted": self.refuted,
                "conclusive": self.conclusive,
                "excused_samples": {str(b): why for b, why in sorted(self.excused.items())},
                "non_finite": self.non_finite,
                "seconds": self.seconds,
            }
        )
        return data


@dataclass
class VerificationCost:
    """What [`estimate_verification`][groupattn.check.estimate_verification] expects the numerical check to cost.

    Attributes
    ----------
    elements
        How many group elements would be tested.
    forward_s
        Seconds per forward pass (measured once in the model's dtype, scaled for float64).
    total_s
        ``(elements + 1) · forward_s``.
    """

    elements: int
    forward_s: float
    total_s: float

    def describe(self) -> str:
        """One line for messages: the estimated time, the elements and the time per forward pass."""
        return f"about {self.total_s:.3g} s ({self.elements} elements + 1 reference, {self.forward_s:.3g} s per forward)"


# ---------------------------------------------------------------------------- helpers
@dataclass(frozen=True)
class _OnGroup(FieldType):
    """A field type acted on through another group: element values are carried over."""

    inner: FieldType = field(default_factory=GridField)
    target: Group | None = None

    def act(self, group: Group, g: Any, x: torch.Tensor) -> torch.Tensor:
        if self.target is None or self.target == group:
            return self.inner.act(group, g, x)
        value = g.value if isinstance(g, GroupElement) else group.element(g).value
        return self.inner.act(self.target, self.target.element(value), x)

    def check(self, x: torch.Tensor, module: str = "field") -> None:
        self.inner.check(x, module)

    @property
    def is_invariant(self) -> bool:
        return self.inner.is_invariant

    def describe(self) -> str:
        return self.inner.describe() + (
            f" under {self.target.name}" if self.target is not None else ""
        )


@dataclass
class _LeafPlan:
    path: str
    index: int
    field_type: FieldType | None = None
    output_group: Group | None = None
    up_to_frame: bool = False
    source: str = ""
    skipped: str | None = None


def _as_element(group: Group, g: Any) -> GroupElement:
    if isinstance(g, GroupElement) and g.group is group:
        return g
    return group.element(g)


def _resolve_group(group: Group | str, x: torch.Tensor) -> Group:
    from ._certify import _resolve_group as resolve

    return resolve(group, x)


@contextlib.contextmanager
def _evaluation(model: nn.Module) -> Iterator[None]:
    modes = {m: m.training for m in model.modules()}
    model.eval()
    try:
        yield
    finally:
        for m, mode in modes.items():
            m.train(mode)


def _leaves(y: Any) -> list[tuple[str, Any, bool]]:
    """``(path, leaf, is a canonicalizer's frame or margin)`` in pytree-flatten order."""
    flat, _ = tree_flatten_with_path(y)
    out = []
    for path, leaf in flat:
        aux = False
        if path and isinstance(path[-1], GetAttrKey) and path[-1].name in ("frame", "margin"):
            parent = y
            try:
                for key in path[:-1]:
                    parent = key.get(parent)  # type: ignore[attr-defined]
                aux = isinstance(parent, Canonicalized)
            except (KeyError, IndexError, AttributeError, TypeError):
                aux = False
        out.append((keystr(path), leaf, aux))
    return out


def _normal_path(path: Any) -> str | None:
    """A leaf path as ``keystr`` writes it: ``"output[1]"`` and ``"[1]"`` are the same leaf."""
    if not isinstance(path, str):
        return None
    return path.removeprefix("output")


def _main_index(y: Any, leaves: list[tuple[str, Any, bool]]) -> int | None:
    """The leaf a single-output contract or legacy certificate describes."""
    if not leaves or not isinstance(leaves[0][1], torch.Tensor):
        return None
    if isinstance(y, torch.Tensor | Canonicalized):
        return 0
    if isinstance(y, tuple | list) and y and isinstance(y[0], torch.Tensor):
        return 0
    return None


def _guess_output(
    y: torch.Tensor, x: torch.Tensor, in_type: FieldType, group: Group
) -> tuple[FieldType, Group | None]:
    if y.dim() <= 2:
        return InvariantField(), None
    if tuple(y.shape) == tuple(x.shape):
        return in_type, None
    if y.dim() == 3 and x.dim() == 4:
        side = math.isqrt(int(y.shape[1]))
        if side * side == int(y.shape[1]):
            coarse = (
                TorusTranslations(side, side)
                if isinstance(group, TorusTranslations) and side != x.shape[2]
                else None
            )
            return TokenField((side, side)), coarse
    if y.dim() == 4 and isinstance(group, TorusTranslations):
        return GridField(), TorusTranslations(int(y.shape[2]), int(y.shape[3]))
    if y.dim() == 4:
        return GridField(), None
    try:
        in_type.check(y, "verify")
        in_type.act(group, group.identity(), y)
    except (GroupError, ValueError, TypeError, RuntimeError, IndexError, NotImplementedError):
        pass
    else:
        return in_type, None
    raise GroupError(
        f"verify: cannot infer the output field type of shape {tuple(y.shape)}; pass output_type"
    )


def _diff_per_sample(actual: torch.Tensor, expected: torch.Tensor, batch: int) -> torch.Tensor:
    """``max |a − e|`` per sample (``(batch,)``, or ``(1,)`` when the leaf has no batch axis).

    NaN matches NaN and an infinity matches itself; any other non-finite mismatch is ``inf``.
    """
    a, e = _widen(actual), _widen(expected)
    d = (a - e).abs()
    same = (a == e) | (a.isnan() & e.isnan())
    d = torch.where(same, torch.zeros_like(d), d).nan_to_num(nan=math.inf)
    if a.dim() >= 1 and a.shape[0] == batch and batch > 0:
        return (
            d.reshape(batch, -1).amax(dim=1)
            if d.numel()
            else torch.zeros(batch, dtype=torch.float64)
        )
    return d.reshape(1, -1).amax(dim=1) if d.numel() else torch.zeros(1, dtype=torch.float64)


def _scale(expected: torch.Tensor) -> float:
    e = _widen(expected).abs()
    finite = e[e.isfinite()]
    scale = float(finite.max()) if finite.numel() else 0.0
    return max(scale, torch.finfo(torch.float64).tiny)


class _Tracker:
    """Forward hooks naming the module that runs, so canonicalizer decisions can be located."""

    def __init__(self, model: nn.Module) -> None:
        self.names = {
            m: f"{n} ({type(m).__name__})" if n else type(m).__name__
            for n, m in model.named_modules()
        }
        self.stack: list[tuple[nn.Module, int]] = []
        self.recorder: CanonicalizationRecorder | None = None
        self.handles: list[Any] = []
        for m in model.modules():
            self.handles.append(m.register_forward_pre_hook(self._pre))
            self.handles.append(m.register_forward_hook(self._post))

    def locate(self) -> str | None:
        return self.names.get(self.stack[-1][0]) if self.stack else None

    def _count(self) -> int:
        return len(self.recorder.events) if self.recorder is not None else 0

    def _pre(self, module: nn.Module, _args: Any) -> None:
        self.stack.append((module, self._count()))

    def _post(self, module: nn.Module, _args: Any, out: Any) -> None:
        start = self._count()
        while self.stack:
            m, start = self.stack.pop()
            if m is module:
                break
        if isinstance(out, Canonicalized) and self.recorder is not None and self._count() == start:
            # a canonicalizer that decides without argmax_with_margin: read its margins
            margin = out.margin.detach().to("cpu", torch.float64).reshape(-1)
            non_finite = margin.isnan()
            self.recorder.events.append(
                CanonicalizationEvent(
                    self.names.get(module), 0, margin, (margin == 0) & ~non_finite, non_finite
                )
            )

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


def _flagged(events: list[CanonicalizationEvent], batch: int) -> dict[int, tuple[str, str]]:
    """``{model sample: (where, "tie" | "non-finite")}`` from canonicalizer events.

    A canonicalizer batch that is a multiple of the model's batch (windows, heads) is
    read batch-major; any other size flags every sample.
    """
    out: dict[int, tuple[str, str]] = {}
    for e in events:
        for kind, mask in (("non-finite", e.non_finite), ("tie", e.tied)):
            if not bool(mask.any()):
                continue
            where = e.where or "canonicalizer"
            if e.batch == batch:
                samples = [int(i) for i in mask.nonzero().flatten()]
            elif batch > 0 and e.batch % batch == 0:
                per = e.batch // batch
                samples = sorted({int(i) // per for i in mask.nonzero().flatten()})
            else:
                samples = list(range(batch))
            for b in samples:
                out.setdefault(b, (where, kind))
    return out


# ---------------------------------------------------------------------------- verify
def verify(
    model: nn.Module,
    x: torch.Tensor,
    group: Group | str,
    elements: Iterable[Any] | None = None,
    input_type: FieldType | None = None,
    output_type: FieldType | Mapping[str, FieldType] | None = None,
    output_group: Group | None = None,
    up_to_frame: bool | None = None,
    dtype: torch.dtype = torch.float64,
    tolerance: float | None = None,
    certificate: Certificate | None = None,
    budget_s: float | None = None,
) -> DetailedVerificationReport:
    """Measure equivariance numerically: ``‖f(g·x) − g·f(x)‖ / ‖g·f(x)‖`` per element and output.

    A copy of the model runs in ``dtype`` (float64 by default) in ``eval`` mode; group
    actions are exact permutations. **Every tensor leaf** of the output pytree (tuples,
    lists, dicts, named tuples, [`Canonicalized`][groupattn.canonical.Canonicalized]) is compared,
    each moved by its own field type, taken in turn from: the arguments; the
    certificate's per-output types (``certificate.outputs``, when the certificate has
    them); the model's own contract (the main output); the certificate's output type
    (the main output); [`certify`][groupattn.check.certify] run here; or a guess from the shapes. Leaves left
    in a canonicalizer's frame are compared up to their frame, sample by sample; the
    frame and margin leaves of a ``Canonicalized`` are not compared.

    Canonicalizer decisions are recorded wherever they happen (also inside modules that
    anchor without returning a ``Canonicalized``, e.g. an anchored
    [`PatchEmbedding`][groupattn.nn.PatchEmbedding]): a tie (margin 0 up to the float64
    rounding of the scores) makes the frame ambiguous, a near-tie at risk (a margin within
    a few roundings of the precision in use, on values that upstream layers did not move
    exactly with ``g``; see [`near_ties_between`][groupattn.canonical.near_ties_between])
    makes it fragile, and
    NaN/inf scores make it meaningless, so those samples — and
    samples whose input is not finite — are *excused*: reported, and left out of
    [`DetailedVerificationReport.refuted`][groupattn.check.DetailedVerificationReport.refuted].

    Parameters
    ----------
    model, x, group
        The network, an input batch ``(B, ...)`` and the acting group (or its name).
    elements
        Elements to test. Default: [`groupattn.testing.representative_elements`][groupattn.testing.representative_elements] —
        every element of a group of order ≤ 16, otherwise the generators and 4 seeded
        samples (never enumerating a large group such as S_20).
    input_type
        The input's field type; default: the certificate's, else
        [`default_input_type`][groupattn.check.default_input_type] (a G-set layout must be given).
    output_type
        A field type for every output leaf, or ``{path: field type}`` per leaf.
    output_group
        The group acting on the leaves typed by ``output_type``.
    up_to_frame
        Compare every leaf up to a frame (default: per leaf, from its type's source).
    dtype
        Evaluation dtype.
    tolerance
        Relative tolerance; [`groupattn.testing.default_tolerance`][groupattn.testing.default_tolerance] of ``dtype``.
    certificate
        A certificate of the same model to take the types from.
    budget_s
        Refuse ([`VerificationBudgetError`][groupattn.check.VerificationBudgetError]) when the measured reference forward
        times the number of elements exceeds this many seconds; ``None``: no limit.

    Returns
    -------
    DetailedVerificationReport
    """
    started = time.perf_counter()
    group = _resolve_group(group, x)
    if input_type is not None:
        in_type = input_type
    elif certificate is not None and certificate.input_type is not None:
        in_type = certificate.input_type
    else:
        from ._certify import default_input_type

        in_type = default_input_type(x, group)
    elems = (
        [_as_element(group, g) for g in elements]
        if elements is not None
        else representative_elements(group)
    )
    tol = default_tolerance(dtype) if tolerance is None else tolerance
    batch = int(x.shape[0]) if x.dim() else 1

    work = copy.deepcopy(model).to(dtype)
    work.eval()
    xw = x.detach().to(dtype) if x.is_floating_point() else x.detach()
    non_finite_input: list[int] = []
    if xw.is_floating_point() and xw.dim() >= 1 and xw.numel():
        bad = ~xw.reshape(batch, -1).isfinite().all(dim=1)
        non_finite_input = [int(i) for i in bad.nonzero().flatten()]

    tracker = _Tracker(work)

    def run(inp: torch.Tensor) -> tuple[Any, list[CanonicalizationEvent]]:
        """One forward pass, recording every canonicalizer decision in it (and only those)."""
        tracker.stack.clear()
        with record_canonicalizations(tracker.locate) as recorder, torch.no_grad():
            tracker.recorder = recorder
            try:
                out = work(inp.clone())  # a model may modify its input in place
            finally:
                tracker.recorder = None
        return out, recorder.events

    try:
        t0 = time.perf_counter()
        y, ref_events = run(xw)
        forward_s = time.perf_counter() - t0
        if budget_s is not None and forward_s * len(elems) > budget_s:
            raise VerificationBudgetError(
                f"verify: the check would take about {forward_s * len(elems):.3g} s ({len(elems)} elements x "
                f"{forward_s:.3g} s per forward), over the budget of {budget_s:.3g} s; test fewer elements, "
                f"a smaller input, or raise the budget"
            )
        leaves = _leaves(y)
        plans = _plan_leaves(
            model,
            y,
            leaves,
            xw,
            x,
            group,
            in_type,
            output_type,
            output_group,
            up_to_frame,
            certificate,
        )
        moved_inputs = ((g, in_type.act(group, g, xw)) for g in elems)
        checks, excused, tie_counts, nf_messages, near_messages = _compare(
            run, y, leaves, plans, moved_inputs, group, batch, ref_events, non_finite_input
        )
    finally:
        tracker.remove()

    errors: dict[GroupElement, float] = {}
    for c in checks:
        for g, e in c.errors.items():
            errors[g] = max(errors.get(g, 0.0), e)
    if not errors and not any(c.skipped is None for c in checks):
        reasons = "; ".join(f"{c.label}: {c.skipped}" for c in checks) or "no tensor outputs"
        raise GroupError(
            f"verify: expected the model to return tensors it can compare, got {reasons}"
        )
    ties = [f"{where}: {n} tied sample(s) over all evaluations" for where, n in tie_counts.items()]
    ties += near_messages + nf_messages
    non_finite = list(nf_messages)
    if non_finite_input:
        non_finite.insert(
            0,
            f"the input contains NaN/inf in sample(s) {non_finite_input}: those samples are not compared",
        )
    return DetailedVerificationReport(
        errors,
        tol,
        dtype,
        any(c.up_to_frame for c in checks if c.skipped is None),
        ties,
        "; ".join(f"{c.label}: {c.description}" for c in checks if c.skipped is None),
        outputs=checks,
        excused=excused,
        non_finite=non_finite,
        seconds=time.perf_counter() - started,
    )


def _plan_leaves(
    model: nn.Module,
    y: Any,
    leaves: list[tuple[str, Any, bool]],
    x: torch.Tensor,
    original_x: torch.Tensor,
    group: Group,
    in_type: FieldType,
    output_type: FieldType | Mapping[str, FieldType] | None,
    output_group: Group | None,
    up_to_frame: bool | None,
    certificate: Certificate | None,
) -> list[_LeafPlan]:
    plans = [_LeafPlan(path, i) for i, (path, _, _) in enumerate(leaves)]
    for plan, (_, leaf, aux) in zip(plans, leaves):
        if not isinstance(leaf, torch.Tensor):
            plan.skipped = f"not a tensor ({type(leaf).__name__})"
        elif aux:
            plan.skipped = "a canonicalizer's frame or margin"
    todo = [p for p in plans if p.skipped is None]

    # 1. the arguments
    if output_type is not None:
        for p in todo:
            given = output_type.get(p.path) if isinstance(output_type, Mapping) else output_type
            if given is not None:
                p.field_type, p.output_group, p.source = given, output_group, "argument"
                p.up_to_frame = bool(up_to_frame)
    # 2. the certificate's per-output types
    entries = getattr(certificate, "outputs", None) if certificate is not None else None
    if entries:
        by_path = {_normal_path(getattr(e, "path", None)): e for e in entries}
        for p in todo:
            if p.field_type is not None:
                continue
            entry = by_path.get(p.path)
            if entry is None and len(entries) == len(leaves):
                entry = entries[p.index]
            ft = getattr(entry, "field_type", None) if entry is not None else None
            if isinstance(ft, FieldType):
                p.field_type, p.output_group, p.source = (
                    ft,
                    getattr(entry, "output_group", None),
                    "certificate",
                )
                p.up_to_frame = getattr(entry, "frame", None) is not None
    main = _main_index(y, leaves)
    main_plan = next((p for p in todo if p.index == main), None)
    # 3. the model's own contract, 4. the legacy certificate's single output type
    if main_plan is not None and main_plan.field_type is None:
        declared = None
        if callable(getattr(model, "contract", None)):
            try:
                declared = model.contract(group, in_type)  # type: ignore[operator]
            except (GroupError, ValueError):
                declared = None
            if declared is not None and declared.kind in (Status.BROKEN, Status.UNVERIFIED):
                declared = None
        if declared is not None and isinstance(declared.output_type, FieldType):
            main_plan.field_type, main_plan.output_group = (
                declared.output_type,
                declared.output_group,
            )
            main_plan.up_to_frame, main_plan.source = (
                declared.kind == Status.CANONICALIZING,
                "contract",
            )
        elif certificate is not None and not entries and certificate.output_type is not None:
            main_plan.field_type, main_plan.output_group = (
                certificate.output_type,
                certificate.output_group,
            )
            main_plan.up_to_frame, main_plan.source = (
                certificate.output_frame is not None,
                "certificate",
            )
    # 5. certify here, when nothing above describes some output
    if certificate is None and any(p.field_type is None for p in todo):
        from ._certify import certify

        try:
            cert = certify(model, original_x, group, in_type)
        except Exception:
            cert = None
        if cert is not None:
            return _plan_leaves(
                model,
                y,
                leaves,
                x,
                original_x,
                group,
                in_type,
                output_type,
                output_group,
                up_to_frame,
                cert,
            )
    # 6. a guess from the shapes
    for p in todo:
        if p.field_type is None:
            try:
                p.field_type, p.output_group = _guess_output(leaves[p.index][1], x, in_type, group)
                p.source = "guess"
            except GroupError as err:
                p.skipped = str(err).removeprefix("verify: ")
        if up_to_frame is not None and p.skipped is None:
            p.up_to_frame = bool(up_to_frame)
    return plans


def _compare(
    run: Callable[[torch.Tensor], tuple[Any, list[CanonicalizationEvent]]],
    y: Any,
    leaves: list[tuple[str, Any, bool]],
    plans: list[_LeafPlan],
    moved_inputs: Iterator[tuple[GroupElement, torch.Tensor]],
    group: Group,
    batch: int,
    ref_events: list[CanonicalizationEvent],
    non_finite_input: list[int],
) -> tuple[list[OutputCheck], dict[int, str], dict[str, int], list[str], list[str]]:
    checks = [OutputCheck(p.path, skipped=p.skipped) for p in plans]
    fields: dict[int, FieldType] = {}
    candidates: dict[int, list[torch.Tensor]] = {}
    for p, c in zip(plans, checks):
        if p.skipped is not None:
            continue
        assert p.field_type is not None
        base = p.field_type
        target = p.output_group
        ys = _widen(leaves[p.index][1])
        c.description = base.describe() + (
            f" under {target.name}" if target is not None and target != group else ""
        )
        c.source, c.up_to_frame = p.source, p.up_to_frame
        try:
            if p.up_to_frame:
                frame_group = target or group
                order = _cheap_order(frame_group)
                if not isinstance(frame_group, FiniteGroup) or order is None:
                    raise GroupError(
                        f"comparing up to a frame needs a finite group of order <= {ENUMERATION_LIMIT}, "
                        f"got {frame_group.name}"
                    )
                candidates[p.index] = [base.act(frame_group, h, ys) for h in frame_group.elements()]
            else:
                fields[p.index] = (
                    _OnGroup(base, target) if target is not None and target != group else base
                )
                fields[p.index].act(group, group.identity(), ys)
        except (
            GroupError,
            ValueError,
            TypeError,
            IndexError,
            RuntimeError,
            NotImplementedError,
        ) as err:
            c.skipped = f"cannot move it as {c.description}: {err}"

    excused: dict[int, str] = {b: "the input contains NaN/inf" for b in non_finite_input}
    tie_counts: dict[str, int] = {}
    near_counts: dict[str, int] = {}
    nf_counts: dict[str, int] = {}

    def note(events: list[CanonicalizationEvent]) -> dict[int, tuple[str, str]]:
        for e in events:
            where = e.where or "canonicalizer"
            if e.num_tied:
                tie_counts[where] = tie_counts.get(where, 0) + e.num_tied
            if e.num_non_finite:
                nf_counts[where] = nf_counts.get(where, 0) + e.num_non_finite
        return _flagged(events, batch)

    def why(flag: tuple[str, str]) -> str:
        where, kind = flag
        if kind == "tie":
            return f"canonicalizer tie in {where}"
        return f"non-finite scores in {where}"

    ref_flags = note(ref_events)
    for b, flag in ref_flags.items():
        excused.setdefault(b, why(flag) + " (on the input)")
    for g, gx in moved_inputs:
        y_g, events = run(gx)
        flags = note(events)
        for b, flag in flags.items():
            excused.setdefault(b, why(flag) + f" (on {g!r}·input)")
        near = _near_ties(ref_events, events, batch, near_counts)
        for b, where in near.items():
            excused.setdefault(b, f"canonicalizer near-tie in {where} (on {g!r}·input)")
        bad = set(ref_flags) | set(flags) | set(near) | set(non_finite_input)
        leaves_g = _leaves(y_g)
        for p, c in zip(plans, checks):
            if c.skipped is not None:
                continue
            expected_shape = tuple(leaves[p.index][1].shape)
            actual = leaves_g[p.index][1] if p.index < len(leaves_g) else None
            if not isinstance(actual, torch.Tensor) or tuple(actual.shape) != expected_shape:
                per_sample = torch.full((batch,), math.inf, dtype=torch.float64)
            elif p.up_to_frame:
                per_sample = _frame_errors(actual, candidates[p.index], batch)
            else:
                ys = _widen(leaves[p.index][1])
                expected = fields[p.index].act(group, g, ys)
                per_sample = _diff_per_sample(actual, expected, batch) / _scale(expected)
            errs = per_sample.tolist()
            c.errors[g] = max(errs)
            if len(errs) == batch:
                clean = [e for b, e in enumerate(errs) if b not in bad]
            else:
                clean = [] if bad else errs
            if clean:
                c.clean_errors[g] = max(clean)

    messages = []
    for where, n in nf_counts.items():
        cause = "the input contains NaN/inf" if non_finite_input else "NaN inside the network"
        messages.append(f"{where}: non-finite scores: {cause} ({n} sample(s) over all evaluations)")
    near_messages = [
        f"{where}: {n} near-tied sample(s) over all evaluations (margin within {NEAR_TIE_ULPS:g} roundings of "
        "the precision in use, on values that upstream layers did not move exactly)"
        for where, n in near_counts.items()
    ]
    return checks, excused, tie_counts, messages, near_messages


def _near_ties(
    reference: list[CanonicalizationEvent],
    moved: list[CanonicalizationEvent],
    batch: int,
    counts: dict[str, int],
) -> dict[int, str]:
    """``{model sample: where}`` of the near-ties at risk on a moved input (see ``near_ties_between``).

    The events of the two runs are paired in call order; when the runs made different
    calls (data-dependent control flow) nothing is paired and nothing is excused.
    """
    if len(reference) != len(moved):
        return {}
    out: dict[int, str] = {}
    for ref, ev in zip(reference, moved):
        samples = batch if batch > 0 and ev.batch != batch and ev.batch % batch == 0 else None
        risk = near_ties_between(ref, ev, samples)
        if not bool(risk.any()):
            continue
        where = ev.where or "canonicalizer"
        counts[where] = counts.get(where, 0) + int(risk.sum())
        flagged = CanonicalizationEvent(
            where, ev.candidates, ev.margin, risk, torch.zeros_like(risk)
        )
        for b in _flagged([flagged], batch):
            out.setdefault(b, where)
    return out


def _frame_errors(actual: torch.Tensor, candidates: list[torch.Tensor], batch: int) -> torch.Tensor:
    """Per sample: the smallest relative error over the candidate frames."""
    a = _widen(actual)
    if a.dim() == 0 or a.shape[0] != batch:
        return torch.tensor(
            [min(float(_diff_per_sample(a, c, 1).max()) / _scale(c) for c in candidates)],
            dtype=torch.float64,
        )
    out = torch.full((batch,), math.inf, dtype=torch.float64)
    for c in candidates:
        scales = torch.tensor([_scale(c[b]) for b in range(batch)], dtype=torch.float64)
        out = torch.minimum(out, _diff_per_sample(a, c, batch) / scales)
    return out


# ---------------------------------------------------------------------------- cost
def estimate_verification(
    model: nn.Module,
    x: torch.Tensor,
    group: Group,
    elements: Iterable[Any] | None = None,
    dtype: torch.dtype = torch.float64,
) -> VerificationCost:
    """Estimate what [`verify`][groupattn.check.verify] will cost, from one forward pass in the model's own dtype.

    The number of elements comes from [`representative_elements`][groupattn.testing.representative_elements]
    (never enumerating a large group); a float64 forward is taken as
    ``FLOAT64_FACTOR`` times slower than a float32 one.
    """
    count = len(list(elements)) if elements is not None else len(representative_elements(group))
    with _evaluation(model), torch.no_grad():
        t0 = time.perf_counter()
        model(x)
        forward_s = time.perf_counter() - t0
    if dtype == torch.float64 and x.dtype != torch.float64:
        forward_s *= FLOAT64_FACTOR
    return VerificationCost(count, forward_s, (count + 1) * forward_s)


# ---------------------------------------------------------------------------- certificate
def attach_verification(
    cert: Certificate,
    model: nn.Module,
    x: torch.Tensor,
    elements: Iterable[Any] | None,
    *,
    budget_s: float | None = None,
) -> Certificate:
    """Run [`verify`][groupattn.check.verify] for ``cert`` and fold the result into it (in place; returned).

    - Certified, and some sample without a tie or non-finite value is off by more than
      the tolerance: the checker is refuted. The verdict becomes ``UNVERIFIED`` (so
      ``cert.certified`` is False) and the disagreement is listed.
    - Certified, and only excused samples fail: not a disagreement (a note says so).
    - Broken, and no error shows: a note (the checker is conservative, or the input is too
      symmetric).
    - The check cannot run (no way to move an output, a group it cannot act with): a note.

    Raises
    ------
    VerificationBudgetError
        When ``budget_s`` is given and the check would exceed it.
    """
    try:
        try:
            report = verify(model, x, cert.group, elements, certificate=cert, budget_s=budget_s)
        except VerificationBudgetError:
            raise
        except Exception as first:
            # a model that cannot run in float64 (escnn's float32-only modules): its own dtype
            from ._checker import _DTYPE_PROBE_TOLERANCE

            if x.dtype not in _DTYPE_PROBE_TOLERANCE:
                raise
            report = verify(
                model,
                x,
                cert.group,
                elements,
                certificate=cert,
                budget_s=budget_s,
                dtype=x.dtype,
                tolerance=_DTYPE_PROBE_TOLERANCE[x.dtype],
            )
            cert.notes.append(
                f"the numerical check ran in {x.dtype}: the model cannot run in float64 "
                f"({type(first).__name__})"
            )
    except VerificationBudgetError:
        raise
    except Exception as err:  # a model that fails in float64 must not turn a verdict into a crash
        if cert.certified:  # soundness first: a certificate the check cannot confirm is withdrawn
            was = cert.verdict.value
            cert.verdict = Status.UNVERIFIED
            cert.reason = (
                f"the numerical check asked for (verify=True) could not run ({type(err).__name__}: {err}), "
                f"so the certificate ({was}) is not confirmed"
            )
            cert.output_type = None
            return cert
        cert.notes.append(f"the numerical check could not run: {type(err).__name__}: {err}")
        return cert
    cert.verification = report
    for o in report.outputs:
        if o.skipped is not None and not o.skipped.startswith(
            ("not a tensor", "a canonicalizer's")
        ):
            cert.notes.append(f"the numerical check did not compare {o.label}: {o.skipped}")
    if report.non_finite:
        cert.notes.extend(f"numerical check: {m}" for m in report.non_finite)
    if cert.certified:
        if report.refuted:
            worst = report.worst(clean=True)
            assert worst is not None
            leaf, g = worst
            was = cert.verdict.value
            cert.disagreements.append(
                f"defect of the checker: certified {was}, but the numerical check finds a relative error "
                f"{leaf.clean_errors[g]:.3e} > {report.tolerance:.1e} at {g!r} on {leaf.label} "
                f"(moved as {leaf.description})"
            )
            cert.verdict = Status.UNVERIFIED
            cert.reason = cert.reason or (
                f"the numerical check refutes the certificate ({was}) on {leaf.label}"
            )
        elif not report.equivariant:
            cert.notes.append(
                "the numerical check fails only on samples with a canonicalizer tie or non-finite values "
                f"({', '.join(f'{b}: {w}' for b, w in sorted(report.excused.items()))}): not a disagreement"
            )
        elif not report.conclusive:
            cert.notes.append(
                "the numerical check is inconclusive: every sample has a canonicalizer tie or non-finite values"
            )
    elif cert.verdict == Status.BROKEN and report.equivariant and report.conclusive:
        cert.notes.append(
            f"the checker reports a break at {cert.first_break.node if cert.first_break else '?'}, but this input "
            f"shows no error above {report.tolerance:.1e} (the checker is conservative, or the input is too symmetric)"
        )
    return cert
