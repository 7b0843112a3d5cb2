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


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> object:
    """A test that builds something needing an optional extra that is not installed is
    skipped (with the library's one-line message), never failed: registry-wide tests build
    every registered model, and ``escnn_hybrid`` needs the ``escnn`` extra."""
    from groupattn import MissingExtraError

    try:
        return (yield)
    except MissingExtraError as err:
        pytest.skip(str(err))
