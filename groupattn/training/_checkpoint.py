"""Checkpoints: model, optimizer, schedule, completed epochs and random-number states.

A checkpoint holds tensors and plain values only (dicts, lists, tuples, strings,
numbers, booleans, ``None``): random-number states are stored as tensors and lists, so
[`load_checkpoint`][groupattn.training.load_checkpoint] reads files with ``torch.load(..., weights_only=True)``, which
refuses anything that would run code while unpickling. A checkpoint from elsewhere
is untrusted input: it is refused with one line that names the file and says why,
never unpickled with Python's full pickle.
"""

from __future__ import annotations

import pickle
import random
import re
import warnings
import zipfile
from pathlib import Path
from typing import Any

import torch

from .._atomic import atomic_open
from .._errors import GroupattnError

__all__ = [
    "CHECKPOINT_FORMAT",
    "CheckpointError",
    "capture_rng_state",
    "checkpoint_differences",
    "load_checkpoint",
    "restore_rng_state",
    "save_checkpoint",
]

CHECKPOINT_FORMAT = 2
"""The layout of the files ``save_checkpoint`` writes. Format 1 (groupattn 0.1)
pickled NumPy's random state as an array and cannot be loaded safely; it is refused."""

#: The entries every checkpoint holds.
_REQUIRED = ("model", "optimizer", "scheduler", "epoch", "rng", "config", "history")


class CheckpointError(GroupattnError, ValueError):
    """A checkpoint that cannot be used: missing, truncated, foreign, unsafe or from another run."""


def capture_rng_state() -> dict[str, Any]:
    """The states of Python's, NumPy's and PyTorch's (CPU and CUDA) generators, as plain values and tensors."""
    version, internal, gauss = random.getstate()
    state: dict[str, Any] = {
        "python": {
            "version": version,
            "state": torch.tensor(internal, dtype=torch.int64),
            "gauss": gauss,
        },
        "torch": torch.get_rng_state(),
    }
    try:
        import numpy as np

        name, key, pos, has_gauss, cached = np.random.get_state()  # noqa: NPY002  (the legacy global generator)
        state["numpy"] = {
            "name": str(name),
            "key": torch.from_numpy(np.asarray(key, dtype=np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "gauss": float(cached),
        }
    except ImportError:  # pragma: no cover
        pass
    if torch.cuda.is_available():
        state["cuda"] = list(torch.cuda.get_rng_state_all())
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    """Restore what [`capture_rng_state`][groupattn.training.capture_rng_state] returned."""
    python = state["python"]
    random.setstate(
        (int(python["version"]), tuple(int(v) for v in python["state"].tolist()), python["gauss"])
    )
    torch.set_rng_state(state["torch"])
    if "numpy" in state:
        import numpy as np

        saved = state["numpy"]
        key = saved["key"].numpy().astype(np.uint32)
        np.random.set_state((saved["name"], key, saved["pos"], saved["has_gauss"], saved["gauss"]))  # noqa: NPY002
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(path: str | Path, state: dict[str, Any]) -> None:
    """Write ``state`` to ``path`` whole or not at all (``groupattn._atomic.atomic_open``).

    ``state`` holds ``model``, ``optimizer``, ``scheduler`` (state dicts), ``epoch``
    (completed epochs), ``rng`` (one [`capture_rng_state`][groupattn.training.capture_rng_state] per rank), ``config``
    and ``history``; everything in it must be a tensor or a plain value, so that
    [`load_checkpoint`][groupattn.training.load_checkpoint] can read it without running code. An interrupted save
    leaves the previous checkpoint intact.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_open(path) as fh:
        torch.save({"format": CHECKPOINT_FORMAT, **state}, fh)


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Read a checkpoint written by [`save_checkpoint`][groupattn.training.save_checkpoint], without running any code from it.

    The file is read with ``torch.load(..., weights_only=True)``: only tensors and
    plain values are accepted, so a crafted file cannot execute code.

    Raises
    ------
    CheckpointError
        If the file is missing, truncated or not a PyTorch file, holds anything but
        tensors and plain values (a crafted file, or a format-1 checkpoint of an older
        groupattn), or is not a groupattn checkpoint of format ``CHECKPOINT_FORMAT``.
        The message names the file and the reason.
    """
    path = Path(path)
    where = f"load_checkpoint: {str(path)!r}"
    if not path.exists():
        raise CheckpointError(
            f"{where}: expected a checkpoint file, got a path that does not exist"
        )
    if not path.is_file():
        raise CheckpointError(f"{where}: expected a checkpoint file, got a folder or special file")
    _check_archive(path, where)
    try:
        with (
            warnings.catch_warnings()
        ):  # torch warns about pickle protocols before refusing a foreign file
            warnings.filterwarnings(
                "ignore", message="Detected pickle protocol", category=UserWarning
            )
            state = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as error:
        detail = " ".join(str(error).split())
        found = re.search(r"GLOBAL (\S+)|Unsupported global: GLOBAL (\S+)", detail)
        if (
            found is None
        ):  # not a pickle of plain values at all: garbage, or a raw pickle torch cannot read safely
            raise CheckpointError(
                f"{where}: expected a PyTorch checkpoint file, got a truncated or foreign file that cannot be read "
                "safely (not a PyTorch archive of tensors and plain values)"
            ) from None
        name = found.group(1) or found.group(2)
        raise CheckpointError(
            f"{where}: refused: it holds Python objects beyond tensors and plain values ({name}), which could run "
            "code when unpickled; a crafted file, or a format-1 checkpoint of an older groupattn (retrain, or re-save "
            "it from a trusted session)"
        ) from None
    except (
        Exception
    ) as error:  # torch's readers raise KeyError, RuntimeError, EOFError, … for foreign bytes
        first = (" ".join(str(error).split()) or type(error).__name__)[:160]
        raise CheckpointError(
            f"{where}: expected a PyTorch checkpoint file, got a truncated or foreign file ({first})"
        ) from None
    if not isinstance(state, dict) or "format" not in state:
        raise CheckpointError(
            f"{where}: expected a groupattn checkpoint, got a PyTorch file without groupattn's format tag"
        )
    if state["format"] != CHECKPOINT_FORMAT:
        raise CheckpointError(
            f"{where}: expected checkpoint format {CHECKPOINT_FORMAT}, got format {state['format']!r} (another groupattn version)"
        )
    missing = [key for key in _REQUIRED if key not in state]
    if missing:
        raise CheckpointError(
            f"{where}: expected entries {', '.join(_REQUIRED)}, got none for {', '.join(missing)}"
        )
    _check_values(state, where)
    _check_entries(state, where)
    return state


def _check_archive(path: Path, where: str) -> None:
    """Refuse a zip archive whose entries are compressed or claim more bytes than the file holds.

    ``torch.save`` stores entries uncompressed; a deflated entry can expand a small
    file into gigabytes (a zip bomb) before any check on what it holds.
    """
    if not zipfile.is_zipfile(path):
        return
    size = path.stat().st_size
    try:
        with zipfile.ZipFile(path) as archive:
            entries = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError):
        return  # torch.load reports a broken archive in its own words
    for info in entries:
        if info.compress_type != zipfile.ZIP_STORED or info.file_size > size:
            raise CheckpointError(
                f"{where}: refused: entry {info.filename!r} is compressed or larger than the file "
                f"({info.file_size:,} bytes in a {size:,}-byte file); torch.save never writes that"
            )


#: Limits of the plain values in a checkpoint: nesting depth and number of containers.
_MAX_DEPTH, _MAX_CONTAINERS = 32, 1_000_000


def _check_values(state: Any, where: str) -> None:
    """Only tensors and plain values; no shared or cyclic containers; tensors densely stored.

    A tensor saved as a stride-0 view of a tiny storage claims any number of elements;
    a container referenced twice can make comparisons and messages exponential.
    """
    seen: set[int] = set()
    stack: list[tuple[Any, int]] = [(state, 0)]
    visits = 0
    while stack:
        value, depth = stack.pop()
        visits += 1
        if isinstance(value, torch.Tensor):
            if (
                not value.is_contiguous()
                or value.untyped_storage().nbytes() < value.numel() * value.element_size()
            ):
                raise CheckpointError(
                    f"{where}: refused: a tensor of shape {tuple(value.shape)} is not densely stored"
                )
            continue
        if value is None or isinstance(value, (bool, int, float, str, bytes)):
            continue
        if not isinstance(value, (dict, list, tuple)):
            raise CheckpointError(
                f"{where}: expected tensors and plain values, got a {type(value).__name__}"
            )
        if id(value) in seen:
            raise CheckpointError(
                f"{where}: refused: a container is referenced twice (shared or cyclic values)"
            )
        seen.add(id(value))
        if depth > _MAX_DEPTH or visits > _MAX_CONTAINERS:
            raise CheckpointError(
                f"{where}: refused: values nested deeper than {_MAX_DEPTH} or too many containers"
            )
        items = list(value.items()) if isinstance(value, dict) else list(enumerate(value))
        for key, item in items:
            if not isinstance(key, (str, int)):
                raise CheckpointError(
                    f"{where}: expected string or integer keys, got a {type(key).__name__}"
                )
            stack.append((item, depth + 1))


def _check_entries(state: dict[str, Any], where: str) -> None:
    """The types and sizes of the entries groupattn reads back."""
    epoch = state["epoch"]
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
        raise CheckpointError(
            f"{where}: expected 'epoch' to be a non-negative integer, got {epoch!r:.40}"
        )
    for key in ("model", "optimizer", "scheduler", "config"):
        if not isinstance(state[key], dict):
            raise CheckpointError(
                f"{where}: expected {key!r} to be a dict, got a {type(state[key]).__name__}"
            )
    history = state["history"]
    if not isinstance(history, list) or not all(
        isinstance(h, dict)
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in h.values())
        for h in history
    ):
        raise CheckpointError(f"{where}: expected 'history' to be a list of dicts of numbers")
    if not isinstance(state["rng"], list):
        raise CheckpointError(
            f"{where}: expected 'rng' to be a list, got a {type(state['rng']).__name__}"
        )
    expected_torch = torch.get_rng_state().numel()
    for rng in state["rng"]:
        ok = (
            isinstance(rng, dict)
            and isinstance(rng.get("python"), dict)
            and _tensor_of(rng["python"].get("state"), 625, torch.int64)
            and _tensor_of(rng.get("torch"), expected_torch, torch.uint8)
            and ("numpy" not in rng or _tensor_of(rng["numpy"].get("key"), 624, torch.int64))
        )
        if not ok:
            raise CheckpointError(
                f"{where}: expected random-number states as written by capture_rng_state"
            )


def _tensor_of(value: Any, numel: int, dtype: torch.dtype) -> bool:
    return isinstance(value, torch.Tensor) and value.numel() == numel and value.dtype == dtype


#: Settings that may differ between the run that wrote a checkpoint and the run resuming it, and why.
_MAY_DIFFER = {
    "checkpoint": "where the file lives",
    "resume": "whether to resume",
    "progress": "how progress is shown",
    "device": "the device (the states are moved to it)",
}


#: Settings that differ between runs as a matter of course (not worth a word).
_QUIET = frozenset({"checkpoint", "resume", "progress"})

#: Settings added after checkpoints were first written, with the value that behaves as
#: runs did before they existed: a checkpoint without the setting matches that value.
_ADDED_LATER = {"warmup_epochs": 0.0}


def _flatten(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"identity": {"limit": 64}}`` → ``{"identity.limit": 64}``."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(_flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def checkpoint_differences(
    saved: dict[str, Any], current: dict[str, Any]
) -> tuple[list[str], list[str]]:
    """What differs between a checkpoint's ``config`` and the resuming run's.

    Parameters
    ----------
    saved, current
        The [`TrainConfig`][groupattn.training.TrainConfig] of the run that wrote the checkpoint and of the run
        resuming it, as dicts (``dataclasses.asdict``).

    Returns
    -------
    refused, allowed
        Sentences naming each differing setting. ``refused``: the model, its
        arguments, the data, ``--limit``, the seed or an optimiser or schedule setting
        differ, so resuming would not continue the same run. ``allowed``: settings that
        may differ, with the reason — the file location, progress display and device;
        more epochs than were completed (training goes on, but a cosine schedule is
        stretched to the new length, so the result differs from an uninterrupted run of
        that length).
    """
    refused: list[str] = []
    allowed: list[str] = []
    flat_saved, flat_current = _flatten(saved), _flatten(current)
    for key in sorted(set(flat_saved) | set(flat_current)):
        before, now = flat_saved.get(key), flat_current.get(key)
        if key not in flat_saved and key in _ADDED_LATER:
            before = _ADDED_LATER[key]
        if before == now or key in _QUIET:
            continue
        if key in _MAY_DIFFER:
            allowed.append(
                f"{key}: checkpoint {before!r}, now {now!r} (allowed: only {_MAY_DIFFER[key]})"
            )
        elif key == "epochs" and isinstance(before, int) and isinstance(now, int) and now > before:
            stretched = (
                ""
                if current.get("schedule") == "constant"
                else "; the cosine schedule is stretched to the new length"
            )
            allowed.append(
                f"epochs: checkpoint {before}, now {now} (allowed: training continues{stretched})"
            )
        else:
            refused.append(f"{key}: checkpoint {before!r}, now {now!r}")
    return refused, allowed
