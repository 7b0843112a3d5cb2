"""Cost known before it is paid: memory estimates from shapes, and the budget they are held to.

Everything whose cost grows with a number a user gives — an input shape, a model
argument, a batch size — is estimated here *without allocating it*: parameters by
building the model with every floating-point tensor on PyTorch's ``meta`` device (no
storage), activations by running the forward pass on ``meta`` tensors, inputs from
their shape and dtype. The commands refuse an estimate beyond ``--max-memory`` (default
``default_max_memory``: half of the machine's physical memory) before any work.
"""

from __future__ import annotations

import math
import os
import re
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from ._errors import GroupattnError

__all__ = [
    "MAX_BUILD_SECONDS",
    "BudgetError",
    "MemoryEstimate",
    "default_max_memory",
    "estimate_model_memory",
    "format_bytes",
    "parse_size",
    "physical_memory",
    "reserve",
    "tensor_bytes",
]


class BudgetError(GroupattnError, ValueError):
    """A request whose estimated cost is over the budget it is held to (refused before any work)."""


def physical_memory() -> int | None:
    """The machine's physical memory in bytes, or ``None`` where it cannot be read."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        return None


def default_max_memory() -> int:
    """The default memory budget: half of the physical memory (8 GiB where it is unknown)."""
    total = physical_memory()
    return total // 2 if total else 8 * 2**30


_UNITS = {
    "": 1,
    "b": 1,
    "k": 2**10,
    "kb": 2**10,
    "kib": 2**10,
    "m": 2**20,
    "mb": 2**20,
    "mib": 2**20,
    "g": 2**30,
    "gb": 2**30,
    "gib": 2**30,
    "t": 2**40,
    "tb": 2**40,
    "tib": 2**40,
}


def parse_size(text: str) -> int:
    """``"512M"`` → 536870912: a byte count with an optional binary unit (K, M, G, T).

    Raises
    ------
    ValueError
        If ``text`` is not a positive number with one of those units.
    """
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*", text)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _UNITS or float(match.group(1)) <= 0:
        raise ValueError(f"expected a positive size such as 512M, 8G or 1000000, got {text!r}")
    return int(float(match.group(1)) * _UNITS[unit])


def format_bytes(count: float) -> str:
    """``1536`` → ``"1.5 KiB"``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(count) < 1024 or unit == "PiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def tensor_bytes(shape: Sequence[int], dtype: torch.dtype = torch.float32) -> int:
    """The bytes of a dense tensor of ``shape`` and ``dtype`` (exact, arbitrary size)."""
    itemsize = torch.empty((), dtype=dtype).element_size()
    return math.prod(int(s) for s in shape) * itemsize


#: The most CPU time (of this process: a busy machine does not count against it) a
#: model may take to build on the ``meta`` device before it is refused.
MAX_BUILD_SECONDS = 10.0

_FACTORIES = frozenset(
    {
        torch.empty,
        torch.zeros,
        torch.ones,
        torch.full,
        torch.randn,
        torch.rand,
        torch.empty_strided,
        torch.normal,
    }
)


#: The estimations in progress (innermost last): what ``reserve`` charges.
_ACTIVE: list[_FloatTensorsOnMeta] = []


def reserve(nbytes: int, what: str) -> None:
    """Announce a real (not ``meta``) allocation of ``nbytes`` a constructor is about to make.

    Index tables that layers compute from the group (orbital labels of every token
    pair: ``n²`` integers) stay real while a model is sized on the ``meta`` device; a
    constructor calls this first, so an estimation in progress refuses a table over
    the budget before allocating it. Outside an estimation it does nothing.

    Raises
    ------
    BudgetError
        When an estimation is in progress and ``nbytes`` is over its budget.
    """
    if _ACTIVE and _ACTIVE[-1].budget is not None and nbytes > _ACTIVE[-1].budget:
        raise _ACTIVE[-1]._refuse(
            f"{what} would need {format_bytes(nbytes)}, over the memory budget of "
            f"{format_bytes(_ACTIVE[-1].budget)} (--max-memory)"
        )


class _FloatTensorsOnMeta(TorchFunctionMode):
    """Create every floating-point tensor a constructor allocates on ``meta`` (no storage).

    Parameters and floating-point buffers (``torch.empty``, ``zeros``, ``randn``, …
    without an explicit device) get no memory; integer tensors — the index tables
    layers compute from the group — stay real, so constructors that inspect them work.
    """

    def __init__(
        self, budget: int | None = None, copies: int = 1, seconds: float | None = None
    ) -> None:
        super().__init__()
        self.budget = budget
        self.copies = copies
        self.allocated = 0
        seconds = MAX_BUILD_SECONDS if seconds is None else seconds
        self.deadline = time.process_time() + seconds
        self.seconds = seconds
        self.refusal: BudgetError | None = None

    def _refuse(self, message: str) -> BudgetError:
        """Remember the refusal (a constructor may swallow the exception) and return it to raise."""
        self.refusal = self.refusal or BudgetError(message)
        return self.refusal

    def __torch_function__(
        self, func: Any, types: Any, args: Sequence[Any] = (), kwargs: Any = None
    ) -> Any:
        kwargs = dict(kwargs or {})
        dtype = kwargs.get("dtype")
        if self.refusal is not None or time.process_time() > self.deadline:
            raise self._refuse(
                f"building the model takes over {self.seconds:g} s even without its weights"
            )
        if (
            func in _FACTORIES
            and kwargs.get("device") is None
            and (dtype is None or dtype.is_floating_point)
        ):
            kwargs["device"] = "meta"
            out = func(*args, **kwargs)
            self.allocated += out.numel() * out.element_size() * self.copies
            if self.budget is not None and self.allocated > self.budget:
                raise self._refuse(
                    f"its floating-point tensors alone already need {format_bytes(self.allocated)} before the model "
                    f"is complete, over the memory budget of {format_bytes(self.budget)} (--max-memory)"
                )
            return out
        return func(*args, **kwargs)


@dataclass(frozen=True)
class MemoryEstimate:
    """What a model and an input will take, estimated without allocating them.

    Attributes
    ----------
    parameters
        Number of parameters.
    parameter_bytes
        Their bytes (float32 unless the model says otherwise).
    state_bytes
        Parameters plus what training adds per parameter: a gradient and AdamW's two
        moments (4 × ``parameter_bytes``); ``parameter_bytes`` for inference.
    input_bytes
        The input batch.
    activation_bytes
        Every module's output on the example batch, from a forward pass on ``meta``
        tensors (what the backward pass keeps, to first order); ``None`` if the model
        cannot run on ``meta`` tensors (then only the other terms are known).
    """

    parameters: int
    parameter_bytes: int
    state_bytes: int
    input_bytes: int
    activation_bytes: int | None

    @property
    def total_bytes(self) -> int:
        """The sum of the known terms."""
        return self.state_bytes + self.input_bytes + (self.activation_bytes or 0)

    def describe(self) -> str:
        """One line: ``"about 1.2 GiB (3,000,000 parameters: 45.8 MiB with training state; …)"``."""
        activations = (
            "not estimated"
            if self.activation_bytes is None
            else format_bytes(self.activation_bytes)
        )
        return (
            f"about {format_bytes(self.total_bytes)} ({self.parameters:,} parameters: "
            f"{format_bytes(self.state_bytes)} with their training state; input {format_bytes(self.input_bytes)}; "
            f"activations {activations})"
        )

    def check(self, budget: int, what: str) -> None:
        """Raise ``BudgetError`` if ``total_bytes`` is over ``budget``."""
        if self.total_bytes > budget:
            raise BudgetError(
                f"{what} would need {self.describe()}, over the memory budget of {format_bytes(budget)} "
                "(--max-memory; lower the batch size, input size or model size)"
            )


def estimate_model_memory(
    build: Callable[[], Any],
    input_shape: Sequence[int],
    training: bool = True,
    dtype: torch.dtype = torch.float32,
    budget: int | None = None,
    what: str = "the model",
) -> MemoryEstimate:
    """Estimate a model's memory without allocating its weights, activations or input.

    Parameters
    ----------
    build
        Builds the model (no arguments). It runs with floating-point tensor creation
        redirected to the ``meta`` device, so a model of any size costs nothing.
    input_shape
        The batch the model will see, e.g. ``(B, C, H, W)``.
    training
        Count a gradient and AdamW's two moments per parameter.
    dtype
        Dtype of the input.
    budget
        When given, the parameters alone are checked against it before the forward
        pass is tried, and the total after.
    what
        How messages name the model.

    Returns
    -------
    MemoryEstimate

    Raises
    ------
    BudgetError
        If ``budget`` is given and the estimate is over it.
    """
    mode = _FloatTensorsOnMeta(budget, copies=4 if training else 1)
    _ACTIVE.append(mode)
    try:
        with mode, warnings.catch_warnings():
            warnings.simplefilter(
                "ignore"
            )  # a constructor's warnings belong to the real build, not the sizing
            model = build()
    except Exception:
        if mode.refusal is None:
            raise
    finally:
        _ACTIVE.remove(mode)
    if mode.refusal is not None:  # raised inside the build, even if the constructor caught it
        raise BudgetError(f"{what}: {mode.refusal}; lower the model's size") from None
    if not isinstance(model, nn.Module):
        raise TypeError(
            f"estimate_model_memory: expected build() to return a torch.nn.Module, got {type(model).__name__}"
        )
    tensors = {id(t): t for t in [*model.parameters(), *model.buffers()]}
    parameters = sum(p.numel() for p in model.parameters())
    parameter_bytes = sum(t.numel() * t.element_size() for t in tensors.values())
    state = parameter_bytes + (
        3 * sum(p.numel() * p.element_size() for p in model.parameters()) if training else 0
    )
    inputs = tensor_bytes(input_shape, dtype)
    partial = MemoryEstimate(parameters, parameter_bytes, state, inputs, None)
    if budget is not None:
        partial.check(budget, what)
    activations = _meta_activations(model, input_shape, dtype)
    estimate = MemoryEstimate(parameters, parameter_bytes, state, inputs, activations)
    if budget is not None:
        estimate.check(budget, what)
    return estimate


def _meta_activations(
    model: nn.Module, input_shape: Sequence[int], dtype: torch.dtype
) -> int | None:
    """Bytes of every module's tensor outputs in a forward pass on ``meta`` tensors, or ``None``."""
    if any(not t.is_meta for t in model.parameters()):
        return None  # a model with real weights cannot take a meta input
    total = [0]

    def count(module: nn.Module, args: Any, output: Any) -> None:
        outputs = output if isinstance(output, (tuple, list)) else (output,)
        for out in outputs:
            if isinstance(out, torch.Tensor):
                total[0] += out.numel() * out.element_size()

    handles = [m.register_forward_hook(count) for m in model.modules()]
    try:
        with torch.no_grad():
            model(torch.empty(tuple(input_shape), dtype=dtype, device="meta"))
    except Exception:
        return None
    finally:
        for handle in handles:
            handle.remove()
    return total[0]
