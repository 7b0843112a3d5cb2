"""Training data: the bundled digits, a user's tensors, or an ImageFolder-style directory."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from ..data import load_digits

__all__ = ["TrainingData", "load_image_folder", "load_training_data"]

_IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif")


class DataError(ValueError):
    """Raised when training data cannot be loaded or has an unexpected layout."""


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
    """

    train_images: torch.Tensor
    train_labels: torch.Tensor
    test_images: torch.Tensor
    test_labels: torch.Tensor
    class_names: list[str]
    name: str = "tensors"

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
        return TrainingData(
            self.train_images[:limit], self.train_labels[:limit],
            self.test_images[:n_test], self.test_labels[:n_test], self.class_names, self.name,
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


def load_training_data(
    source: str | Path | TrainingData = "digits", limit: int | None = None, seed: int = 0, canvas: int = 32
) -> TrainingData:
    """Resolve the ``--data`` argument: ``"digits"``, a folder path, or ready :class:`TrainingData`.

    Parameters
    ----------
    source
        ``"digits"`` (the bundled digits, ``1×canvas×canvas``, 10 classes), a directory
        (see :func:`load_image_folder`) or a :class:`TrainingData`.
    limit
        Keep only this many training samples (and a third as many test samples).
    seed
        Seed of the train/test split.
    canvas
        Side of the digits' canvas (the 16 × 16 glyphs are centred on it; at least 16).
    """
    if isinstance(source, TrainingData):
        return source.limited(limit)
    if str(source) == "digits":
        split = load_digits(canvas=canvas, seed=seed)
        data = TrainingData(
            split.train_images, split.train_labels, split.test_images, split.test_labels,
            [str(k) for k in range(10)], "digits",
        )
        return data.limited(limit)
    return load_image_folder(source, seed=seed).limited(limit)
