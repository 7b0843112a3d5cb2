"""Rules for ATen operations (the canonical, functional operator set of ``torch.export``).

Each rule receives an ``OpCall`` whose arguments are bound to the operator's
schema by name, and returns the output value(s). Every argument is read: after the
rule runs, an argument that was given a non-default value and that the rule did not
read makes the call unverifiable (deny by default). Operators without a rule are
unverifiable; operators tagged pointwise by PyTorch use ``pointwise``.

This module holds the binding machinery (``Args``, ``OpCall``, ``RULES``,
``rule_for``); the rules live in one small module per family —
``_rules_pointwise``, ``_rules_movement``, ``_rules_reductions``,
``_rules_contractions``, ``_rules_windows``, ``_rules_normalization``, ``_rules_misc``
— which register themselves when this module is imported.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from ._values import Constant, FrameValue, Moving, Unverifiable

__all__ = ["RANDOM_OPS_WITH_RULES", "RULES", "OpCall", "Poison", "rule_for"]

IGNORED_ARGS = frozenset({"memory_format", "layout", "device", "pin_memory", "non_blocking"})

#: Operators tagged random whose rule reads the argument that switches the randomness on.
RANDOM_OPS_WITH_RULES = frozenset(
    {
        "aten::dropout",
        "aten::native_dropout",
        "aten::feature_dropout",
        "aten::alpha_dropout",
        "aten::scaled_dot_product_attention",
    }
)


@dataclass(eq=False)
class Poison:
    """An output the checker cannot type (e.g. arg-max positions); using it is unverifiable."""

    reason: str

    def describe(self) -> str:
        return "untracked"


class Args:
    """An operator's arguments bound by schema name; records which were read."""

    def __init__(self, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        schema = target._schema
        self.values: dict[str, Any] = {}
        self.given: set[str] = set()
        self.defaults: dict[str, Any] = {}
        self.read: set[str] = set()
        positional = list(args)
        for i, a in enumerate(schema.arguments):
            if a.has_default_value():
                self.defaults[a.name] = a.default_value
            if i < len(positional) and not a.kwarg_only:
                self.values[a.name] = positional[i]
                self.given.add(a.name)
            elif a.name in kwargs:
                self.values[a.name] = kwargs[a.name]
                self.given.add(a.name)
            elif a.has_default_value():
                self.values[a.name] = a.default_value
            else:
                self.values[a.name] = None

    def __getitem__(self, name: str) -> Any:
        self.read.add(name)
        return self.values[name]

    def get(self, name: str, default: Any = None) -> Any:
        self.read.add(name)
        return self.values.get(name, default)

    def touch(self, *names: str) -> None:
        """Mark arguments as read (their value does not change the rule's claim)."""
        self.read.update(names)

    def touch_all(self) -> None:
        self.read.update(self.values)

    def unread(self) -> list[str]:
        """Given, non-default arguments the rule did not read."""
        out = []
        for name in self.given:
            if name in self.read or name in IGNORED_ARGS:
                continue
            default = self.defaults.get(name, object())
            value = self.values[name]
            try:
                same = value == default
                same = bool(same) if not isinstance(same, torch.Tensor) else False
            except Exception:
                same = False
            if not same:
                out.append(name)
        return out


@dataclass(eq=False)
class OpCall:
    """One operator call: its node name, target, bound arguments and output metadata."""

    name: str
    target: Any
    args: Args
    raw_args: tuple[Any, ...]
    raw_kwargs: dict[str, Any]
    out_meta: Any
    notes: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.name} ({self.target.name()})"

    def out_shape(self, index: int | None = None) -> tuple[int, ...]:
        meta = self.out_meta if index is None else self.out_meta[index]
        return tuple(int(s) for s in meta.shape)

    def out_dtype(self, index: int | None = None) -> torch.dtype:
        meta = self.out_meta if index is None else self.out_meta[index]
        return meta.dtype

    def replay(self, replace: dict[int, Any]) -> Callable[[list[torch.Tensor]], Any]:
        """A function of the data operands that re-runs this exact call.

        ``replace`` maps ``id(value)`` of each data operand to its position in the list
        the function receives; other checker values are replaced by their first draw.
        """

        def fill(v: Any, data: list[torch.Tensor]) -> Any:
            if id(v) in replace and isinstance(v, Moving | Constant):
                return data[replace[id(v)]]
            if isinstance(v, Constant):
                return v.first
            if isinstance(v, list):
                return [fill(x, data) for x in v]
            if isinstance(v, tuple):
                return tuple(fill(x, data) for x in v)
            if isinstance(v, Moving | FrameValue | Poison):
                raise Unverifiable(
                    f"{self.label}: an input-dependent argument is not data of this operation"
                )
            return v

        def run(data: list[torch.Tensor]) -> Any:
            args = fill(self.raw_args, data)
            kwargs = {k: fill(v, data) for k, v in self.raw_kwargs.items()}
            with torch.no_grad():
                return self.target(*args, **kwargs)

        return run


Rule = Callable[[OpCall], Any]
RULES: dict[str, Rule] = {}


def rule(*names: str) -> Callable[[Rule], Rule]:
    def deco(fn: Rule) -> Rule:
        for n in names:
            RULES[n] = fn
        return fn

    return deco


def rule_for(target: Any) -> Rule | None:
    """The rule for an ATen overload: by ``"aten::name.overload"`` (``.default`` for the
    default overload), then by ``"aten::name"``, then by PyTorch's pointwise tag."""
    schema = target._schema
    exact = f"{schema.name}.{schema.overload_name or 'default'}"
    if exact in RULES:
        return RULES[exact]
    if schema.name in RULES:
        return RULES[schema.name]
    tags = getattr(target, "tags", ())
    if torch.Tag.pointwise in tags and torch.Tag.nondeterministic_seeded not in tags:
        from ._rules_pointwise import _pointwise_rule

        return _pointwise_rule
    return None


# ----------------------------------------------------------------------------- helpers


def _tensor_values(v: Any) -> list[Any]:
    if isinstance(v, Moving) or (isinstance(v, Constant) and isinstance(v.first, torch.Tensor)):
        return [v]
    if isinstance(v, list | tuple):
        return [x for item in v for x in _tensor_values(item)]
    return []


def _structural(call: OpCall, v: Any, what: str) -> Any:
    """A non-data tensor argument (indices, masks, shapes): must be a parameter-free constant."""
    if isinstance(v, Moving | FrameValue | Poison):
        raise Unverifiable(
            f"{call.label}: its {what} depends on the input (data-dependent indexing)"
        )
    if isinstance(v, Constant):
        if not v.structural:
            raise Unverifiable(f"{call.label}: its {what} depends on the parameters")
        return v.first
    if isinstance(v, list | tuple):
        return type(v)(_structural(call, x, what) for x in v)
    return v


def _moving_input(call: OpCall, name: str = "self") -> Moving:
    v = call.args[name]
    if not isinstance(v, Moving):
        raise Unverifiable(f"{call.label}: expected an input-dependent tensor as {name!r}")
    return v


def _dims(dim: Any, ndim: int) -> list[int]:
    if dim is None:
        return list(range(ndim))
    if isinstance(dim, int):
        dim = [dim]
    dims = [int(d) % ndim if ndim else 0 for d in dim]
    return dims if dims else list(range(ndim))


# The rule families register themselves in RULES when imported.
from . import (  # noqa: E402, F401  (importing a family registers its rules)
    _rules_contractions,
    _rules_misc,
    _rules_movement,
    _rules_normalization,
    _rules_pointwise,
    _rules_reductions,
    _rules_windows,
)
