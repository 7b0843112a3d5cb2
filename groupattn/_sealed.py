"""The structure a library layer had when it was built, for the checker's trust in its contract.

The checker takes some of groupattn's own layers (canonicalizers, the GSA layers, anchored
window attention) as leaves checked by their declared contract instead of their body. The
contract describes the layer *as built*: a child module swapped afterwards (``layer.proj =
something_else``), a parametrization or a hook added to a child, an index buffer
overwritten, a configuration attribute changed or a parameter reshaped makes it a
different program. Classes decorated with [`sealed`][groupattn._sealed.sealed] record their
structure at the end of ``__init__``; [`changed_structure`][groupattn._sealed.changed_structure]
says what differs now (the checker then traces the body instead of trusting the contract).

What is compared, for the module and every descendant: the module types and names, an
instance-level ``forward`` and hooks other than groupattn's input checks, the names and
shapes of parameters (their values may be anything: the contracts hold for every value),
the names and shapes of buffers and the values of integer and boolean ones (index
tables), and the module attributes — plain values (numbers, strings, tuples of them) by
value, other objects (groups, field types) by identity — except private caches (names
ending in ``_cache``: tables derived from the structure, keyed by shape, dtype and device,
filled by ``forward``). Dtype and device moves keep the structure. Private attributes are
not an API: a record rewritten by hand is out of scope.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable
from typing import Any, TypeVar

import torch
from torch import nn

__all__ = ["changed_structure", "sealed", "structure_of"]

_KEY = "_groupattn_structure"
_SKIPPED = frozenset(vars(nn.Module())) | {_KEY}
_PLAIN = (int, float, bool, str, bytes, complex, type(None))

T = TypeVar("T", bound=type)


class _Reference:
    """An attribute compared by identity (it is not copied; deep copies map it with the module)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Reference) and other.value is self.value

    def __hash__(self) -> int:
        return id(self.value)

    def __repr__(self) -> str:
        return f"<{type(self.value).__name__}>"


def _plain(value: Any) -> bool:
    if isinstance(value, _PLAIN):
        return True
    return isinstance(value, tuple | frozenset) and all(_plain(v) for v in value)


def _digest(tensor: torch.Tensor) -> str | None:
    if tensor.is_floating_point() or tensor.is_complex() or tensor.device.type == "meta":
        return None
    try:
        data = tensor.detach().reshape(-1).cpu().contiguous().view(torch.uint8)
        return hashlib.sha1(data.numpy().tobytes()).hexdigest()
    except (RuntimeError, TypeError):
        return "?"


def _foreign_hooks(module: nn.Module) -> int:
    count = len(module._forward_hooks) + len(getattr(module, "_forward_hooks_with_kwargs", {}))
    for hook in module._forward_pre_hooks.values():
        owner = getattr(getattr(hook, "__func__", hook), "__module__", "") or ""
        if not (owner.startswith("groupattn.") and "check_input" in getattr(hook, "__name__", "")):
            count += 1
    return count


def structure_of(module: nn.Module) -> tuple[Any, ...]:
    """A comparable record of ``module``'s structure (see the module docstring)."""
    modules = []
    for name, m in module.named_modules(remove_duplicate=False):
        attributes: list[tuple[Any, ...]] = []
        for key, value in vars(m).items():
            if key in _SKIPPED or isinstance(value, nn.Module) or key.endswith("_cache"):
                continue  # caches: derived tables keyed by shape, dtype and device
            if _plain(value):
                attributes.append((key, "value", value))
            elif isinstance(value, torch.Tensor):
                attributes.append((key, "tensor", tuple(value.shape), _digest(value)))
            else:
                attributes.append((key, "object", _Reference(value)))
        modules.append((name, type(m), "forward" in vars(m), _foreign_hooks(m), tuple(attributes)))
    parameters = tuple(
        (name, tuple(p.shape)) for name, p in module.named_parameters(remove_duplicate=False)
    )
    buffers = tuple(
        (name, tuple(b.shape), _digest(b))
        for name, b in module.named_buffers(remove_duplicate=False)
    )
    return tuple(modules), parameters, buffers


def changed_structure(module: nn.Module) -> str | None:
    """What differs from the structure recorded when ``module`` was built, or ``None``.

    A module of a sealed class without a record (built without its ``__init__``) counts as
    changed.
    """
    recorded = module.__dict__.get(_KEY)
    if recorded is None:
        return "no record of its structure when it was built"
    now = structure_of(module)
    if now == recorded:
        return None
    (old_modules, old_params, old_buffers), (new_modules, new_params, new_buffers) = recorded, now
    if [m[:2] for m in old_modules] != [m[:2] for m in new_modules]:
        return "a child module was added, removed or replaced"
    for old, new in zip(old_modules, new_modules, strict=True):
        where = old[0] or "the module itself"
        if old[2:4] != new[2:4]:
            return f"{where}: a forward or a hook was set on the instance"
        if old[4] != new[4]:
            keys = {a[0] for a in set(old[4]) ^ set(new[4])}
            return f"{where}: attribute(s) {', '.join(sorted(keys))} changed"
    if old_params != new_params:
        return "a parameter was added, removed or reshaped"
    if old_buffers != new_buffers:
        return "a buffer was added, removed, reshaped or (an index table) overwritten"
    return "its structure changed"


def sealed(cls: T) -> T:
    """Class decorator: record the structure at the end of ``__init__`` (see the module docstring).

    A subclass's ``__init__`` that calls this one's records again when it is sealed too;
    a subclass that is not sealed keeps the record of its base's ``__init__``.
    """
    original: Callable[..., None] = cls.__init__  # type: ignore[misc]

    @functools.wraps(original)
    def __init__(self: nn.Module, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        self.__dict__[_KEY] = structure_of(self)

    cls.__init__ = __init__  # type: ignore[misc]
    return cls
