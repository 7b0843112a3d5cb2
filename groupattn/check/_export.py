"""Tracing for the checker: ``torch.export`` to functional ATen, with declared leaves kept whole.

A module is a *leaf* when its exact class declares ``contract`` and it asks to be
checked by that contract (``checker_leaf``: canonicalizers, whose output depends on a
data-chosen group element, and layers the exporter cannot trace), or — in the
checker's second pass — when its exact class declares ``contract`` and its body could
not be verified. While the model is exported, each leaf's ``forward`` is replaced by a
call of the opaque operator ``groupattn_check::leaf`` (restored afterwards), so the
leaf appears in the graph as one node whose inputs are its tensor arguments.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils import _pytree as pytree

from ._values import Unverifiable

__all__ = ["Exported", "LeafCall", "export_for_check", "is_trusted_leaf"]


@dataclass
class LeafCall:
    """One call of a leaf module recorded while exporting."""

    module: nn.Module
    path: str
    in_spec: Any
    in_leaves: list[Any]
    out_spec: Any
    out_leaves: list[Any]


_LEAF_CALLS: dict[int, LeafCall] = {}
_KEYS = itertools.count(1)


@torch.library.custom_op("groupattn_check::leaf", mutates_args=())
def _leaf_op(key: int, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    call = _LEAF_CALLS.get(key)
    if call is None:
        raise RuntimeError("groupattn_check::leaf exists only while the checker exports a model")
    args, kwargs = pytree.tree_unflatten(_merge(call.in_leaves, inputs), call.in_spec)
    out = call.module._groupattn_original_forward(*args, **kwargs)  # type: ignore[operator]
    return [t.clone() for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]


@_leaf_op.register_fake
def _leaf_fake(key: int, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    call = _LEAF_CALLS[key]
    like = inputs[0]
    return [like.new_empty(tuple(t.shape), dtype=t.dtype) for t in call.out_leaves if isinstance(t, torch.Tensor)]


def _merge(leaves: list[Any], tensors: list[torch.Tensor]) -> list[Any]:
    it = iter(tensors)
    return [next(it) if isinstance(v, torch.Tensor) else v for v in leaves]


def _library_leaves() -> dict[type, Any]:
    """Library classes checked by their contract, with the condition on the instance.

    Canonicalizers choose a group element from the data, which no rule on operators can
    follow; the layers that anchor inside (window attention, patch merging) too; the
    GSA layers run custom kernels the exporter cannot trace.
    """
    from ..attention import GroupSelfAttention, LiftingSelfAttention, WindowAttention
    from ..canonical import (
        AdaptivePolyphaseDownsample,
        AdaptivePolyphaseUpsample,
        ArgmaxCanonicalizer,
        PolyphaseAnchor,
        PolyphaseUnanchor,
    )
    from ..nn import LiftedPolyphaseDownsample, PatchMerging

    always = lambda m: True  # noqa: E731
    anchored = lambda m: bool(getattr(m, "anchored", False))  # noqa: E731
    return {
        PolyphaseAnchor: always,
        PolyphaseUnanchor: always,
        AdaptivePolyphaseDownsample: always,
        AdaptivePolyphaseUpsample: always,
        ArgmaxCanonicalizer: always,
        LiftedPolyphaseDownsample: always,
        WindowAttention: anchored,
        PatchMerging: anchored,
        LiftingSelfAttention: always,
        GroupSelfAttention: always,
    }


def is_trusted_leaf(module: nn.Module, user_contracts: bool) -> bool:
    """Whether ``module`` is checked by its declared contract instead of its body.

    Only the exact class that defines ``contract`` is trusted: a subclass that
    inherits it (and may override ``forward``) is traced through. Library classes are
    leaves only where their body cannot be checked operator by operator (see
    :func:`_library_leaves`); a user's class that declares ``contract`` is a leaf in
    the checker's second pass, when its body could not be verified.
    """
    cls = type(module)
    if not callable(getattr(module, "contract", None)):
        return False
    condition = _library_leaves().get(cls)
    if condition is not None:
        return bool(condition(module))
    if cls.__module__.startswith("groupattn.") or "contract" not in cls.__dict__:
        return False
    return user_contracts


@dataclass
class Exported:
    """The exported program and what the checker needs to read it."""

    program: Any
    leaf_calls: dict[int, LeafCall] = field(default_factory=dict)
    output_paths: list[str] = field(default_factory=list)
    outputs: Any = None


@contextlib.contextmanager
def _leaves_patched(model: nn.Module, leaves: dict[nn.Module, str], recorded: dict[nn.Module, list[tuple[Any, Any]]]) -> Iterator[dict[int, LeafCall]]:
    calls: dict[int, LeafCall] = {}
    counters = dict.fromkeys(leaves, 0)
    patched: list[nn.Module] = []

    def make(module: nn.Module, path: str) -> Any:
        def forward(*args: Any, **kwargs: Any) -> Any:
            i = counters[module]
            counters[module] += 1
            if i >= len(recorded[module]):
                raise Unverifiable(f"{path}: called more often while exporting than when run")
            out_leaves, out_spec = recorded[module][i]
            in_leaves, in_spec = pytree.tree_flatten((args, kwargs))
            key = next(_KEYS)
            call = LeafCall(module, path, in_spec, in_leaves, out_spec, out_leaves)
            calls[key] = call
            _LEAF_CALLS[key] = call
            tensors = [t for t in in_leaves if isinstance(t, torch.Tensor)]
            if not tensors:
                raise Unverifiable(f"{path}: a leaf module called without a tensor argument")
            outs = _leaf_op(key, tensors)
            it = iter(outs)
            rebuilt = [next(it) if isinstance(v, torch.Tensor) else v for v in out_leaves]
            return pytree.tree_unflatten(rebuilt, out_spec)

        return forward

    try:
        for module, path in leaves.items():
            module._groupattn_original_forward = module.forward  # type: ignore[assignment]
            module.forward = make(module, path)  # type: ignore[method-assign]
            patched.append(module)
        yield calls
    finally:
        for module in patched:
            del module.forward
            del module._groupattn_original_forward
        for key in calls:
            _LEAF_CALLS.pop(key, None)


def export_for_check(model: nn.Module, example: torch.Tensor, leaves: dict[nn.Module, str]) -> Exported:
    """Export ``model`` on ``example`` with ``leaves`` kept whole, then functionalise.

    Raises
    ------
    Unverifiable
        When ``torch.export`` cannot trace the model.
    """
    recorded: dict[nn.Module, list[tuple[Any, Any]]] = {m: [] for m in leaves}

    def hook(module: nn.Module, _args: Any, out: Any) -> None:
        recorded[module].append(pytree.tree_flatten(out))

    handles = [m.register_forward_hook(hook) for m in leaves]
    try:
        with torch.no_grad():
            outputs = model(example.clone())
    except Exception as err:
        raise Unverifiable(f"{type(model).__name__}: the model fails on the example input ({type(err).__name__}: {err})") from err
    finally:
        for h in handles:
            h.remove()
    with _leaves_patched(model, leaves, recorded) as calls:
        try:
            with torch.no_grad():
                program = torch.export.export(model, (example.clone(),), strict=False)
                program = program.run_decompositions({})
        except Unverifiable:
            raise
        except Exception as err:
            first = str(err).strip().splitlines()[0] if str(err).strip() else ""
            raise Unverifiable(
                f"{type(model).__name__}: torch.export cannot trace it ({type(err).__name__}: {first[:300]}); "
                "give the module that fails a contract, or make its forward traceable"
            ) from err
        kept = dict(calls)
    paths = [pytree.keystr(p) for p, _ in pytree.tree_flatten_with_path(outputs)[0]]
    return Exported(program, kept, paths, outputs)
