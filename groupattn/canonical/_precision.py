"""The precision canonicalizer decisions are made in, whatever precision the network runs in.

A canonicalizer's decision is an arg-max over scores. If the scores were computed in the
network's compute dtype (bf16 or fp16 under autocast, or bf16 weights and input), two
candidates whose scores differ by less than one step of that dtype would round to the same
value and tie; a tie goes to the lowest index, and that rule does not move with the input,
so the model would lose its exact equivariance in low precision only. Every canonicalizer
in [`groupattn.canonical`][groupattn.canonical] therefore

* casts the tensor it receives up to [`SCORE_DTYPE`][groupattn.canonical.SCORE_DTYPE] (float64; float32 on devices
  without float64, i.e. Apple ``mps``) — exact, so the scores are a function of the
  received values alone, not of how earlier layers were computed;
* computes its scores with autocast disabled (``scoring``), so no matmul inside the
  score runs in bf16 / fp16;
* applies its decision to the tensor as received: the data path keeps the user's dtype.
"""

from __future__ import annotations

import contextlib

import torch

from .._errors import DtypeError

__all__ = ["SCORE_DTYPE", "score_dtype", "scoring", "to_score_dtype"]

SCORE_DTYPE = torch.float64
"""The dtype canonicalizer scores are computed in (float32 on devices without float64)."""

#: Device types without float64 support: scores there are computed in float32.
_NO_FLOAT64 = frozenset({"mps"})


def score_dtype(device: torch.device | str) -> torch.dtype:
    """The dtype canonicalizer scores are computed in on ``device``.

    Parameters
    ----------
    device
        Where the input lives.

    Returns
    -------
    torch.dtype
        [`SCORE_DTYPE`][groupattn.canonical.SCORE_DTYPE] (float64), or float32 on a device without float64 (``mps``).
    """
    kind = torch.device(device).type
    return torch.float32 if kind in _NO_FLOAT64 else SCORE_DTYPE


def to_score_dtype(x: torch.Tensor) -> torch.Tensor:
    """``x`` cast up to [`score_dtype`][groupattn.canonical.score_dtype] of its device (exact for every float dtype up to it).

    Integer and boolean inputs are cast too (scores are always floating point).

    Parameters
    ----------
    x
        Any tensor ``(...)``.

    Returns
    -------
    torch.Tensor
        ``(...)`` in the score dtype; ``x`` itself when it already has it.
    """
    dtype = score_dtype(x.device)
    if x.dtype == torch.float64 and dtype == torch.float32:
        return x  # never round a float64 input down
    return x.to(dtype)


#: Floating dtypes that PyTorch's type promotion casts up to float32 / float64 (exactly).
_PROMOTED_EXACTLY = frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64})


def check_real_input(x: torch.Tensor, module: str) -> None:
    """Raise [`DtypeError`][groupattn.DtypeError] for an ``x`` that is not a tensor, or a
    complex one: a canonicalizer scores real values (casting a complex tensor to float64
    would drop its imaginary part)."""
    if not isinstance(x, torch.Tensor):
        raise DtypeError(f"{module}: expected a torch.Tensor, got {type(x).__name__}")
    if x.is_complex():
        raise DtypeError(f"{module}: expected a real input (float, integer or bool), got {x.dtype}")


def score_source(x: torch.Tensor) -> tuple[torch.Tensor, torch.dtype]:
    """``x`` and the score dtype to compute in, for arithmetic that casts its input up itself.

    A floating ``x`` no wider than the score dtype is returned as is (an operation that
    mixes it with a tensor of the score dtype promotes it exactly, without a copy); any
    other ``x`` is [`to_score_dtype`][groupattn.canonical.to_score_dtype]'s. The dtype is
    that of ``to_score_dtype(x)``.

    Parameters
    ----------
    x
        Any tensor ``(...)``.

    Returns
    -------
    tuple
        ``(source, dtype)``: a tensor ``(...)`` and a floating dtype.
    """
    dtype = score_dtype(x.device)
    if x.dtype == torch.float64 and dtype == torch.float32:
        return x, x.dtype  # never round a float64 input down
    if x.dtype in _PROMOTED_EXACTLY and torch.finfo(x.dtype).bits <= torch.finfo(dtype).bits:
        return x, dtype
    return x.to(dtype), dtype


def scoring(device: torch.device | str) -> contextlib.AbstractContextManager[object]:
    """A context in which autocast is disabled on ``device``: scores run in the dtype given.

    Parameters
    ----------
    device
        The device the scores are computed on.

    Returns
    -------
    contextlib.AbstractContextManager
        ``torch.autocast(device_type, enabled=False)``, or a no-op context for a device
        type without autocast (``meta``, custom backends).
    """
    kind = torch.device(device).type
    if torch.amp.is_autocast_available(kind):
        return torch.autocast(device_type=kind, enabled=False)
    return contextlib.nullcontext()
