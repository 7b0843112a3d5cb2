"""Shared pieces of the shift-equivariant transformers (ViT, Swin, Twins)."""

from __future__ import annotations

import math
from typing import Any, Literal

import torch
from torch import nn

from .._errors import ConfigurationError
from ..contracts import Contract
from ..groups import Group
from ..nn import chain_contract
from ._inputs import install_input_check

__all__ = ["ShiftTransformer"]

Anchoring = Literal["input", "layers"]


def check_anchoring(module: str, anchoring: str) -> None:
    """Raise a clear error for an unknown ``anchoring`` option."""
    if anchoring not in ("input", "layers"):
        raise ConfigurationError(
            f"{module}: expected anchoring 'input' or 'layers', got {anchoring!r}"
        )


def anchor_period(periods: list[int]) -> int:
    """The stride of a single input anchoring for layers with these pixel periods (their lcm).

    A strided layer (patch embedding, windows, patch merging, spatial reduction) is
    equivariant to shifts of the image by multiples of its period in pixels; a network
    of them, to shifts by multiples of the least common multiple.
    """
    return math.lcm(*periods)


def input_anchor_stride(periods: list[int], size: tuple[int, int]) -> int | None:
    """``anchor_period``, or ``None`` when it does not divide the image ``size``.

    Every period divides the image side exactly when the layers' own size checks pass, so
    ``None`` only occurs for a configuration one of the layers will reject with its own
    error (raised after the patch embedding is built).
    """
    stride = anchor_period(periods)
    return None if size[0] % stride or size[1] % stride else stride


def as_pair(module: str, value: Any) -> tuple[int, int]:
    """``32 → (32, 32)``; ``(32, 16)`` stays."""
    if isinstance(value, int):
        return (value, value)
    try:
        height, width = value
        return (int(height), int(width))
    except (TypeError, ValueError):
        raise ConfigurationError(
            f"{module}: expected an image size as an int or (H, W), got {value!r}"
        ) from None


def per_stage(module: str, name: str, value: Any, stages: int) -> list[Any]:
    """Broadcast a scalar option to every stage, or check a per-stage sequence's length."""
    if isinstance(value, list | tuple):
        if len(value) != stages:
            raise ConfigurationError(
                f"{module}: expected {stages} values of {name} (one per stage), got {len(value)}"
            )
        return list(value)
    return [value] * stages


class ShiftTransformer(nn.Module):
    """Base class: a model whose ``forward`` is the plain composition of its children.

    Subclasses register their children in forward order; ``forward`` applies them
    one after the other (no data-dependent control flow, so ``torch.fx`` traces it with
    the groupattn layers as leaves) and ``contract`` composes their contracts with
    [`chain_contract`][groupattn.nn.chain_contract]: equivariant models are *invariant* under
    ``TorusTranslations(H, W)``; baselines *break*, naming the first offending part.
    """

    equivariant: bool

    def __init__(self) -> None:
        super().__init__()
        install_input_check(self)  # floating input of the model's dtype (see groupattn.models)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits ``(B, num_classes)`` of images ``(B, in_channels, H, W)``."""
        for module in self.children():
            x = module(x)
        return x

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """The composed contract of the children (see the class docstring)."""
        return chain_contract(list(self.named_children()), group, input_type)
