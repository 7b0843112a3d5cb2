"""``certify`` (compose declared contracts) and ``verify`` (measure numerically)."""

from __future__ import annotations

import contextlib
import copy
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import networkx as nx
import torch
from torch import nn

from ..actions import FieldType, GridField, InvariantField, LiftedField, TokenField, point_group_of
from ..canonical import Canonicalized
from ..contracts import Kind
from ..groups import (
    FiniteGroup,
    Group,
    GroupElement,
    GroupError,
    TorusTranslations,
    group_from_name,
)
from ..testing import default_tolerance, equivariance_error, relative_error, representative_elements
from ._certificate import BreakInfo, Certificate, Verdict, VerificationReport
from ._engine import propagate
from ._layout import describe_layout, field_from_layout, layout_from_field
from ._symbols import BROKEN, UNKNOWN, TensorSym, Unverifiable

__all__ = ["certify", "default_input_type", "verify"]


def default_input_type(example_input: torch.Tensor, group: Group) -> FieldType:
    """The field type ``certify`` assumes for an input of this shape.

    ``(B, C, H, W)`` → :class:`GridField`; ``(B, C, |H|, H, W)`` → :class:`LiftedField`
    of the group's point group; ``(B, N, C)`` → :class:`TokenField` over a square grid;
    ``(B, C)`` → :class:`InvariantField`.

    Raises
    ------
    GroupError
        For any other rank, or tokens that do not form a square grid.
    """
    shape = tuple(example_input.shape)
    if len(shape) == 4:
        return GridField()
    if len(shape) == 5:
        pg = point_group_of(group)
        if pg is None:
            raise GroupError(f"certify: expected a group with a point group for a lifted input, got {group.name}")
        return LiftedField(pg)
    if len(shape) == 3:
        side = math.isqrt(shape[1])
        if side * side != shape[1]:
            raise GroupError(f"certify: expected a square number of tokens (B, N, C), got N={shape[1]}; pass input_type")
        return TokenField((side, side))
    if len(shape) == 2:
        return InvariantField()
    raise GroupError(f"certify: expected an input of rank 2 to 5, got shape {shape}")


def _resolve_group(group: Group | str, x: torch.Tensor) -> Group:
    """A group name is resolved against the input's grid (a square grid for tokens ``(B, N, C)``)."""
    if not isinstance(group, str):
        return group
    shape = tuple(x.shape)
    if len(shape) == 3:
        side = math.isqrt(shape[1])
        shape = (side, side)
    return group_from_name(group, shape)


@contextlib.contextmanager
def _evaluation(model: nn.Module) -> Iterator[None]:
    modes = {m: m.training for m in model.modules()}
    model.eval()
    try:
        yield
    finally:
        for m, mode in modes.items():
            m.train(mode)


def certify(
    model: nn.Module,
    example_input: torch.Tensor,
    group: Group | str,
    input_type: FieldType | None = None,
    verify: bool = False,
    elements: Iterable[Any] | None = None,
) -> Certificate:
    """Certify a whole network from the declared contracts of its parts.

    The model is traced with torch.fx (modules that declare ``contract`` and known
    PyTorch modules are leaves), run once on ``example_input`` to learn every shape,
    and the input's layout, acting group and frame are propagated through every node.

    Parameters
    ----------
    model
        The network (evaluated in ``eval`` mode; its modes are restored afterwards).
    example_input
        An input batch; its shape fixes the concrete field types and groups.
    group
        The group acting on the input, or a name for :func:`group_from_name`.
    input_type
        The input's field type; see :func:`default_input_type` for the default.
    verify
        Also run :func:`verify` and report any disagreement as a defect of the checker.
    elements
        Elements for the numerical check (see :func:`verify`).

    Returns
    -------
    Certificate
    """
    group = _resolve_group(group, example_input)
    input_type = input_type or default_input_type(example_input, group)
    layout = layout_from_field(input_type, tuple(example_input.shape))
    if layout is None:
        raise GroupError(
            f"certify: expected an input of type {input_type.describe()}, got shape {tuple(example_input.shape)}"
        )
    input_sym = TensorSym(layout=layout, group=group)
    with _evaluation(model):
        try:
            prop = propagate(model, example_input, input_sym)
        except Unverifiable as err:
            cert = Certificate(Verdict.UNVERIFIED, group, input_type, reason=str(err))
            cert.unverified.append((type(model).__name__, str(err)))
            return _with_verification(cert, model, example_input, elements) if verify else cert
    records = [prop.records[n] for n in prop.order if n in prop.records]
    records += [r for n, r in prop.records.items() if n not in set(prop.order)]
    output_node = prop.order[-1]
    relevant = nx.ancestors(prop.graph, output_node) | {output_node}
    out = prop.output
    cert = Certificate(Verdict.UNVERIFIED, group, input_type, records=records, graph=prop.graph, notes=prop.notes)
    cert.unverified = [(r.name, r.reason or "") for r in records if r.status == "unverified"]
    status = getattr(out, "status", UNKNOWN)
    if status == BROKEN:
        cert.verdict = Verdict.BROKEN
        broken = [r for r in records if r.status == "broken" and r.name in relevant] or [
            r for r in records if r.status == "broken"
        ]
        if broken:
            first = broken[0]
            try:
                path = nx.shortest_path(prop.graph, prop.input_node, first.name)
            except (nx.NetworkXNoPath, nx.NodeNotFound):
                path = [first.name]
            cert.first_break = BreakInfo(first.name, first.target, first.reason or "", path)
    elif isinstance(out, TensorSym) and status != UNKNOWN and out.layout is not None:
        cert.output_group = out.group if not out.invariant else None
        if out.invariant:
            cert.verdict = Verdict.INVARIANT
            cert.output_type = InvariantField()
        else:
            cert.verdict = Verdict.EQUIVARIANT
            cert.output_type = field_from_layout(out.layout, out.group)
            if out.frame is not None:
                cert.output_frame = out.frame.describe()
    elif status != UNKNOWN and not isinstance(out, TensorSym):
        cert.reason = "the model's output is not a traced tensor"
    if cert.certified:
        with _evaluation(model), torch.no_grad():
            first, second = model(example_input), model(example_input)
        if not _same_outputs(first, second):
            cert.verdict, cert.output_type, cert.output_group, cert.output_frame = Verdict.BROKEN, None, None, None
            cert.first_break = BreakInfo(
                output_node,
                "output",
                "the model's output differs between two evaluations on the same input: it draws random numbers "
                "(possibly in an expression torch.fx traced as a constant)",
                [prop.input_node, output_node],
            )
    if cert.verdict == Verdict.UNVERIFIED and not cert.reason:
        bad = [r for r in records if r.status == "unverified" and r.name in relevant]
        cert.reason = (
            f"{bad[0].name}: {bad[0].reason}" if bad else f"the output {describe_layout(getattr(out, 'layout', None))} is not tracked"
        )
    if verify:
        cert = _with_verification(cert, model, example_input, elements)
    return cert


def _same_outputs(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.shape == b.shape and bool(torch.equal(a, b) or (a.isnan().any() and torch.equal(a.nan_to_num(), b.nan_to_num())))
    if isinstance(a, tuple | list) and isinstance(b, tuple | list) and len(a) == len(b):
        return all(_same_outputs(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys():
        return all(_same_outputs(a[k], b[k]) for k in a)
    return True


def _with_verification(cert: Certificate, model: nn.Module, x: torch.Tensor, elements: Iterable[Any] | None) -> Certificate:
    try:
        report = verify(model, x, cert.group, elements, certificate=cert)
    except (GroupError, ValueError) as err:
        cert.disagreements.append(f"the numerical check could not run: {err}")
        return cert
    cert.verification = report
    if cert.certified and not report.equivariant and not report.ties:
        cert.disagreements.append(
            f"defect of the checker: certified {cert.verdict.value}, but the numerical check finds a relative error "
            f"{report.max_error:.3e} > {report.tolerance:.1e} at {report.worst_element!r}"
        )
    if cert.verdict == Verdict.BROKEN and report.equivariant:
        cert.disagreements.append(
            f"the checker reports a break at {cert.first_break.node if cert.first_break else '?'}, but this input "
            f"shows no error above {report.tolerance:.1e} (the checker is conservative, or the input is too symmetric)"
        )
    return cert


@dataclass(frozen=True)
class _OnGroup(FieldType):
    """A field type acted on through another group: element values are carried over."""

    inner: FieldType = field(default_factory=GridField)
    target: Group | None = None

    def act(self, group: Group, g: Any, x: torch.Tensor) -> torch.Tensor:
        if self.target is None or self.target == group:
            return self.inner.act(group, g, x)
        value = group.element(g).value
        return self.inner.act(self.target, self.target.element(value), x)

    def check(self, x: torch.Tensor, module: str = "field") -> None:
        self.inner.check(x, module)

    @property
    def is_invariant(self) -> bool:
        return self.inner.is_invariant

    def describe(self) -> str:
        return self.inner.describe() + (f" under {self.target.name}" if self.target is not None else "")


def _main_output(y: Any) -> torch.Tensor:
    if isinstance(y, torch.Tensor):
        return y
    if isinstance(y, Canonicalized):
        return y.output
    if isinstance(y, tuple | list) and y and isinstance(y[0], torch.Tensor):
        return y[0]
    raise GroupError(f"verify: expected the model to return a tensor, got {type(y).__name__}")


def _guess_output(y: torch.Tensor, x: torch.Tensor, in_type: FieldType, group: Group) -> tuple[FieldType, Group | None]:
    if y.dim() <= 2:
        return InvariantField(), None
    if tuple(y.shape) == tuple(x.shape):
        return in_type, None
    if y.dim() == 3 and x.dim() == 4:
        side = math.isqrt(int(y.shape[1]))
        if side * side == int(y.shape[1]):
            coarse = TorusTranslations(side, side) if isinstance(group, TorusTranslations) and side != x.shape[2] else None
            return TokenField((side, side)), coarse
    if y.dim() == 4 and isinstance(group, TorusTranslations):
        return GridField(), TorusTranslations(int(y.shape[2]), int(y.shape[3]))
    if y.dim() == 4:
        return GridField(), None
    raise GroupError(f"verify: cannot infer the output field type of shape {tuple(y.shape)}; pass output_type")


def verify(
    model: nn.Module,
    x: torch.Tensor,
    group: Group | str,
    elements: Iterable[Any] | None = None,
    input_type: FieldType | None = None,
    output_type: FieldType | None = None,
    output_group: Group | None = None,
    up_to_frame: bool | None = None,
    dtype: torch.dtype = torch.float64,
    tolerance: float | None = None,
    certificate: Certificate | None = None,
) -> VerificationReport:
    """Measure equivariance numerically: ``‖f(g·x) − g·f(x)‖ / ‖g·f(x)‖`` per element.

    A copy of the model runs in ``dtype`` (float64 by default) in ``eval`` mode; group
    actions are exact permutations (:func:`groupattn.testing.equivariance_error`). The
    output's field type and group come from the model's own contract, or else from
    :func:`certify`'s propagation (or are guessed from the output's shape). Outputs left
    in a canonicalizer's frame are compared up to their frame, sample by sample, and
    canonicalizer ties (margin exactly 0) are reported.

    Parameters
    ----------
    model, x, group
        The network, an input batch and the acting group (or its name).
    elements
        Elements to test. Default: every element of a group of order ≤ 16, otherwise
        the generators and 4 seeded samples (commuting with the generators implies
        commuting with every element).
    input_type, output_type, output_group, up_to_frame
        Override what the contract or the certificate says.
    dtype
        Evaluation dtype.
    tolerance
        Relative tolerance; :func:`groupattn.testing.default_tolerance` of ``dtype``.
    certificate
        A certificate of the same model to take the types from.

    Returns
    -------
    VerificationReport
    """

    group = _resolve_group(group, x)
    in_type = input_type or (certificate.input_type if certificate is not None else None) or default_input_type(x, group)
    declared = None
    if callable(getattr(model, "contract", None)) and output_type is None:
        try:
            declared = model.contract(group, in_type)  # type: ignore[operator]
        except (GroupError, ValueError):
            declared = None
        if declared is not None and declared.kind in (Kind.BREAKS, Kind.UNKNOWN):
            declared = None
    if output_type is None and declared is not None and isinstance(declared.output_type, FieldType):
        output_type = declared.output_type
        output_group = output_group or declared.output_group
        if up_to_frame is None:
            up_to_frame = declared.kind == Kind.CANONICALIZING
    if output_type is None:
        cert = certificate or certify(model, x, group, in_type)
        if cert.output_type is not None:
            output_type = cert.output_type
            output_group = output_group or cert.output_group
            if up_to_frame is None:
                up_to_frame = cert.output_frame is not None
    work = copy.deepcopy(model).to(dtype)
    work.eval()
    xw = x.detach().to(dtype)
    ties: dict[str, int] = {}

    def hook(module: nn.Module, _inputs: Any, out: Any) -> None:
        if isinstance(out, Canonicalized):
            n = int((out.margin == 0).sum())
            if n:
                key = names.get(module, type(module).__name__)
                ties[key] = ties.get(key, 0) + n

    names = {m: n or type(m).__name__ for n, m in work.named_modules()}
    handles = [m.register_forward_hook(hook) for m in work.modules()]
    try:
        with torch.no_grad():
            y = _main_output(work(xw))
        if output_type is None:
            output_type, guessed_group = _guess_output(y, xw, in_type, group)
            output_group = output_group or guessed_group
        out_field = _OnGroup(output_type, output_group) if output_group is not None and output_group != group else output_type
        elems = [group.element(g) for g in elements] if elements is not None else representative_elements(group)
        tol = default_tolerance(dtype) if tolerance is None else tolerance
        if up_to_frame:
            errors = _errors_up_to_frame(work, xw, group, elems, in_type, out_field, output_group or group)
        else:
            report = equivariance_error(work, xw, group, elems, input_type=in_type, output_type=out_field)
            errors = report.errors
    finally:
        for h in handles:
            h.remove()
    return VerificationReport(
        errors,
        tol,
        dtype,
        bool(up_to_frame),
        [f"{k}: {v} tied sample(s) over all evaluations" for k, v in ties.items()],
        out_field.describe(),
    )


def _errors_up_to_frame(
    model: nn.Module, x: torch.Tensor, group: Group, elems: list[GroupElement], in_type: FieldType, out_field: FieldType, out_group: Group
) -> dict[GroupElement, float]:

    if not isinstance(group, FiniteGroup):
        raise GroupError(f"verify: expected a finite group to compare up to frame, got {group.name}")
    with torch.no_grad():
        y = _main_output(model(x)).double()
        candidates = [out_field.act(group, h, y) for h in group.elements()]
        errors: dict[GroupElement, float] = {}
        for g in elems:
            y_g = _main_output(model(in_type.act(group, g, x.double()).to(x.dtype))).double()
            worst = 0.0
            for b in range(y.shape[0]):
                best = min(relative_error(y_g[b : b + 1], c[b : b + 1]) for c in candidates)
                worst = max(worst, best)
            errors[g] = worst
    return errors
