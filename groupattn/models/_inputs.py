"""The dtype rule of every registered model: floating input of the model's own dtype.

Integer and bool images are refused with a [`DtypeError`][groupattn.DtypeError]
(never cast silently: a cast would hide a forgotten normalisation such as ``/ 255``).
A floating input of another dtype than the model's parameters (``float16`` or
``bfloat16`` images into a ``float32`` model, ``float64`` into ``float32``, …) is
refused too — PyTorch would fail inside the first layer with a message that names
neither the model nor the fix — unless autocast is active for the input's device, in
which case autocast chooses the precision of every operation.
"""

from __future__ import annotations

import itertools
from typing import Any

import torch
from torch import nn

from .._errors import DtypeError, ShapeError

__all__ = ["check_model_input", "install_input_check"]


def _parameter_dtype(module: nn.Module) -> torch.dtype | None:
    """The dtype of the module's first floating parameter (or buffer); ``None`` if it has none.

    Stops at the first floating tensor: ``torch.compile`` traces this on every model call,
    and listing every parameter there costs trace time (and guards) for nothing.
    """
    for tensor in itertools.chain(module.parameters(), module.buffers()):
        if tensor.is_floating_point():
            return tensor.dtype
    return None


def check_model_input(module: nn.Module, x: Any) -> None:
    """Raise a clear error unless ``x`` is a floating tensor the model can compute with.

    Parameters
    ----------
    module
        The model (its class name starts the message; its parameters give the dtype).
    x
        The input.

    Raises
    ------
    ShapeError
        If ``x`` is not a tensor.
    DtypeError
        If ``x`` is not floating-point (integer, bool, complex), or is floating of
        another dtype than the model's parameters while autocast is off for its device.
    """
    name = type(module).__name__
    if not isinstance(x, torch.Tensor):
        raise ShapeError(
            f"{name}: expected an image batch tensor (B, C, H, W), got {type(x).__name__}"
        )
    expected = _parameter_dtype(module)
    wanted = str(expected).removeprefix("torch.") if expected is not None else "float32"
    if not x.is_floating_point():
        raise DtypeError(
            f"{name}: expected a floating-point input ({wanted}, the dtype of its parameters), got {x.dtype}; "
            f"convert the images first, e.g. x.to(torch.{wanted})"
        )
    if (
        expected is not None
        and x.dtype != expected
        and not torch.is_autocast_enabled(x.device.type)
    ):
        given = str(x.dtype).removeprefix("torch.")
        raise DtypeError(
            f"{name}: expected an input of dtype {expected} (the dtype of its parameters), got {x.dtype}; "
            f"cast the input (x.to(torch.{wanted})) or the model (model.to(torch.{given})), or run it under "
            f"torch.autocast"
        )


def _check_input_dtype(module: nn.Module, args: tuple[Any, ...]) -> None:
    """Forward pre-hook: ``check_model_input`` on the first argument."""
    if args:
        check_model_input(module, args[0])


def install_input_check(module: nn.Module) -> None:
    """Check every call's input with ``check_model_input`` (a forward pre-hook).

    A pre-hook runs on every ``module(x)`` and under ``torch.compile`` and
    ``torch.export``; ``torch.fx`` symbolic tracing of the model itself skips it (the
    dtype of a proxy is unknown).
    """
    module.register_forward_pre_hook(_check_input_dtype)
