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
from ._anchored import CENTRE_SIGMA_FRACTION
from ._inputs import install_input_check

__all__ = ["AnchorOutput", "ShiftTransformer"]

Anchoring = Literal["input", "layers", "centre", "mass"]

#: The centre anchor of the shift models: the blurred image's maximum (its innermost ring,
#: ``window = 2``) rolled to the image centre, with the p4 models' wide blur
#: (``sigma = CENTRE_SIGMA_FRACTION · S``, 9.6 pixels on 32 × 32): its maximum sits near the
#: glyph's centre of mass, so a digit that is already centred barely moves and the body
#: sees nearly the images its baseline sees (twins, MNIST, 6 epochs, seed 0: 77.5 % with
#: ``sigma = 3``, 88.1 % with 9.6, baseline 89.5 %). The blur's cost does not depend on
#: ``sigma`` (two dense integer matrix products).
CENTRE_WINDOW = 2


def _one_of(choices: tuple[str, ...]) -> str:
    """``'a'``, ``'a' or 'b'``, ``'a', 'b' or 'c'``."""
    quoted = [repr(c) for c in choices]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"


def check_anchoring(
    module: str, anchoring: str, choices: tuple[str, ...] = ("input", "layers", "centre", "mass")
) -> None:
    """Raise a clear error for an unknown ``anchoring`` option."""
    if not isinstance(anchoring, str) or anchoring not in choices:
        raise ConfigurationError(
            f"{module}: expected anchoring {_one_of(choices)}, got {anchoring!r}"
        )


class AnchorOutput(nn.Module):
    """The output image of a canonicalizer (``canonicalizer(x).output``), as a model's first child.

    Contract: the canonicalizer's. Shapes: ``(B, C, H, W) → (B, C, H, W)``.
    """

    def __init__(self, canonicalizer: nn.Module) -> None:
        super().__init__()
        self.canonicalizer = canonicalizer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.canonicalizer(x).output  # type: ignore[no-any-return, operator]

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """The canonicalizer's contract."""
        return self.canonicalizer.contract(group, input_type)  # type: ignore[no-any-return, operator]


def centre_anchor(module: str, size: tuple[int, int]) -> AnchorOutput:
    """The ``anchoring="centre"`` anchor of a shift model on an ``S × S`` image (``S`` even)."""
    from ..canonical import CentreAnchor

    if size[0] != size[1] or size[0] % 2 or size[0] < CENTRE_WINDOW:
        raise ConfigurationError(
            f"{module}: expected a square image with an even side for anchoring='centre', got {size[0]}x{size[1]}"
        )
    return AnchorOutput(
        CentreAnchor(size[0], sigma=CENTRE_SIGMA_FRACTION * size[0], window=CENTRE_WINDOW)
    )


def mass_anchor(module: str, size: tuple[int, int]) -> AnchorOutput:
    """The ``anchoring="mass"`` anchor of a shift model on an ``S × S`` image (any side)."""
    from ..canonical import CentreOfMassAnchor

    if size[0] != size[1]:
        raise ConfigurationError(
            f"{module}: expected a square image for anchoring='mass', got {size[0]}x{size[1]}"
        )
    return AnchorOutput(CentreOfMassAnchor(size[0]))


def whole_anchor(module: str, anchoring: str, size: tuple[int, int]) -> AnchorOutput:
    """The anchor of the whole translation for ``anchoring`` ``"centre"`` or ``"mass"``."""
    return mass_anchor(module, size) if anchoring == "mass" else centre_anchor(module, size)


def mass_anchoring_fits(kwargs: dict[str, Any]) -> bool:
    """Whether a registry preset built with ``kwargs`` can anchor the whole translation by
    the centre of mass: a square image (an int side or an ``(H, W)`` pair; 32 when absent)."""
    size = kwargs.get("image_size", 32)
    sides = tuple(size) if isinstance(size, tuple | list) else (size, size)
    return (
        len(sides) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in sides)
        and sides[0] == sides[1]
        and sides[0] >= 1
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
