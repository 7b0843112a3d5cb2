"""Helpers shared by the tests of the anchored p4 / p4m models (p4_vit, p4_swin)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from groupattn.actions import GridField
from groupattn.data import load_digits
from groupattn.groups import Group


def digit(index: int = 0, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Test digit ``index`` of the bundled digits, ``(1, 1, 32, 32)``."""
    return load_digits().test_images[index : index + 1].to(dtype)


def moved(x: torch.Tensor, group: Group, elements: Iterable[Any]) -> torch.Tensor:
    """``g·x`` for every element, stacked ``(|elements|·B, C, S, S)`` (exact permutations)."""
    return torch.cat([GridField().act(group, g, x) for g in elements])


def max_relative_error(model: torch.nn.Module, x: torch.Tensor, images: torch.Tensor) -> float:
    """The largest change of the logits of ``images`` from those of ``x``, relative to the
    largest logit of ``x`` (float64 comparison; batches of 512)."""
    with torch.no_grad():
        ref = model(x).to(torch.float64)
        out = torch.cat([model(c) for c in images.split(512)]).to(torch.float64)
    return float(((out - ref).abs().amax(dim=1) / ref.abs().amax()).max())


def point_elements_with_shifts(
    point_order: int, shifts_per_element: int, size: int, seed: int = 0
) -> list[tuple[tuple[int, int], int]]:
    """Every point element ``h < point_order``, each with ``shifts_per_element`` seeded
    random shifts of the ``size × size`` torus: elements ``((dy, dx), h)`` of p4 / p4m."""
    gen = torch.Generator().manual_seed(seed)
    return [
        ((int(dy), int(dx)), h)
        for h in range(point_order)
        for dy, dx in torch.randint(0, size, (shifts_per_element, 2), generator=gen).tolist()
    ]


def glyph(side: int, top: int, left: int, seed: int = 0) -> torch.Tensor:
    """A random non-negative 5x5 glyph at ``(top, left)`` on an empty ``side × side`` canvas,
    ``(1, 1, side, side)`` float64."""
    x = torch.zeros(1, 1, side, side, dtype=torch.float64)
    gen = torch.Generator().manual_seed(seed)
    x[0, 0, top : top + 5, left : left + 5] = torch.rand(5, 5, generator=gen, dtype=torch.float64)
    return x


def centre_of_mass(x: torch.Tensor) -> tuple[float, float]:
    """The ``(row, column)`` centre of mass of images ``(B, C, S, S)`` taken together."""
    pos = torch.arange(x.shape[-1], dtype=torch.float64)
    mass = x.sum()
    return float((x.sum(dim=(0, 1, 3)) * pos).sum() / mass), float(
        (x.sum(dim=(0, 1, 2)) * pos).sum() / mass
    )
