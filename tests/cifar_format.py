"""Tiny files in CIFAR-10's python-pickle batch format, written as the originals were.

The real batches were pickled by Python 2 (protocol 2): their keys and the arrays' raw
data are Python 2 ``str``, which pickle writes as ``SHORT_BINSTRING`` / ``BINSTRING``
(Python 3 writes ``bytes`` differently). :class:`Py2Pickler` does the same, so the
loader is tested on the format it will meet.
"""

from __future__ import annotations

import io
import pickle
import struct
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


class Py2Pickler(pickle._Pickler):  # type: ignore[name-defined]
    """Protocol 2, with ``bytes`` and (ASCII) ``str`` written as Python 2 strings."""

    dispatch: ClassVar[dict[type, Any]] = dict(pickle._Pickler.dispatch)  # type: ignore[attr-defined]

    def _write_py2(self, data: bytes) -> None:
        if len(data) < 256:
            self.write(pickle.SHORT_BINSTRING + bytes([len(data)]) + data)
        else:
            self.write(pickle.BINSTRING + struct.pack("<i", len(data)) + data)

    def save_py2_str(self, obj: bytes) -> None:
        self._write_py2(obj)
        self.memoize(obj)

    def save_py2_text(self, obj: str) -> None:
        self._write_py2(obj.encode("ascii"))  # Python 2's str: 'u1', '|' in the arrays' dtypes
        self.memoize(obj)

    dispatch[bytes] = save_py2_str
    dispatch[str] = save_py2_text


def py2_pickle(obj: Any) -> bytes:
    buffer = io.BytesIO()
    Py2Pickler(buffer, protocol=2).dump(obj)
    return buffer.getvalue()


def make_batch(
    n: int, rng: np.random.Generator, label_offset: int = 0
) -> tuple[np.ndarray, list[int]]:
    """``n`` random images ``(n, 3072)`` uint8 and labels ``0 … 9``."""
    data = rng.integers(0, 256, size=(n, 3072), dtype=np.uint8)
    labels = [int((k + label_offset) % 10) for k in range(n)]
    return data, labels


def write_cifar10(
    folder: Path,
    per_batch: int = 4,
    n_test: int = 6,
    seed: int = 0,
    meta: bool = True,
    protocol: int | None = None,
) -> dict[str, tuple[np.ndarray, list[int]]]:
    """Write ``data_batch_1..5``, ``test_batch`` (and ``batches.meta``); return what was written.

    ``protocol=None`` writes Python-2-style pickles; an int writes Python 3 pickles of
    that protocol.
    """
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    written: dict[str, tuple[np.ndarray, list[int]]] = {}
    names = [f"data_batch_{k}" for k in range(1, 6)] + ["test_batch"]
    for index, name in enumerate(names):
        data, labels = make_batch(n_test if name == "test_batch" else per_batch, rng, index)
        written[name] = (data, labels)
        batch = {
            b"batch_label": f"{name} of 6".encode(),
            b"labels": labels,
            b"data": data,
            b"filenames": [f"img_{index}_{k}.png".encode() for k in range(len(labels))],
        }
        blob = py2_pickle(batch) if protocol is None else pickle.dumps(batch, protocol=protocol)
        (folder / name).write_bytes(blob)
    if meta:
        info = {
            b"num_cases_per_batch": per_batch,
            b"label_names": [c.encode() for c in CLASSES],
            b"num_vis": 3072,
        }
        (folder / "batches.meta").write_bytes(
            py2_pickle(info) if protocol is None else pickle.dumps(info, protocol=protocol)
        )
    return written
