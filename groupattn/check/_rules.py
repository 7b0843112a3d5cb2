"""The rule tables: how the checker propagates layouts, groups and frames through one call.

A *rule* receives a :class:`Call` (the concrete arguments and output of the call on the
example input, and their symbolic values) and returns the symbolic output, or raises
:class:`~groupattn.check._symbols.Breaks` / :class:`~groupattn.check._symbols.Unverifiable`.
Rules are keyed by module class (subclasses inherit them), by function, or by method name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..groups import Group
from ._symbols import Sym, TensorSym

__all__ = ["Call", "Rule", "function_rule", "method_rule", "module_rule", "rule_for"]


@dataclass
class Call:
    """One call in the traced graph, evaluated on the example input.

    Attributes
    ----------
    name
        The node's name.
    target
        The module, function or method name called.
    module
        The called module (``None`` for functions and methods).
    args, kwargs
        Concrete argument values.
    sargs, skwargs
        Their symbolic values (same structure; non-node arguments are plain values).
    out
        The concrete output.
    """

    name: str
    target: Any
    module: nn.Module | None
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    sargs: tuple[Any, ...]
    skwargs: dict[str, Any]
    out: Any

    def tensor_syms(self) -> list[TensorSym]:
        """Every tensor argument's symbolic value, positional first."""
        found: list[TensorSym] = []

        def walk(v: Any) -> None:
            if isinstance(v, TensorSym):
                found.append(v)
            elif isinstance(v, list | tuple):
                for item in v:
                    walk(item)
            elif isinstance(v, dict):
                for item in v.values():
                    walk(item)

        walk(self.sargs)
        walk(self.skwargs)
        return found

    def arg(self, index: int, name: str, default: Any = None) -> tuple[Any, Any]:
        """``(concrete, symbolic)`` of an argument given by position or keyword."""
        if len(self.args) > index:
            return self.args[index], self.sargs[index]
        if name in self.kwargs:
            return self.kwargs[name], self.skwargs[name]
        return default, default

    @property
    def label(self) -> str:
        """A readable name of the callee, e.g. ``Conv2d`` or ``torch.cat``."""
        if self.module is not None:
            return type(self.module).__name__
        if isinstance(self.target, str):
            return f".{self.target}()"
        mod = getattr(self.target, "__module__", "") or ""
        name = getattr(self.target, "__name__", repr(self.target))
        if mod in ("_operator", "operator"):
            return name
        short = {"torch.nn.functional": "F", "torch._C._nn": "F", "torch._C._VariableFunctions": "torch"}.get(mod, mod)
        return f"{short}.{name}" if short else name

    def group(self) -> Group | None:
        syms = self.tensor_syms()
        return syms[0].group if syms else None


Rule = Callable[[Call], Sym]

_MODULE_RULES: dict[type, Rule] = {}
_FUNCTION_RULES: dict[Any, Rule] = {}
_METHOD_RULES: dict[str, Rule] = {}


def module_rule(*classes: type) -> Callable[[Rule], Rule]:
    """Register a rule for module classes (and their subclasses)."""

    def deco(fn: Rule) -> Rule:
        for cls in classes:
            _MODULE_RULES[cls] = fn
        return fn

    return deco


def function_rule(*functions: Any) -> Callable[[Rule], Rule]:
    """Register a rule for functions (``torch.cat``, ``operator.add``, …)."""

    def deco(fn: Rule) -> Rule:
        for f in functions:
            if f is not None:
                _FUNCTION_RULES[f] = fn
        return fn

    return deco


def method_rule(*names: str) -> Callable[[Rule], Rule]:
    """Register a rule for tensor methods by name (``view``, ``mean``, …)."""

    def deco(fn: Rule) -> Rule:
        for n in names:
            _METHOD_RULES[n] = fn
        return fn

    return deco


def rule_for(op: str, target: Any) -> Rule | None:
    """The rule for a ``call_module`` (target: the module), ``call_function`` or ``call_method``."""
    if op == "call_module":
        for base in type(target).__mro__:
            if base in _MODULE_RULES:
                return _MODULE_RULES[base]
        return None
    if op == "call_method":
        return _METHOD_RULES.get(target)
    try:
        return _FUNCTION_RULES.get(target)
    except TypeError:
        return None


def has_module_rule(module: nn.Module) -> bool:
    """Whether a layout rule exists for ``module``'s class."""
    return rule_for("call_module", module) is not None


def is_tensor(x: Any) -> bool:
    return isinstance(x, torch.Tensor)
