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
import copy
import itertools
import operator
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils import _pytree as pytree

from .._sealed import changed_structure
from ..canonical import record_canonicalizations
from ..contracts import registered_contract
from ..testing._equivariance import _widen
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
    return [
        like.new_empty(tuple(t.shape), dtype=t.dtype)
        for t in call.out_leaves
        if isinstance(t, torch.Tensor)
    ]


def _merge(leaves: list[Any], tensors: list[torch.Tensor]) -> list[Any]:
    it = iter(tensors)
    return [next(it) if isinstance(v, torch.Tensor) else v for v in leaves]


def _library_leaves() -> dict[type, Any]:
    """Library classes checked by their contract, with the condition on the instance.

    Canonicalizers choose a group element from the data, which no rule on operators can
    follow; the layers that anchor inside (window attention, patch merging) too; the
    GSA layers run custom kernels the exporter cannot trace. (``FrameAveraging`` is not a
    leaf: its body — one backbone call per group element — is proven by the orbit
    relations, whatever the backbone does with its batch.)
    """
    from ..attention import GroupSelfAttention, LiftingSelfAttention, WindowAttention
    from ..canonical import (
        AdaptivePolyphaseDownsample,
        AdaptivePolyphaseUpsample,
        ArgmaxCanonicalizer,
        CentreAnchor,
        CentreOfMassAnchor,
        OrientationCanonicalizer,
        PatchGridAnchor,
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
        PatchGridAnchor: always,
        CentreAnchor: always,
        CentreOfMassAnchor: always,
        OrientationCanonicalizer: always,
        LiftedPolyphaseDownsample: always,
        WindowAttention: anchored,
        PatchMerging: anchored,
        LiftingSelfAttention: always,
        GroupSelfAttention: always,
    }


def _registry_entry(cls: type) -> Any:
    """The contract registered for exactly ``cls`` (not inherited from a base class)."""
    from ..contracts import _contract

    return _contract._REGISTRY.get(cls, object())


def _has_foreign_hooks(module: nn.Module) -> bool:
    """Forward hooks, or pre-hooks other than the library's own input checks."""
    if module._forward_hooks or getattr(module, "_forward_hooks_with_kwargs", None):
        return True
    for hook in module._forward_pre_hooks.values():
        owner = getattr(getattr(hook, "__func__", hook), "__module__", "") or ""
        if not (owner.startswith("groupattn.") and "check_input" in getattr(hook, "__name__", "")):
            return True
    return False


def is_trusted_leaf(module: nn.Module, user_contracts: bool) -> bool:
    """Whether ``module`` is checked by its declared contract instead of its body.

    Only the exact class that defines ``contract`` is trusted: a subclass that
    inherits it (and may override ``forward``) is traced through. Library classes are
    leaves only where their body cannot be checked operator by operator (see
    ``_library_leaves``); a user's class that declares ``contract`` is a leaf in
    the checker's second pass, when its body could not be verified.
    """
    cls = type(module)
    if not callable(getattr(module, "contract", None)) and registered_contract(cls) is None:
        return False
    if "forward" in module.__dict__ or _has_foreign_hooks(module):
        return False  # what runs is not the class's forward: check the body instead
    condition = _library_leaves().get(cls)
    if condition is not None:
        # the contract describes the layer as built: a swapped child, an overwritten index
        # table or a changed setting makes it another program, checked by its body
        return changed_structure(module) is None and bool(condition(module))
    if cls.__module__.startswith("groupattn."):
        return False
    declared = "contract" in cls.__dict__ or registered_contract(cls) is _registry_entry(cls)
    # a contract registered for a foreign class with ``checker_leaf = True`` (e.g. escnn's
    # modules, whose bodies no operator rule can follow) keeps that exact class whole in
    # both passes
    always = bool(getattr(_registry_entry(cls), "checker_leaf", False))
    return (user_contracts or always) and declared


@dataclass
class Exported:
    """The exported program and what the checker needs to read it."""

    program: Any
    leaf_calls: dict[int, LeafCall] = field(default_factory=dict)
    output_paths: list[str] = field(default_factory=list)
    outputs: Any = None
    state_buffers: set[str] = field(default_factory=set)
    ties: int = 0


@contextlib.contextmanager
def _leaves_patched(
    model: nn.Module, leaves: dict[nn.Module, str], recorded: dict[nn.Module, list[tuple[Any, Any]]]
) -> Iterator[dict[int, LeafCall]]:
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

    saved: dict[nn.Module, Any] = {}
    try:
        for module, path in leaves.items():
            if "forward" in module.__dict__:
                saved[module] = module.__dict__["forward"]
            module._groupattn_original_forward = module.forward  # type: ignore[assignment]
            module.forward = make(module, path)  # type: ignore[method-assign]
            patched.append(module)
        yield calls
    finally:
        for module in patched:
            del module.forward
            del module._groupattn_original_forward
            if module in saved:
                module.forward = saved[module]  # type: ignore[method-assign]
        for key in calls:
            _LEAF_CALLS.pop(key, None)


def _already_functional(program: Any) -> bool:
    """Whether the exported (training-IR) graph is already functional, so that the costly
    decomposition can be skipped: no mutating operator, no higher-order operator, no
    batch-norm (whose training-IR form hides its running-statistics update) and no
    mutation listed in the graph signature."""
    signature = program.graph_signature
    for spec in signature.output_specs:
        if spec.kind.name not in ("USER_OUTPUT",):
            return False
    for node in program.graph_module.graph.nodes:
        if node.op != "call_function":
            continue
        target = node.target
        if target is operator.getitem:
            continue
        schema = getattr(target, "_schema", None)
        if schema is None or not isinstance(target, torch._ops.OpOverload):
            return False
        if schema.is_mutable or "batch_norm" in schema.name or "dropout" in schema.name:
            return False
        if any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments):
            return False
    return True


@contextlib.contextmanager
def _without_stack_traces() -> Iterator[None]:
    """Skip recording a Python stack trace per traced operation (a third of the export time)."""
    config = torch.fx.config
    before = config.do_not_emit_stack_traces
    config.do_not_emit_stack_traces = True
    try:
        yield
    finally:
        config.do_not_emit_stack_traces = before


def export_for_check(
    model: nn.Module, example: torch.Tensor, leaves: dict[nn.Module, str]
) -> Exported:
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
        with torch.no_grad(), record_canonicalizations() as recorder:
            outputs = model(example.clone())
    except Exception as err:
        raise Unverifiable(
            f"{type(model).__name__}: the model fails on the example input ({type(err).__name__}: {err})"
        ) from err
    finally:
        for h in handles:
            h.remove()
    tied = sum(event.num_tied for event in recorder) + sum(
        event.num_non_finite for event in recorder
    )
    with _leaves_patched(model, leaves, recorded) as calls:
        try:
            with torch.no_grad(), _without_stack_traces():
                program = torch.export.export(model, (example.clone(),), strict=False)
                if not _already_functional(program):
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
        traced = _replay(model, program, example)
    _same_function(model, traced, example, outputs)
    paths = [pytree.keystr(p) for p, _ in pytree.tree_flatten_with_path(outputs)[0]]
    return Exported(program, kept, paths, outputs, _trained_buffers(model, example), tied)


def _trained_buffers(model: nn.Module, example: torch.Tensor) -> set[str]:
    """Names of the buffers that one training-mode forward pass (on a copy) changes."""
    try:
        twin = copy.deepcopy(model)
    except Exception:
        return {
            n for n, b in model.named_buffers() if b.is_floating_point()
        }  # cannot tell: all float buffers
    before = {n: b.detach().clone() for n, b in twin.named_buffers()}
    twin.train()
    try:
        with torch.no_grad():
            twin(example.clone())
    except Exception:
        return {n for n, b in before.items() if b.is_floating_point()}
    after = dict(twin.named_buffers())
    return {
        n
        for n, b in before.items()
        if n in after and (after[n].shape != b.shape or not torch.equal(after[n], b))
    }


def _close(first: Any, second: Any) -> bool:
    a = [t for t in pytree.tree_leaves(first) if isinstance(t, torch.Tensor)]
    b = [t for t in pytree.tree_leaves(second) if isinstance(t, torch.Tensor)]
    return len(a) == len(b) and all(
        x.shape == y.shape
        and bool(torch.allclose(_widen(x), _widen(y), rtol=1e-4, atol=1e-5, equal_nan=True))
        for x, y in zip(a, b)
    )


def _replay(model: nn.Module, program: Any, example: torch.Tensor) -> Any:
    """Run the exported graph itself (its lifted inputs in signature order) on the example.

    Returns the user outputs as a flat list (what ``_same_function`` compares);
    calling the graph module directly avoids building an unlifted copy of it.
    """
    try:
        inputs = []
        for spec in program.graph_signature.input_specs:
            kind = spec.kind.name
            if kind == "USER_INPUT":
                inputs.append(example.clone())
            elif spec.target in program.state_dict:
                inputs.append(program.state_dict[spec.target])
            elif spec.target in program.constants:
                inputs.append(program.constants[spec.target])
            else:
                raise KeyError(f"graph input {spec.arg.name} ({kind})")
        with torch.no_grad():
            flat = program.graph_module(*inputs)
        flat = [flat] if isinstance(flat, torch.Tensor) else list(flat)
        return [
            v
            for spec, v in zip(program.graph_signature.output_specs, flat)
            if spec.kind.name == "USER_OUTPUT"
        ]
    except Exception as err:
        raise Unverifiable(
            f"{type(model).__name__}: its exported graph cannot be replayed ({type(err).__name__}: {err})"
        ) from err


def _same_function(model: nn.Module, traced: Any, example: torch.Tensor, outputs: Any) -> None:
    """The exported graph must compute what the model computes, with and without gradients.

    A model that notices it is being traced (``torch.compiler.is_exporting()``, fake
    tensors) or branches on the grad mode would otherwise be certified for a graph it
    does not run.
    """
    with torch.no_grad():
        again = model(example.clone())
    if not _close(again, outputs):
        raise Unverifiable(
            f"{type(model).__name__}: its output differs between two evaluations on the same input: it draws "
            "random numbers or keeps state between calls"
        )
    refs = [("without gradients", outputs)]
    try:
        with torch.enable_grad():
            refs.append(("with gradients enabled", model(example.clone())))
    except (
        Exception
    ):  # e.g. out= arguments with parameters that require grad: it cannot run that way
        pass
    for name, ref in refs:
        a = [t for t in pytree.tree_leaves(traced) if isinstance(t, torch.Tensor)]
        b = [t for t in pytree.tree_leaves(ref) if isinstance(t, torch.Tensor)]
        same = len(a) == len(b) and all(x.shape == y.shape and _agree(x, y) for x, y in zip(a, b))
        if not same:
            raise Unverifiable(
                f"{type(model).__name__}: the traced graph does not compute what the model computes {name} "
                "(it branches on tracing or on the grad mode, or keeps state between calls)"
            )


#: Relative tolerance (to the largest entry) of the graph-against-eager comparison in the
#: half precisions: there the graph and the eager model may round differently (an eager
#: layer can take another, equally exact kernel with gradients enabled), by a few units in
#: the last place.
_HALF_PRECISION_TOLERANCE = {torch.float16: 2e-2, torch.bfloat16: 5e-2}


def _agree(x: torch.Tensor, y: torch.Tensor) -> bool:
    """Whether the traced graph's leaf ``x`` and the eager model's ``y`` agree, to rounding."""
    tol = _HALF_PRECISION_TOLERANCE.get(x.dtype) or _HALF_PRECISION_TOLERANCE.get(y.dtype)
    wx, wy = _widen(x), _widen(y)
    if tol is None or not x.numel():
        return bool(torch.allclose(wx, wy, rtol=1e-4, atol=1e-5, equal_nan=True))
    finite = wx.isfinite() & wy.isfinite()
    if not bool((finite | (wx.isnan() & wy.isnan()) | (wx == wy)).all()):
        return False
    scale = float(wy[finite].abs().max()) if bool(finite.any()) else 0.0
    diff = float((wx - wy)[finite].abs().max()) if bool(finite.any()) else 0.0
    return diff <= tol * max(scale, torch.finfo(torch.float64).tiny)
