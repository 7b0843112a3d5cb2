"""CIFAR-10 from a folder the user has, in its python-pickle batch format, read safely.

The "CIFAR-10 python version" is a folder (usually ``cifar-10-batches-py``) with
``data_batch_1`` … ``data_batch_5``, ``test_batch`` and ``batches.meta``: each batch a
pickle of a dict with ``data`` (a uint8 array ``(N, 3072)``: 1,024 red, then 1,024 green,
then 1,024 blue values of a 32 × 32 image, rows first) and ``labels`` (N ints 0 … 9);
``batches.meta`` has ``label_names``. Nothing is downloaded.

A pickle can run any code while it loads, so these files are read with a restricted
unpickler ([`load_pickle_safely`][groupattn.data.load_pickle_safely]) that knows only plain containers and NumPy's
array reconstruction, and builds the arrays itself.
"""

from __future__ import annotations

import io
import math
import pickle
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ._errors import DataError, UnsafePickleError

__all__ = [
    "CIFAR10_CLASSES",
    "MAX_PICKLE_BYTES",
    "CIFAR10Split",
    "channel_statistics",
    "find_cifar10",
    "load_cifar10",
    "load_pickle_safely",
    "normalize_images",
    "read_cifar10_batch",
]

CIFAR10_CLASSES: tuple[str, ...] = (
    "airplane",
    "automobile",
    "bird",
    "cat",
    "deer",
    "dog",
    "frog",
    "horse",
    "ship",
    "truck",
)
"""The ten CIFAR-10 classes, in label order (used when ``batches.meta`` is absent)."""

MAX_PICKLE_BYTES = 256 * 2**20
"""The largest pickle [`load_pickle_safely`][groupattn.data.load_pickle_safely] reads: 256 MiB (a CIFAR-10 batch is about 31 MB)."""

_TRAIN_FILES = tuple(f"data_batch_{k}" for k in range(1, 6))
_TEST_FILE = "test_batch"
_META_FILE = "batches.meta"
_SIDE = 32
_PIXELS = 3 * _SIDE * _SIDE

# ---------------------------------------------------------------- the restricted unpickler
_DTYPE_CODE = re.compile(r"^[<>|=]?(b1|[iu][1248]|f[248])$")
_BYTE_ORDERS = ("<", ">", "|", "=")


def _text(value: Any) -> Any:
    """Python 2 strings arrive as ``bytes`` (``encoding="bytes"``): ASCII ones become ``str``."""
    if isinstance(value, bytes):
        try:
            return value.decode("ascii")
        except UnicodeDecodeError:
            return value
    return value


class _DtypeSpec:
    """What the pickle says about a dtype; becomes a plain numeric ``numpy.dtype`` or an error."""

    def __init__(self, code: Any, align: Any = False, copy: Any = True) -> None:
        code = _text(code)
        if not isinstance(code, str) or not _DTYPE_CODE.match(code):
            raise UnsafePickleError(
                f"load_pickle_safely: expected a plain numeric dtype (bool, int, uint, float), got {code!r}"
            )
        self.dtype = np.dtype(code)

    def __setstate__(self, state: Any) -> None:
        if not isinstance(state, tuple) or len(state) < 5:
            raise UnsafePickleError(
                f"load_pickle_safely: expected a dtype state tuple, got {type(state).__name__}"
            )
        order, subarray, names, fields = _text(state[1]), state[2], state[3], state[4]
        if (
            order not in _BYTE_ORDERS
            or subarray is not None
            or names is not None
            or fields is not None
        ):
            raise UnsafePickleError(
                "load_pickle_safely: expected a plain dtype (no fields, no sub-arrays), got a structured one"
            )
        if order in "<>":
            self.dtype = self.dtype.newbyteorder(order)


class _ArraySpec:
    """What the pickle says about an array; ``build`` makes it from the bytes alone."""

    def __init__(self) -> None:
        self.array: np.ndarray | None = None

    def __setstate__(self, state: Any) -> None:
        if not isinstance(state, tuple) or len(state) not in (4, 5):
            raise UnsafePickleError(
                f"load_pickle_safely: expected an ndarray state tuple, got {type(state).__name__}"
            )
        shape, spec, fortran, raw = state[-4:]
        if not isinstance(shape, tuple) or not all(isinstance(s, int) and s >= 0 for s in shape):
            raise UnsafePickleError(
                f"load_pickle_safely: expected an array shape of non-negative ints, got {shape!r}"
            )
        if not isinstance(spec, _DtypeSpec):
            raise UnsafePickleError(
                f"load_pickle_safely: expected the array's dtype, got {type(spec).__name__}"
            )
        if isinstance(raw, str):
            raw = raw.encode("latin1")
        if not isinstance(raw, bytes | bytearray):
            raise UnsafePickleError(
                f"load_pickle_safely: expected the array's raw bytes, got {type(raw).__name__}"
            )
        expected = math.prod(shape) * spec.dtype.itemsize
        if len(raw) != expected:
            raise DataError(
                f"load_pickle_safely: expected {expected} bytes for an array {shape}, got {len(raw)}"
            )
        flat = np.frombuffer(bytes(raw), dtype=spec.dtype).copy()
        self.array = flat.reshape(shape, order="F" if fortran else "C")


class _Marker:
    """Stands for ``numpy.ndarray``: only ``_reconstruct`` accepts it; calling it is refused."""

    __slots__ = ()

    def __setstate__(self, state: Any) -> None:
        raise UnsafePickleError(
            "load_pickle_safely: expected data, got a state for numpy.ndarray itself (refused)"
        )


_NDARRAY = _Marker()


def _reconstruct(subtype: Any, shape: Any, code: Any) -> _ArraySpec:
    if subtype is not _NDARRAY:
        raise UnsafePickleError(
            "load_pickle_safely: expected _reconstruct(numpy.ndarray, …), got another type"
        )
    return _ArraySpec()


def _bytes(*args: Any) -> bytes:
    if any(isinstance(a, int) for a in args):  # bytes(n) allocates n bytes: refused
        raise UnsafePickleError(
            "load_pickle_safely: expected bytes from a string or buffer, got a size"
        )
    return bytes(*args)


class _Allowed:
    """A callable the pickle may name. Not a type (so ``NEWOBJ`` cannot bypass its checks)
    and not alterable (no ``__dict__``; any ``BUILD`` state is refused)."""

    __slots__ = ("_func",)

    def __init__(self, func: Callable[..., Any]) -> None:
        self._func = func

    def __call__(self, *args: Any) -> Any:
        return self._func(*args)

    def __setstate__(self, state: Any) -> None:
        raise UnsafePickleError(
            "load_pickle_safely: expected data, got a state for an allowed callable (refused)"
        )


#: The most elements ``list(...)`` / ``dict(...)`` may build while unpickling.
_MAX_BUILT = 10_000_000
_PRIMITIVES = (str, bytes, bytearray, int, float, bool, type(None))


def _flat(name: str, func: Callable[..., Any]) -> Callable[..., Any]:
    """``func`` restricted to primitive arguments (``str``, ``int``) or, for ``list`` / ``dict``,
    to a short sequence of primitives or pairs of them: a container argument could be a
    shared-reference bomb whose ``repr`` or copy is exponential."""

    def guarded(*args: Any) -> Any:
        for arg in args:
            if isinstance(arg, _PRIMITIVES) and not (
                name in ("list", "dict") and isinstance(arg, str | bytes)
            ):
                continue
            if (
                name in ("list", "dict")
                and isinstance(arg, list | tuple)
                and len(arg) <= _MAX_BUILT
            ):
                if all(
                    isinstance(a, _PRIMITIVES)
                    or (
                        isinstance(a, tuple)
                        and len(a) == 2
                        and all(isinstance(b, _PRIMITIVES) for b in a)
                    )
                    for a in arg
                ):
                    continue
            raise UnsafePickleError(
                f"load_pickle_safely: expected {name}() of plain values, got a {type(arg).__name__} argument (refused)"
            )
        return func(*args)

    return guarded


_ALLOWED: dict[tuple[str, str], Any] = {
    **{
        (module, name): _Allowed(_flat(name, value))
        for module in ("builtins", "__builtin__")
        for name, value in (
            ("dict", dict),
            ("list", list),
            ("bytes", _bytes),
            ("str", str),
            ("int", int),
        )
    },
    **{
        (module, "_reconstruct"): _Allowed(_reconstruct)
        for module in ("numpy.core.multiarray", "numpy._core.multiarray")
    },
    ("numpy", "ndarray"): _NDARRAY,
    ("numpy", "dtype"): _Allowed(_DtypeSpec),
}


class _RestrictedUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        try:
            return _ALLOWED[(module, name)]
        except KeyError:
            raise UnsafePickleError(
                f"load_pickle_safely: expected only dict, list, bytes, str, int and NumPy arrays, "
                f"got a reference to {module}.{name} (refused, nothing was run)"
            ) from None

    def persistent_load(self, pid: Any) -> Any:
        raise UnsafePickleError("load_pickle_safely: expected no persistent ids, got one (refused)")


def _finish(value: Any, seen: set[int] | None = None) -> Any:
    """Replace the array specs by their arrays, in dicts, lists and tuples.

    A container met twice (a shared or cyclic reference) is refused: a pickle of a few
    hundred bytes can otherwise describe an exponentially large tree.
    """
    seen = set() if seen is None else seen
    if isinstance(value, dict | list | tuple) and value:
        if id(value) in seen:
            raise UnsafePickleError(
                "load_pickle_safely: expected plain data, got a shared or cyclic reference (refused)"
            )
        seen.add(id(value))
    if isinstance(value, _ArraySpec):
        if value.array is None:
            raise UnsafePickleError(
                "load_pickle_safely: expected an array with its state, got an empty one"
            )
        return value.array
    if isinstance(value, _DtypeSpec):
        return value.dtype
    if isinstance(value, dict):
        return {k: _finish(v, seen) for k, v in value.items()}
    if isinstance(value, list):
        return [_finish(v, seen) for v in value]
    if isinstance(value, tuple):
        return tuple(_finish(v, seen) for v in value)
    if isinstance(value, _Marker):
        raise UnsafePickleError(
            "load_pickle_safely: expected data, got a bare reference to numpy.ndarray"
        )
    return value


def load_pickle_safely(source: str | Path | bytes, max_bytes: int = MAX_PICKLE_BYTES) -> Any:
    """Unpickle data that may not be trusted: plain containers and NumPy arrays only.

    The unpickler resolves no name but ``dict``, ``list``, ``bytes``, ``str`` and ``int``
    (from ``builtins`` / Python 2's ``__builtin__``) and NumPy's array reconstruction
    (``numpy.core.multiarray._reconstruct``, ``numpy.ndarray``, ``numpy.dtype``). Even
    those are stand-ins: arrays are rebuilt from their raw bytes with
    ``numpy.frombuffer``, for plain numeric dtypes only (bool, int, uint, float; no
    object, structured or sub-array dtypes), so nothing in the file is ever called.
    Any other reference (``os.system``, ``builtins.eval``, …), a persistent id, or an
    oversized file raises before anything it names is imported or run. Python 2 pickles
    are read with ``encoding="bytes"`` (their strings arrive as ``bytes``).

    Parameters
    ----------
    source
        A file path, or the pickle's bytes.
    max_bytes
        The largest file read ([`MAX_PICKLE_BYTES`][groupattn.data.MAX_PICKLE_BYTES], 256 MiB, by default).

    Returns
    -------
    Any
        The unpickled dicts, lists, tuples, strings, numbers and ``numpy.ndarray``.

    Raises
    ------
    UnsafePickleError
        For anything outside the allow-list.
    DataError
        For a missing, oversized or malformed file.
    """
    if isinstance(source, bytes | bytearray):
        data, label = bytes(source), "the given bytes"
    else:
        path = Path(source)
        label = str(path)
        if not path.is_file():
            raise DataError(
                f"load_pickle_safely: expected a file, got {label!r}, which does not exist"
            )
        size = path.stat().st_size
        if size > max_bytes:
            raise DataError(
                f"load_pickle_safely: expected a file of at most {max_bytes:,} bytes, got {size:,} in {label}"
            )
        data = path.read_bytes()
    if len(data) > max_bytes:
        raise DataError(
            f"load_pickle_safely: expected at most {max_bytes:,} bytes, got {len(data):,}"
        )
    try:
        return _finish(_RestrictedUnpickler(io.BytesIO(data), encoding="bytes").load())
    except (UnsafePickleError, DataError):
        raise
    except Exception as error:  # a malformed stream: truncated, wrong opcodes, wrong arguments
        raise DataError(
            f"load_pickle_safely: expected a readable pickle in {label}, got {type(error).__name__}: {error}"
        ) from None


# ---------------------------------------------------------------- CIFAR-10
def _keys_as_text(where: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise DataError(f"{where}: expected a pickled dict, got {type(value).__name__}")
    return {str(_text(k)): v for k, v in value.items()}


def read_cifar10_batch(path: str | Path) -> tuple[torch.Tensor, torch.Tensor]:
    """Read one CIFAR-10 python batch file safely ([`load_pickle_safely`][groupattn.data.load_pickle_safely]).

    Returns
    -------
    tuple of torch.Tensor
        uint8 images ``(N, 3, 32, 32)`` (RGB) and int64 labels ``(N,)``.

    Raises
    ------
    DataError
        If the file is not a CIFAR-10 batch (no ``data`` / ``labels``, wrong sizes).
    UnsafePickleError
        If the pickle refers to anything but containers and NumPy arrays.
    """
    where = f"read_cifar10_batch({Path(path).name})"
    batch = _keys_as_text(where, load_pickle_safely(path))
    if "data" not in batch or "labels" not in batch:
        raise DataError(f"{where}: expected the keys 'data' and 'labels', got {sorted(batch)}")
    data, labels = batch["data"], batch["labels"]
    if (
        not isinstance(data, np.ndarray)
        or data.dtype != np.uint8
        or data.ndim != 2
        or data.shape[1] != _PIXELS
    ):
        got = f"{data.dtype} {data.shape}" if isinstance(data, np.ndarray) else type(data).__name__
        raise DataError(f"{where}: expected 'data' as a uint8 array (N, {_PIXELS}), got {got}")
    label_array = np.asarray(labels) if isinstance(labels, list | np.ndarray) else None
    if (
        label_array is None
        or label_array.shape != (data.shape[0],)
        or not np.issubdtype(label_array.dtype, np.integer)
    ):
        raise DataError(
            f"{where}: expected {data.shape[0]} integer 'labels', got {type(labels).__name__}"
        )
    images = torch.from_numpy(data.reshape(-1, 3, _SIDE, _SIDE).copy())
    return images, torch.from_numpy(label_array.astype(np.int64))


def find_cifar10(path: str | Path) -> Path | None:
    """The CIFAR-10 batch folder at ``path`` or in ``path/cifar-10-batches-py``, or ``None``.

    A folder counts when it holds ``test_batch``, ``batches.meta`` or a ``data_batch_*``.
    """
    root = Path(path)
    for folder in (root, root / "cifar-10-batches-py"):
        if folder.is_dir() and (
            (folder / _TEST_FILE).is_file()
            or (folder / _META_FILE).is_file()
            or any(folder.glob("data_batch_*"))
        ):
            return folder
    return None


def channel_statistics(images: torch.Tensor) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel mean and standard deviation of images ``(N, C, H, W)`` (computed in float64)."""
    if images.dim() != 4 or images.shape[0] == 0:
        raise DataError(
            f"channel_statistics: expected a non-empty batch (N, C, H, W), got {tuple(images.shape)}"
        )
    flat = images.double().transpose(0, 1).reshape(images.shape[1], -1)
    return tuple(flat.mean(1).tolist()), tuple(flat.std(1, unbiased=False).tolist())


def normalize_images(
    images: torch.Tensor, mean: tuple[float, ...], std: tuple[float, ...]
) -> torch.Tensor:
    """``(images − mean) / std`` per channel, for images ``(N, C, H, W)``."""
    if len(mean) != images.shape[1] or len(std) != images.shape[1] or min(std) <= 0:
        raise DataError(
            f"normalize_images: expected {images.shape[1]} means and positive stds, got {len(mean)} and {list(std)}"
        )
    m = torch.tensor(mean, dtype=images.dtype).view(1, -1, 1, 1)
    s = torch.tensor(std, dtype=images.dtype).view(1, -1, 1, 1)
    return (images - m) / s


@dataclass
class CIFAR10Split:
    """CIFAR-10 train and test tensors.

    Attributes
    ----------
    train_images, test_images
        Float RGB images ``(N, 3, 32, 32)``: in ``[0, 1]``, or normalised.
    train_labels, test_labels
        int64 ``(N,)``, classes ``0 … 9``.
    class_names
        From ``batches.meta`` (else [`CIFAR10_CLASSES`][groupattn.data.CIFAR10_CLASSES]).
    normalization
        ``(mean, std)`` per channel applied to both splits (of the training images
        loaded), or ``None``.
    """

    train_images: torch.Tensor
    train_labels: torch.Tensor
    test_images: torch.Tensor
    test_labels: torch.Tensor
    class_names: list[str]
    normalization: tuple[tuple[float, ...], tuple[float, ...]] | None = None


def _class_names(folder: Path) -> list[str]:
    meta_file = folder / _META_FILE
    if not meta_file.is_file():
        return list(CIFAR10_CLASSES)
    meta = _keys_as_text(f"load_cifar10({_META_FILE})", load_pickle_safely(meta_file))
    names = meta.get("label_names")
    if not isinstance(names, list) or not names:
        raise DataError(
            f"load_cifar10: expected 'label_names' (a list) in {meta_file}, got {type(names).__name__}"
        )
    return [n.decode("latin1") if isinstance(n, bytes) else str(n) for n in map(_text, names)]


def _take(
    files: list[Path], limit: int | None, read: Callable[[Path], tuple[torch.Tensor, torch.Tensor]]
) -> tuple[torch.Tensor, torch.Tensor]:
    images: list[torch.Tensor] = []
    labels: list[torch.Tensor] = []
    count = 0
    for file in files:
        if limit is not None and count >= limit:
            break
        x, y = read(file)
        keep = x.shape[0] if limit is None else min(x.shape[0], limit - count)
        images.append(x[:keep])
        labels.append(y[:keep])
        count += keep
    return torch.cat(images).float().div_(255.0), torch.cat(labels)


def load_cifar10(
    path: str | Path,
    normalize: bool = False,
    limit: int | None = None,
    test_limit: int | None = None,
) -> CIFAR10Split:
    """Load CIFAR-10 from the python-pickle batches in a folder the user has.

    ``path`` is the batch folder (``data_batch_1`` … ``data_batch_5``, ``test_batch``,
    optionally ``batches.meta``) or its parent holding ``cifar-10-batches-py``. Every
    file is read with [`load_pickle_safely`][groupattn.data.load_pickle_safely]; nothing is downloaded. Memory: the
    full set is about 740 MB as float32; ``limit`` converts only the first images.

    Parameters
    ----------
    path
        The folder.
    normalize
        Subtract the per-channel mean and divide by the per-channel standard deviation
        of the training images loaded (for the full CIFAR-10 training set, about
        ``(0.491, 0.482, 0.447)`` and ``(0.247, 0.243, 0.262)``); the test images use
        the same statistics.
    limit, test_limit
        Keep only the first ``limit`` training and ``test_limit`` test images (in file
        order; CIFAR-10's batches are already shuffled).

    Returns
    -------
    CIFAR10Split
        RGB images ``(N, 3, 32, 32)``.

    Raises
    ------
    DataError
        For a missing file or a malformed batch (the message names the file).
    UnsafePickleError
        For a pickle that refers to anything but containers and NumPy arrays.
    """
    folder = find_cifar10(path)
    if folder is None:
        raise DataError(
            f"load_cifar10: expected a folder with CIFAR-10's python batches (data_batch_1..5, test_batch) "
            f"at {str(path)!r} or in its cifar-10-batches-py, got none"
        )
    missing = [name for name in (*_TRAIN_FILES, _TEST_FILE) if not (folder / name).is_file()]
    if missing:
        raise DataError(f"load_cifar10: expected {', '.join(missing)} in {folder}, got none there")
    for name, value in (("limit", limit), ("test_limit", test_limit)):
        if value is not None and value < 1:
            raise DataError(f"load_cifar10: expected a positive {name}, got {value}")
    names = _class_names(folder)
    train_x, train_y = _take([folder / f for f in _TRAIN_FILES], limit, read_cifar10_batch)
    test_x, test_y = _take([folder / _TEST_FILE], test_limit, read_cifar10_batch)
    for split, labels in (("train", train_y), ("test", test_y)):
        if labels.numel() and (int(labels.min()) < 0 or int(labels.max()) >= len(names)):
            raise DataError(
                f"load_cifar10: expected {split} labels in 0..{len(names) - 1}, got {int(labels.min())}..{int(labels.max())}"
            )
    normalization = None
    if normalize:
        normalization = channel_statistics(train_x)
        train_x = normalize_images(train_x, *normalization)
        test_x = normalize_images(test_x, *normalization)
    return CIFAR10Split(train_x, train_y, test_x, test_y, names, normalization)
