"""pytest helpers: a fixture that runs a test in float32 and float64, and seeding.

pytest is only needed to use the fixture; importing this module works without it.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import torch

__all__ = ["float_dtype", "seed_everything"]

try:
    import pytest
except ImportError:  # pragma: no cover - pytest is a dev dependency
    pytest = None  # type: ignore[assignment]


def seed_everything(seed: int = 0) -> None:
    """Seed Python's, NumPy's (if present) and PyTorch's generators."""
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy as np

        np.random.seed(seed)  # noqa: NPY002  (seeding the legacy global generator is the point)
    except ImportError:  # pragma: no cover
        pass


def _float_dtype(request: Any) -> Iterator[torch.dtype]:
    """Run the test once in float32 and once in float64 (seeded), yielding the dtype.

    A pytest fixture (parametrised over ``torch.float32`` and ``torch.float64``); import
    it into a ``conftest.py`` to use it.
    """
    seed_everything(0)
    yield request.param


float_dtype = (
    pytest.fixture(
        params=[torch.float32, torch.float64], ids=["float32", "float64"], name="float_dtype"
    )(_float_dtype)
    if pytest is not None
    else _float_dtype
)
"""pytest fixture: runs the test once in ``torch.float32`` and once in ``torch.float64``
(seeded), passing the dtype. Import it into a ``conftest.py`` to use it."""
