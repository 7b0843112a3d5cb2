"""Numerical equivariance checks with group actions applied in float64."""

from __future__ import annotations

import random
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch

from ..actions import FieldType
from ..contracts import Contract, Status, contract_of
from ..groups import FiniteGroup, Group, GroupElement, GroupError

__all__ = [
    "ENUMERATION_LIMIT",
    "EquivarianceReport",
    "assert_equivariant",
    "default_tolerance",
    "equivariance_error",
    "relative_error",
    "representative_elements",
    "sample_elements",
]


#: Finite groups up to this order may be enumerated by the testing helpers; larger ones
#: (S_20, the automorphisms of a large graph, p4 on a big torus) never are.
ENUMERATION_LIMIT = 1024

_ORDER_CACHE: dict[int, tuple[weakref.ref[Group], int | None, int]] = {}


def _cheap_order(group: Group, limit: int = ENUMERATION_LIMIT) -> int | None:
    """The order of a finite group if it is at most ``limit``; ``None`` for larger or infinite groups.

    Never lists a large group and never asks it for its order (which may mean
    Schreier–Sims, or listing): it uses an enumeration the group already holds, or else
    closes the generators under composition (``_compose`` on raw values, so any
    [`FiniteGroup`][groupattn.groups.FiniteGroup] subclass works), stopping after ``limit`` elements. Results are
    cached per group object.
    """
    if not group.is_finite:
        return None
    cached = _ORDER_CACHE.get(id(group))
    if (
        cached is not None
        and cached[0]() is group
        and (cached[1] is not None or cached[2] >= limit)
    ):
        order = cached[1]
    else:
        values = getattr(group, "_elements_cache", None)
        order = len(values) if values is not None else _closure_size(group, limit)
        try:
            ref = weakref.ref(group)
        except TypeError:  # pragma: no cover - a group class with __slots__
            ref = None
        if ref is not None:
            if cached is None:
                weakref.finalize(group, _ORDER_CACHE.pop, id(group), None)
            _ORDER_CACHE[id(group)] = (ref, order, limit)
    return order if order is not None and order <= limit else None


def _closure_size(group: Group, limit: int) -> int | None:
    """Size of the closure of the generators, or ``None`` once it exceeds ``limit``."""
    gens = [g.value for g in group.generators()]
    seen = {group._identity()}
    frontier = list(seen)
    while frontier:
        nxt = []
        for v in frontier:
            for g in gens:
                w = group._compose(g, v)
                if w not in seen:
                    seen.add(w)
                    nxt.append(w)
                    if len(seen) > limit:
                        return None
        frontier = nxt
    return len(seen)


def _enumerating_sampler(group: Group) -> bool:
    """Whether ``group.sample`` would list every element first (the [`FiniteGroup`][groupattn.groups.FiniteGroup] default)."""
    return type(group).sample is Group.sample and type(group)._sample is FiniteGroup._sample


def sample_elements(group: Group, n: int, seed: int = 0) -> list[GroupElement]:
    """``n`` seeded elements of ``group``, never enumerating a large finite group.

    ``group.sample(n, seed=seed)`` when the group samples without listing its elements
    (infinite groups, groups with their own sampler such as Schreier–Sims for
    permutation groups) or is small (order ≤ ``ENUMERATION_LIMIT``); otherwise
    random products of the generators by product replacement (seeded; close to uniform
    after the warm-up, and every element is reachable).
    """
    if not group.is_finite or not _enumerating_sampler(group) or _cheap_order(group) is not None:
        return group.sample(n, seed=seed)
    return _product_replacement(group, n, seed)


def _product_replacement(group: Group, n: int, seed: int, warmup: int = 60) -> list[GroupElement]:
    rng = random.Random(seed)
    gens = [g.value for g in group.generators()] or [group._identity()]
    state = [gens[i % len(gens)] for i in range(max(10, len(gens)))]
    accumulator = group._identity()

    def step() -> Any:
        nonlocal accumulator
        i, j = rng.sample(range(len(state)), 2)
        other = state[j] if rng.random() < 0.5 else group._inverse(state[j])
        state[i] = (
            group._compose(state[i], other)
            if rng.random() < 0.5
            else group._compose(other, state[i])
        )
        accumulator = group._compose(accumulator, state[i])
        return accumulator

    for _ in range(warmup):
        step()
    out = []
    for _ in range(n):
        for _ in range(3):
            value = step()
        out.append(GroupElement(group, value))
    return out


def representative_elements(
    group: Group, max_all: int = 16, samples: int = 4, seed: int = 0
) -> list[GroupElement]:
    """Elements worth testing: all of a finite group of order ≤ ``max_all`` (C4, D4, …);
    otherwise the generators followed by ``samples`` seeded samples
    (``sample_elements``), without repeats.

    Deciding "order ≤ ``max_all``" costs at most ``max_all`` compositions of generators
    (see ``_cheap_order``): a large group (S_20, the automorphisms of a 100-node
    graph) is never enumerated, and its order is never computed.
    """
    order = _cheap_order(group, max(max_all, 1))
    if order is not None and order <= max_all:
        return list(group.elements())  # type: ignore[attr-defined]
    chosen: list[GroupElement] = []
    for g in [*group.generators(), *sample_elements(group, samples, seed=seed)]:
        if g not in chosen:
            chosen.append(g)
    return chosen


def default_tolerance(dtype: torch.dtype) -> float:
    """DESIGN.md's relative tolerance: 1e-5 for float32 (and lower), 1e-10 for float64."""
    return 1e-10 if dtype == torch.float64 else 1e-5


def _widen(t: torch.Tensor) -> torch.Tensor:
    """``t`` detached in float64, or complex128 when complex (an imaginary part counts)."""
    return t.detach().to(torch.complex128 if t.is_complex() else torch.float64)


def relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """``max|actual − expected| / max(max|expected|, tiny)`` computed in float64."""
    a, e = _widen(actual), _widen(expected)
    if a.dtype != e.dtype:  # one complex, one real: compare both as complex
        a, e = a.to(torch.complex128), e.to(torch.complex128)
    if a.shape != e.shape:
        raise GroupError(
            f"relative_error: expected equal shapes, got {tuple(a.shape)} and {tuple(e.shape)}"
        )
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
    raise GroupError(
        f"equivariance_error: expected the function to return a tensor, got {type(y).__name__}"
    )


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
    fn: Callable[..., Any],
    group: Group,
    input_type: FieldType | None,
    output_type: FieldType | None,
) -> tuple[FieldType, FieldType, Contract | None]:
    contract: Contract | None = None
    if input_type is None or output_type is None:
        contract = contract_of(fn, group, input_type)
        if contract.kind in (Status.BROKEN, Status.UNVERIFIED) and (
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
        Elements to test; by default all elements of a finite group of order ≤
        ``ENUMERATION_LIMIT``, otherwise 8 seeded samples (``sample_elements``).
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
        up_to_frame = contract is not None and contract.kind == Status.CANONICALIZING
    if elements is None:
        if group.is_finite and _cheap_order(group) is not None:
            elems = group.elements()  # type: ignore[attr-defined]
        else:
            elems = sample_elements(group, 8, seed=0)
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
            frame_group = (
                contract.output_group if contract is not None and contract.output_group else group
            )
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
        As for [`equivariance_error`][groupattn.testing.equivariance_error].
    tolerance
        Relative tolerance; [`default_tolerance`][groupattn.testing.default_tolerance] of ``x.dtype`` by default.
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
