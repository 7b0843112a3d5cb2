"""Tiny classifiers and workers shared by the training, DDP and demo tests.

Importable by name (``training_helpers:invariant_cnn``) from subprocesses that put
``tests/`` on ``PYTHONPATH``.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch import nn

from groupattn.actions import GridField, InvariantField
from groupattn.contracts import Contract
from groupattn.groups import Group


class InvariantCNN(nn.Module):
    """Circular 3×3 convolution, ReLU, 1×1 convolution, global average pooling, linear.

    Invariant to circular translations (global pooling of a circular convolution);
    not to rotations (the 3×3 kernel is not symmetric). ``dropout`` makes training
    consume random numbers (for the checkpoint tests).
    """

    def __init__(self, channels: int = 6, num_classes: int = 10, dropout: float = 0.0) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, channels, 3, padding=1, padding_mode="circular"),
            nn.ReLU(),
            nn.Conv2d(channels, channels, 1),
            nn.ReLU(),
            nn.Dropout(dropout),
        )
        self.head = nn.Linear(channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).mean(dim=(-2, -1)))

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        return Contract.invariant(input_type or GridField(), InvariantField())


class PixelwiseInvariant(nn.Module):
    """A per-pixel MLP (1×1 convolutions) and global pooling: invariant to every pixel permutation,
    hence to translations and quarter turns alike."""

    def __init__(self, channels: int = 6, num_classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, channels, 1), nn.ReLU(), nn.Conv2d(channels, channels, 1)
        )
        self.head = nn.Linear(2 * channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f = self.features(x)
        return self.head(torch.cat([f.mean(dim=(-2, -1)), f.amax(dim=(-2, -1))], dim=1))

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        return Contract.invariant(input_type or GridField(), InvariantField())


class FlattenBaseline(nn.Module):
    """Convolution then a linear layer on the flattened map: position-dependent, breaks invariance."""

    def __init__(self, channels: int = 2, side: int = 32, num_classes: int = 10) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, channels, 3, padding=1, padding_mode="circular")
        self.head = nn.Linear(channels * side * side, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.conv(x)).flatten(1))

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        return Contract.breaks(
            "a linear layer on the flattened map sees absolute positions",
            GridField(),
            InvariantField(),
        )


def invariant_cnn(**kwargs: Any) -> nn.Module:
    """Factory for ``--model training_helpers:invariant_cnn``."""
    return InvariantCNN(**kwargs)


def flatten_baseline(**kwargs: Any) -> nn.Module:
    """Factory for ``--model training_helpers:flatten_baseline``."""
    return FlattenBaseline(**kwargs)


def ddp_worker(
    rank: int, world_size: int, port: int, out_dir: str, config_kwargs: dict[str, Any]
) -> None:
    """One rank of the DDP test: train InvariantCNN on 64 digits, rank 0 saves the parameters."""
    os.environ.update(
        {
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "RANK": str(rank),
            "WORLD_SIZE": str(world_size),
            "LOCAL_RANK": str(rank),
        }
    )
    torch.set_num_threads(1)
    from groupattn.training import (
        TrainConfig,
        load_training_data,
        setup_distributed,
        teardown_distributed,
        train,
    )

    context = setup_distributed("cpu")
    try:
        data = load_training_data("digits", limit=64)
        torch.manual_seed(0)
        model = InvariantCNN()
        result = train(model, data, TrainConfig(progress=False, **config_kwargs), context)
        if context.is_main:
            torch.save(
                {"model": model.state_dict(), "history": result.history},
                os.path.join(out_dir, "ddp.pt"),
            )
    finally:
        teardown_distributed(context)
