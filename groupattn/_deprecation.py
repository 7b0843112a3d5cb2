"""Deprecated aliases of renamed arguments, attributes and classes.

A renamed public name keeps its old name for at least one release; using the old name
works and emits a ``DeprecationWarning`` naming the new one.

* ``renamed_arguments`` — a decorator for functions and ``__init__`` methods:
  ``@renamed_arguments(heads="num_heads")`` accepts ``heads=`` as a keyword alias of
  ``num_heads`` (positional calls are unaffected). The map is kept on the wrapper as
  ``__renamed_arguments__`` (read by [`groupattn.models.create`][groupattn.models.create] and the tests).
* ``translate_renamed`` — the same translation for a plain ``kwargs`` dict.
* ``DeprecatedAttribute`` — a class attribute that forwards an old attribute
  name to the new one (reading and writing).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from ._errors import ConfigurationError

__all__ = ["DeprecatedAttribute", "renamed_arguments", "translate_renamed"]

F = TypeVar("F", bound=Callable[..., Any])


def _removal_note() -> str:
    return "the old name will be removed in a future release"


def translate_renamed(
    renames: Mapping[str, str], kwargs: dict[str, Any], where: str, stacklevel: int = 3
) -> dict[str, Any]:
    """``kwargs`` with every deprecated key of ``renames`` (old → new) replaced by its new name.

    Emits one ``DeprecationWarning`` per old name used.

    Parameters
    ----------
    renames
        ``{old_name: new_name}``.
    kwargs
        The keyword arguments as given (not modified).
    where
        The callable's name, starting the messages.
    stacklevel
        Passed to ``warnings.warn`` (the default points at the caller of the function
        that calls this one).

    Raises
    ------
    ConfigurationError
        When an argument is given under both its old and its new name.
    """
    out = dict(kwargs)
    for old, new in renames.items():
        if old not in out:
            continue
        if new in out:
            raise ConfigurationError(
                f"{where}: expected {new!r} or its deprecated alias {old!r}, got both"
            )
        warnings.warn(
            f"{where}: the argument {old!r} is deprecated, use {new!r} ({_removal_note()})",
            DeprecationWarning,
            stacklevel=stacklevel,
        )
        out[new] = out.pop(old)
    return out


def renamed_arguments(**renames: str) -> Callable[[F], F]:
    """Decorator: accept the old keyword names ``old=new`` of a function's arguments.

    A call with ``old=value`` emits a ``DeprecationWarning`` and is passed on as
    ``new=value``; giving both raises [`ConfigurationError`][groupattn.ConfigurationError].
    ``inspect.signature`` of the decorated function shows the new names only. On an
    ``__init__`` the messages start with the class name of the object being built.

    Examples
    --------
    >>> @renamed_arguments(heads="num_heads")
    ... def build(dim: int, num_heads: int = 1) -> int:
    ...     return num_heads
    >>> build(8, num_heads=2)
    2
    """

    def deco(fn: F) -> F:
        is_init = fn.__name__ == "__init__"

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if any(old in kwargs for old in renames):
                where = type(args[0]).__name__ if is_init and args else fn.__qualname__
                kwargs = translate_renamed(renames, kwargs, where)
            return fn(*args, **kwargs)

        wrapper.__renamed_arguments__ = dict(renames)  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    return deco


class DeprecatedAttribute:
    """A class attribute that forwards the old name of a renamed attribute to the new one.

    ``heads = DeprecatedAttribute("num_heads")`` in a class body makes ``obj.heads``
    read (and assign) ``obj.num_heads``, with a ``DeprecationWarning``.
    """

    def __init__(self, new: str) -> None:
        self.new = new
        self.old = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.old = name

    def _warn(self, owner: type) -> None:
        warnings.warn(
            f"{owner.__name__}.{self.old} is deprecated, use {self.new!r} ({_removal_note()})",
            DeprecationWarning,
            stacklevel=3,
        )

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        self._warn(type(obj))
        return getattr(obj, self.new)

    def __set__(self, obj: Any, value: Any) -> None:
        self._warn(type(obj))
        setattr(obj, self.new, value)
