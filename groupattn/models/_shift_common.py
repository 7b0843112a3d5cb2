"""Shared pieces of the shift-equivariant transformers (ViT, Swin, Twins)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..contracts import Contract
from ..groups import Group, GroupError
from ..nn import chain_contract

__all__ = ["ShiftTransformer"]


def as_pair(module: str, value: Any) -> tuple[int, int]:
    """``32 → (32, 32)``; ``(32, 16)`` stays."""
    if isinstance(value, int):
        return (value, value)
    try:
        height, width = value
        return (int(height), int(width))
    except (TypeError, ValueError):
        raise GroupError(f"{module}: expected an image size as an int or (H, W), got {value!r}") from None


def per_stage(module: str, name: str, value: Any, stages: int) -> list[Any]:
    """Broadcast a scalar option to every stage, or check a per-stage sequence's length."""
    if isinstance(value, list | tuple):
        if len(value) != stages:
            raise GroupError(f"{module}: expected {stages} values of {name} (one per stage), got {len(value)}")
        return list(value)
    return [value] * stages


class ShiftTransformer(nn.Module):
    """Base class: a model whose ``forward`` is the plain composition of its children.

    Subclasses register their children in forward order; :meth:`forward` applies them
    one after the other (no data-dependent control flow, so ``torch.fx`` traces it with
    the groupattn layers as leaves) and :meth:`contract` composes their contracts with
    :func:`~groupattn.nn.chain_contract`: equivariant models are *invariant* under
    ``TorusTranslations(H, W)``; baselines *break*, naming the first offending part.
    """

    equivariant: bool

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits ``(B, num_classes)`` of images ``(B, in_channels, H, W)``."""
        for module in self.children():
            x = module(x)
        return x

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """The composed contract of the children (see the class docstring)."""
        return chain_contract(list(self.named_children()), group, input_type)
