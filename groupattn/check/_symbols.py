"""Symbolic values the checker propagates: tensors with a layout, group and frame; frames; tuples."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from ..groups import Group
from ._layout import Layout, describe_layout, is_moving

__all__ = ["Breaks", "Frame", "FrameSym", "StaticSym", "Sym", "TensorSym", "TupleSym", "Unverifiable"]

OK, BROKEN, UNKNOWN = "ok", "broken", "unknown"


class Breaks(Exception):
    """Raised by a rule when an operation breaks equivariance; the message is the reason."""


class Unverifiable(Exception):
    """Raised by a rule when the checker cannot tell; the message says why."""


@dataclass(frozen=True)
class Frame:
    """A symbolic frame: the data-dependent group element chosen by a canonicalizer.

    Attributes
    ----------
    tag
        Short name, ``F1``, ``F2``, …
    node
        The canonicalizer's node in the traced graph.
    parent
        The frame of the canonicalizer's input (``None``: the input's own frame).
    group
        The group acting on the canonicalizer's input (restored by un-anchoring).
    """

    tag: str
    node: str
    parent: Frame | None
    group: Group | None = field(compare=False, default=None)
    out_group: Group | None = field(compare=False, default=None)

    def describe(self) -> str:
        return f"frame {self.tag} (chosen by {self.node})"


def describe_frame(frame: Frame | None) -> str:
    """``"the input frame"`` or ``"frame F1 (chosen by anchor)"``."""
    return "the input frame" if frame is None else frame.describe()


@dataclass(frozen=True)
class Sym:
    """Base class of symbolic values; ``status`` is ``ok``, ``broken`` or ``unknown``."""

    status: str = OK

    def with_status(self, status: str) -> Sym:
        return replace(self, status=status)


@dataclass(frozen=True)
class TensorSym(Sym):
    """A tensor: its layout, the group acting on it, its frame and whether it is a constant."""

    layout: Layout | None = None
    group: Group | None = None
    frame: Frame | None = None
    constant: bool = False
    origin: Any = field(default=None, compare=False)

    @property
    def invariant(self) -> bool:
        """Known layout on which the group moves nothing."""
        return self.layout is not None and not is_moving(self.layout, self.group)

    def describe(self) -> str:
        text = describe_layout(self.layout)
        if self.constant:
            text += " const"
        if self.frame is not None and not self.invariant:
            text += f" in {self.frame.tag}"
        return text


@dataclass(frozen=True)
class FrameSym(Sym):
    """The frame output of a canonicalizer."""

    frame: Frame | None = None

    def describe(self) -> str:
        return f"frame {self.frame.tag}" if self.frame else "frame"


@dataclass(frozen=True)
class TupleSym(Sym):
    """A tuple (or named tuple) of symbolic values."""

    items: tuple[Any, ...] = ()
    names: tuple[str, ...] = ()

    def describe(self) -> str:
        return "(" + ", ".join(getattr(i, "describe", lambda: "·")() for i in self.items) + ")"


@dataclass(frozen=True)
class StaticSym(Sym):
    """A Python value the group does not move (shapes, sizes, dtypes, flags)."""

    value: Any = None

    def describe(self) -> str:
        text = repr(self.value)
        return text if len(text) < 30 else text[:27] + "..."
