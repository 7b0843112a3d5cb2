"""Numerical equivariance checks with group actions applied in float64."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch

from ..actions import FieldType
from ..contracts import Contract, Kind, contract_of
from ..groups import Group, GroupElement, GroupError

__all__ = [
    "EquivarianceReport",
    "assert_equivariant",
    "default_tolerance",
    "equivariance_error",
    "relative_error",
    "representative_elements",
]


def representative_elements(
    group: Group, max_all: int = 16, samples: int = 4, seed: int = 0
) -> list[GroupElement]:
    """Elements worth testing: all of a finite group of order ≤ ``max_all`` (C4, D4, …);
    otherwise the generators followed by a seeded sample of ``samples`` elements,
    without repeats.
    """
    order = group.order()
    if group.is_finite and order is not None and order <= max_all:
        return list(group.elements())  # type: ignore[attr-defined]
    chosen: list[GroupElement] = []
    for g in [*group.generators(), *group.sample(samples, seed=seed)]:
        if g not in chosen:
            chosen.append(g)
    return chosen


def default_tolerance(dtype: torch.dtype) -> float:
    """DESIGN.md's relative tolerance: 1e-5 for float32 (and lower), 1e-10 for float64."""
    return 1e-10 if dtype == torch.float64 else 1e-5


def relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """``max|actual − expected| / max(max|expected|, tiny)`` computed in float64."""
    a, e = actual.detach().double(), expected.detach().double()
    if a.shape != e.shape:
        raise GroupError(f"relative_error: expected equal shapes, got {tuple(a.shape)} and {tuple(e.shape)}")
    scale = e.abs().max().item() if e.numel() else 0.0
    diff = (a - e).abs().max().item() if e.numel() else 0.0
    return diff / max(scale, torch.finfo(torch.float64).tiny)


def _main_output(y: Any) -> torch.Tensor:
    if isinstance(y, torch.Tensor):
        return y
    if hasattr(y, "output"):
        return y.output
    if isinstance(y, tuple | list) and y and isinstance(y[0], torch.Tensor):
        return y[0]
    raise GroupError(f"equivariance_error: expected the function to return a tensor, got {type(y).__name__}")


@dataclass
class EquivarianceReport:
    """Per-element relative errors of one equivariance measurement.

    Attributes
    ----------
    errors
        ``{element: relative error}`` for every element tested.
    contract
        The contract the types were taken from (``None`` if given explicitly).
    dtype
        The dtype the function was evaluated in.
    """

    errors: dict[GroupElement, float]
    contract: Contract | None
    dtype: torch.dtype

    @property
    def max_error(self) -> float:
        """The largest error over the tested elements."""
        return max(self.errors.values()) if self.errors else 0.0

    @property
    def worst_element(self) -> GroupElement | None:
        """The element with the largest error."""
        return max(self.errors, key=self.errors.__getitem__) if self.errors else None


def _resolve_types(
    fn: Callable[..., Any], group: Group, input_type: FieldType | None, output_type: FieldType | None
) -> tuple[FieldType, FieldType, Contract | None]:
    contract: Contract | None = None
    if input_type is None or output_type is None:
        contract = contract_of(fn, group, input_type)
        if contract.kind in (Kind.BREAKS, Kind.UNKNOWN) and (
            contract.input_type is None or contract.output_type is None
        ):
            raise GroupError(
                f"equivariance_error: expected {type(fn).__name__} to declare input and output field "
                f"types for {group.name} (or pass input_type/output_type), got {contract.describe()}"
            )
        input_type = input_type or contract.input_type  # type: ignore[assignment]
        output_type = output_type or contract.output_type
    if not isinstance(input_type, FieldType) or not isinstance(output_type, FieldType):
        raise GroupError(
            f"equivariance_error: expected single input and output field types, got {input_type!r} -> {output_type!r}"
        )
    return input_type, output_type, contract


def equivariance_error(
    fn: Callable[[torch.Tensor], Any],
    x: torch.Tensor,
    group: Group,
    elements: Iterable[Any] | None = None,
    input_type: FieldType | None = None,
    output_type: FieldType | None = None,
    up_to_frame: bool | None = None,
) -> EquivarianceReport:
    """Measure ``‖f(g·x) − g·f(x)‖`` relative to ``‖g·f(x)‖`` for each group element.

    The input and output field types are taken from ``fn``'s declared contract unless
    given. Group actions are applied in float64 (they are permutations, so moving the
    input is exact); ``fn`` runs in ``x``'s dtype. For a canonicalizing contract (or
    ``up_to_frame=True``) the output is compared with ``g'·f(x)`` for the best
    ``g'`` of the (finite) group acting on the output (the contract's ``output_group``
    if it declares one), chosen per sample (canonicalizers pick a frame per sample):
    equality up to the frame. For an equivariant contract with an ``output_group``, the
    output is moved by the output group's element with the same value (a stride-``s``
    layer maps ``TorusTranslations(h, w, stride=s)`` onto ``TorusTranslations(h, w)``).

    Parameters
    ----------
    fn
        A module or function of one tensor; tuple outputs and objects with ``.output``
        are reduced to their first tensor.
    x
        Input batch of the input type's layout.
    group
        The acting group.
    elements
        Elements to test; all elements of a finite group by default, 8 seeded samples
        of an infinite one.
    input_type, output_type
        Override the contract's types.
    up_to_frame
        Compare up to a data-dependent element; defaults to the contract's kind.

    Returns
    -------
    EquivarianceReport
    """
    in_t, out_t, contract = _resolve_types(fn, group, input_type, output_type)
    if up_to_frame is None:
        up_to_frame = contract is not None and contract.kind == Kind.CANONICALIZING
    if elements is None:
        elems = group.elements() if group.is_finite else group.sample(8, seed=0)  # type: ignore[attr-defined]
    else:
        elems = [group.element(g) for g in elements]
    out_group = contract.output_group if contract is not None and contract.output_group else group
    x64 = x.detach().double()
    with torch.no_grad():
        y = _main_output(fn(x)).detach().double()
        frames: list[torch.Tensor] = []
        if up_to_frame:
            # The frame is an element of the group acting on the output (the contract's
            # output_group, e.g. coarse translations after a strided canonicalizer).
            frame_group = contract.output_group if contract is not None and contract.output_group else group
            if not frame_group.is_finite:
                raise GroupError(
                    f"equivariance_error: expected a finite group to compare up to frame, got {frame_group.name}"
                )
            frames = [out_t.act(frame_group, h, y) for h in frame_group.elements()]  # type: ignore[attr-defined]
        errors: dict[GroupElement, float] = {}
        for g in elems:
            gx = in_t.act(group, g, x64).to(x.dtype)
            y_g = _main_output(fn(gx)).detach().double()
            if up_to_frame:
                # Canonicalizers choose a frame per sample: take the best frame per sample.
                errors[g] = max(
                    min(relative_error(y_g[b : b + 1], f[b : b + 1]) for f in frames)
                    for b in range(y_g.shape[0])
                )
            elif out_group is group:
                errors[g] = relative_error(y_g, out_t.act(group, g, y))
            else:
                # An output group corresponds to the acting group element by element value
                # (e.g. a stride-s layer: T(h, w, stride=s) on the image -> T(h, w) on the grid).
                errors[g] = relative_error(y_g, out_t.act(out_group, out_group.element(g.value), y))
    return EquivarianceReport(errors, contract, x.dtype)


def assert_equivariant(
    fn: Callable[[torch.Tensor], Any],
    x: torch.Tensor,
    group: Group,
    elements: Iterable[Any] | None = None,
    tolerance: float | None = None,
    exact: bool = False,
    **kwargs: Any,
) -> EquivarianceReport:
    """Assert that ``fn`` is equivariant on ``x`` for every given element.

    Parameters
    ----------
    fn, x, group, elements, kwargs
        As for :func:`equivariance_error`.
    tolerance
        Relative tolerance; :func:`default_tolerance` of ``x.dtype`` by default.
    exact
        Require an error of exactly 0.0 (pure permutations of the same arithmetic).

    Raises
    ------
    AssertionError
        Naming the function, the worst element and its error.
    """
    report = equivariance_error(fn, x, group, elements, **kwargs)
    tol = 0.0 if exact else (default_tolerance(x.dtype) if tolerance is None else tolerance)
    if report.max_error > tol:
        bad = sorted(report.errors.items(), key=lambda kv: -kv[1])
        n_bad = sum(1 for _, e in bad if e > tol)
        name = getattr(fn, "__name__", type(fn).__name__)
        raise AssertionError(
            f"{name} is not equivariant under {group.name} in {x.dtype}: worst element {bad[0][0]!r} "
            f"with relative error {bad[0][1]:.3e} > tolerance {tol:.1e} "
            f"({n_bad} of {len(bad)} elements fail)"
        )
    return report
