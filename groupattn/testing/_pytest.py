"""pytest helpers: a fixture that runs a test in float32 and float64, and seeding."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest
import torch

__all__ = ["float_dtype", "seed_everything"]


def seed_everything(seed: int = 0) -> None:
    """Seed Python's, NumPy's (if present) and PyTorch's generators."""
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy as np

        np.random.seed(seed)  # noqa: NPY002  (seeding the legacy global generator is the point)
    except ImportError:  # pragma: no cover
        pass


@pytest.fixture(params=[torch.float32, torch.float64], ids=["float32", "float64"])
def float_dtype(request: pytest.FixtureRequest) -> Iterator[torch.dtype]:
    """Run the test once in float32 and once in float64 (seeded), yielding the dtype."""
    seed_everything(0)
    yield request.param
