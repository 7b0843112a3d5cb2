"""Shared test configuration: deterministic hypothesis profiles and seeding."""

from __future__ import annotations

import os

import pytest
import torch
from hypothesis import HealthCheck, settings

from groupattn.testing import float_dtype, seed_everything  # noqa: F401  (fixture re-export)

settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    max_examples=25,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
settings.register_profile(
    "long",
    derandomize=False,
    deadline=None,
    max_examples=500,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _seed() -> None:
    seed_everything(0)
