"""A cache for index tables built from Python values alone, safe under every kind of tracing.

The geometry of a layer (orbital indices, window tilings, point-group tables) is a pure
function of hashable Python values — a group, grid sides, a window size — and is built
once per key. ``functools.lru_cache`` is wrong for it in two ways:

* ``torch.export`` (non-strict, the default) runs the forward pass in Python under a
  fake-tensor mode: a table first built there is a fake tensor, and ``lru_cache`` would
  keep it — every later eager call returned fake outputs, and the next export failed
  with "fake tensor in the exported program constant's list". The same holds for a
  table first built under ``FakeTensorMode``, functionalisation or on the ``meta``
  device. ``constant_cache`` stores a value only
  when every tensor in it is a plain tensor with storage; a value built while tracing is
  returned (its ops become part of the traced graph) but never kept.
* Under ``torch.compile`` Dynamo traces the builder itself (as it did through
  ``lru_cache``, with a warning that it ignores the wrapper): the cache is neither read
  nor written while Dynamo traces. Calling the builder for real at trace time
  (``torch.compiler.assume_constant_result``) would keep the tables as graph constants,
  but it fails with dynamic shapes (symbolic grid sides) and when the build fills a lazy
  cache of the group that Dynamo has already guarded on ("guard failed on the same frame
  it was created"), so it is not used.

Tables are always built on the CPU (whatever ``torch.device`` context is active); their
users move them to the device of the data.
"""

from __future__ import annotations

import dataclasses
import functools
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, NamedTuple, TypeVar, cast

import torch

__all__ = ["CacheInfo", "constant_cache", "is_real"]

F = TypeVar("F", bound=Callable[..., Any])

_dynamo_compiling: Callable[[], bool] = getattr(
    torch.compiler, "is_dynamo_compiling", torch.compiler.is_compiling
)


class CacheInfo(NamedTuple):
    """Statistics of a ``constant_cache`` (as ``functools``' ``CacheInfo``)."""

    hits: int
    misses: int
    maxsize: int | None
    currsize: int


def is_real(value: object) -> bool:
    """Whether every tensor in ``value`` is a plain tensor with storage.

    Fake tensors (export, ``FakeTensorMode``), functional tensors (functionalisation) and
    ``meta`` tensors are not; nor is a tensor subclass. Dataclasses, tuples, lists and
    dicts are searched.

    Parameters
    ----------
    value
        A tensor, or a container of tensors and other values.

    Returns
    -------
    bool
        ``True`` when ``value`` may be cached and reused outside the trace that built it.
    """
    if isinstance(value, torch.Tensor):
        return type(value) is torch.Tensor and value.device.type != "meta"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return all(is_real(getattr(value, f.name)) for f in dataclasses.fields(value))
    if isinstance(value, tuple | list):
        return all(is_real(v) for v in value)
    if isinstance(value, dict):
        return all(is_real(v) for v in value.values())
    return True


def constant_cache(maxsize: int | None = 64) -> Callable[[F], F]:
    """Cache a builder of constant tables; safe under ``torch.compile`` and ``torch.export``.

    Parameters
    ----------
    maxsize
        Most entries kept (least recently used evicted first); ``None``: unbounded.

    Returns
    -------
    callable
        A decorator. The decorated function has ``cache_clear()`` and ``cache_info()``,
        as with ``functools.lru_cache``; its arguments must be hashable.
    """

    def decorate(fn: F) -> F:
        store: OrderedDict[Hashable, Any] = OrderedDict()
        stats = {"hits": 0, "misses": 0}

        def lookup(*args: Any, **kwargs: Any) -> Any:
            key = (args, tuple(sorted(kwargs.items())))
            if key in store:
                stats["hits"] += 1
                store.move_to_end(key)
                return store[key]
            stats["misses"] += 1
            with torch.device("cpu"):
                value = fn(*args, **kwargs)
            if is_real(value):  # never keep what a trace built (fake, functional, meta)
                store[key] = value
                if maxsize is not None and len(store) > maxsize:
                    store.popitem(last=False)
            return value

        @functools.wraps(fn)
        def cached(*args: Any, **kwargs: Any) -> Any:
            if _dynamo_compiling():  # traced: the tables' ops become part of the graph
                return fn(*args, **kwargs)
            return lookup(*args, **kwargs)

        def cache_clear() -> None:
            store.clear()
            stats["hits"] = stats["misses"] = 0

        def cache_info() -> CacheInfo:
            return CacheInfo(stats["hits"], stats["misses"], maxsize, len(store))

        cached.cache_clear = cache_clear  # type: ignore[attr-defined]
        cached.cache_info = cache_info  # type: ignore[attr-defined]
        return cast(F, cached)

    return decorate
