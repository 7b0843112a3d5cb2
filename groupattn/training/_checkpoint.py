"""Checkpoints: model, optimizer, schedule, completed epochs and random-number states."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import torch

from .._atomic import atomic_path

__all__ = ["capture_rng_state", "load_checkpoint", "restore_rng_state", "save_checkpoint"]

CHECKPOINT_FORMAT = 1


def capture_rng_state() -> dict[str, Any]:
    """The states of Python's, NumPy's and PyTorch's (CPU and CUDA) generators."""
    state: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    try:
        import numpy as np

        state["numpy"] = np.random.get_state()  # noqa: NPY002  (the legacy global generator is the state to save)
    except ImportError:  # pragma: no cover
        pass
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`capture_rng_state` returned."""
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if "numpy" in state:
        import numpy as np

        np.random.set_state(state["numpy"])  # noqa: NPY002
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(path: str | Path, state: dict[str, Any]) -> None:
    """Write ``state`` to ``path`` atomically (a temporary file, then a rename).

    ``state`` holds ``model``, ``optimizer``, ``scheduler`` (state dicts), ``epoch``
    (completed epochs), ``rng`` (one :func:`capture_rng_state` per rank), ``config``
    and ``history``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        torch.save({"format": CHECKPOINT_FORMAT, **state}, tmp)


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Read a checkpoint written by :func:`save_checkpoint`.

    The file holds Python objects (the random-number states), so it is unpickled with
    ``weights_only=False``: load only checkpoints you wrote yourself.

    Raises
    ------
    ValueError
        If the file is missing or is not a groupattn checkpoint.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"load_checkpoint: expected a checkpoint file, got {str(path)!r}, which does not exist")
    state = torch.load(path, map_location=map_location, weights_only=False)
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(
            f"load_checkpoint: expected a groupattn checkpoint (format {CHECKPOINT_FORMAT}), got {str(path)!r}"
        )
    return state
