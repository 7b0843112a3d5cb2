"""What the checker knows about each value of an exported graph.

The checker's claim about a tensor ``y`` computed from the input ``x`` is, for every
generator ``g`` of the group acting in ``y``'s frame::

    y(g · x).flatten() == y(x).flatten()[moves[g]]        for every input x

``moves[g]`` is a long tensor (a *gather map*) with one entry per element of ``y``.
For the network's input it is read off the input field type's action on an ``arange``
tensor; every rule derives the maps of its outputs from the maps of its inputs and
raises ``Breaks`` or ``Unverifiable`` when no map exists or when it cannot
tell. Because each claim holds for every input, claims compose along the graph, and
a claim for the generators is a claim for the whole group.

Values that do not depend on the input (parameters, buffers, constants) are
``Constant``: they are evaluated twice, with two independent random draws of
every floating-point parameter, so two entries count as equal only when they are equal
as functions of the parameters (not merely at their current values).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from ..groups import Group, GroupElement

__all__ = ["Breaks", "Constant", "Frame", "FrameValue", "Moving", "SampleGenerator", "Unverifiable"]


class Breaks(Exception):
    """Raised by a rule when an operation definitely breaks equivariance; the message says why."""


class Unverifiable(Exception):
    """Raised by a rule when the checker cannot tell; the message says why."""


@dataclass(frozen=True)
class SampleGenerator:
    """A generator that moves one sample of the batch and leaves the others in place.

    A canonicalizer chooses its group element per sample, so the claims made in its
    frame must hold when each sample moves on its own: the frame's generators are
    ``(element, sample)`` for every generator of its group and every sample. An
    operation that mixes samples then fails the rules, as it should.
    """

    element: GroupElement
    sample: int

    @property
    def value(self) -> Any:
        return self.element.value


def restrict_to_sample(m: torch.Tensor, shape: tuple[int, ...], sample: int) -> torch.Tensor:
    """The map ``m`` on the entries of batch index ``sample``, the identity elsewhere."""
    n = m.numel()
    per = n // max(int(shape[0]), 1) if shape else n
    out = torch.arange(n)
    out[sample * per : (sample + 1) * per] = m[sample * per : (sample + 1) * per]
    return out


@dataclass(eq=False)
class Frame:
    """The frame of a tensor: which group moves it, through which generators.

    The input is in the *input frame* (``tag == ""``): the acting group and its
    generators. A canonicalizer opens a new frame: its output moves by a data-dependent
    element of ``group`` (the canonicalizer's declared output group), so later claims
    are made for every generator of that group.

    Attributes
    ----------
    tag
        ``""`` for the input frame, ``"F1"``, ``"F2"``, … for canonicalizer frames.
    group
        The group whose generators the claims are made for.
    generators
        ``group.generators()`` in the input frame; ``SampleGenerator`` s (every
        generator for every sample) in a canonicalizer's frame. Each ``Moving``
        holds one gather map per entry.
    node
        The canonicalizer's node ("" for the input frame).
    parent
        The frame of the canonicalizer's input.
    """

    tag: str
    group: Group
    generators: list[Any]
    node: str = ""
    parent: Frame | None = None

    def describe(self) -> str:
        """``"the input frame"`` or ``"frame F1 (chosen by anchor)"``."""
        return "the input frame" if not self.tag else f"frame {self.tag} (chosen by {self.node})"


@dataclass(eq=False)
class Moving:
    """A tensor that depends on the input.

    Attributes
    ----------
    shape, dtype
        Its concrete shape and dtype.
    frame
        The frame its claims are made in.
    moves
        One gather map per generator of ``frame``; ``None`` means *invariant* (the
        identity for every element, in any frame).
    elements
        Optional: for each generator, an element of ``nominal_group`` whose action (by
        the field type the checker recognised) equals the map; used to apply declared
        contracts.
    nominal_group
        The group whose elements ``elements`` are.
    """

    shape: tuple[int, ...]
    dtype: torch.dtype
    frame: Frame
    moves: list[torch.Tensor] | None
    nominal_group: Group | None = None
    elements: list[GroupElement] | None = None
    field_hint: Any = None
    source: Any = None
    classes: torch.Tensor | None = None
    #: Cache of ``_semantics.copy_classes`` (``False``: not computed yet).
    copies: Any = field(default=False, repr=False)

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= int(s)
        return n

    @property
    def invariant(self) -> bool:
        """Whether every generator acts as the identity on this tensor."""
        return self.moves is None

    def normalised(self) -> Moving:
        """The same value with identity maps replaced by ``None`` (invariant)."""
        if self.moves is not None and all(_is_identity(m) for m in self.moves):
            return Moving(
                self.shape,
                self.dtype,
                self.frame,
                None,
                self.nominal_group,
                self.elements,
                self.field_hint,
                self.source,
            )
        return self

    def maps(self) -> list[torch.Tensor]:
        """The gather maps, identity maps spelled out for an invariant tensor."""
        if self.moves is not None:
            return self.moves
        ident = torch.arange(self.numel)
        return [ident for _ in self.frame.generators]

    def describe(self) -> str:
        text = "(" + ", ".join(str(s) for s in self.shape) + ")"
        text += " invariant" if self.invariant else " moving"
        if self.frame.tag and not self.invariant:
            text += f" in {self.frame.tag}"
        return text


@dataclass(eq=False)
class Constant:
    """A value that does not depend on the input, under two random parameter draws.

    Attributes
    ----------
    first, second
        The value under each random draw (tensors, or plain Python values).
    third
        The value at the model's current parameter values (``None``: the same as
        ``first``, for values that do not depend on parameters). Two entries are equal
        only when they are equal in all three evaluations, so a function of the
        parameters that is constant on the draws but not at the current weights
        (``p == 0`` at ``p = 0``) is not taken for a constant.
    exact
        ``True`` when the value was computed by elementwise operations and copies only
        (equal inputs give bit-for-bit equal outputs): entries are then compared
        exactly. Sums and products taken in different orders round differently, so the
        values of reductions and contractions are compared to about 30 significant bits.
    """

    first: Any
    second: Any
    third: Any = None
    exact: bool = True

    @property
    def current(self) -> Any:
        """The value at the model's current parameters (``first`` when it has none of its own)."""
        return self.first if self.third is None else self.third

    @property
    def structural(self) -> bool:
        """Whether every evaluation agrees exactly (the value does not depend on parameters)."""
        return _same(self.first, self.second) and (
            self.third is None or _same(self.first, self.third)
        )

    def describe(self) -> str:
        if isinstance(self.first, torch.Tensor):
            return "(" + ", ".join(str(s) for s in self.first.shape) + ") constant"
        text = repr(self.first)
        return text if len(text) < 30 else text[:27] + "..."


@dataclass(eq=False)
class FrameValue:
    """The frame output of a canonicalizer (data that must not be used as a tensor)."""

    frame: Frame
    shape: tuple[int, ...] = field(default=())

    def describe(self) -> str:
        return f"frame {self.frame.tag}"


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(a, b))
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    try:
        return bool(a == b)
    except Exception:  # pragma: no cover - exotic values
        return a is b


def _is_identity(m: torch.Tensor) -> bool:
    return bool(torch.equal(m, torch.arange(m.numel())))
