"""Training and evaluation: seeded, deterministic, single-process or DDP under ``torchrun``.

Train any classifier on the bundled digits, (rotated) MNIST, CIFAR-10 batches, a user's
tensors or an image folder ([`train`][groupattn.training.train], [`load_training_data`][groupattn.training.load_training_data]), with optional
normalisation and crop / flip augmentation; save and resume checkpoints; measure
accuracy together with how predictions react to circular shifts and quarter turns
([`evaluate`][groupattn.training.evaluate]) and, as the papers measure it, to rotations by any angle and to
circular and non-circular shifts ([`rotation_robustness`][groupattn.training.rotation_robustness],
[`circular_shift_robustness`][groupattn.training.circular_shift_robustness], [`crop_shift_robustness`][groupattn.training.crop_shift_robustness]); and check the trained
model's invariance under its group ([`check_classifier`][groupattn.training.check_classifier]). The ``groupattn train``
and ``groupattn demo`` commands are built on these.
"""

from ._checkpoint import (
    CHECKPOINT_FORMAT,
    CheckpointError,
    capture_rng_state,
    checkpoint_differences,
    load_checkpoint,
    restore_rng_state,
    save_checkpoint,
)
from ._data import (
    DATA_SOURCES,
    DataError,
    TrainingData,
    check_data_source,
    load_image_folder,
    load_training_data,
)
from ._distributed import DistributedContext, setup_distributed, teardown_distributed
from ._equivariance import EquivarianceCheck, check_classifier
from ._metrics import (
    Evaluation,
    accuracy,
    accuracy_by_rotation,
    accuracy_by_shift,
    evaluate,
    predict,
    rotation_consistency,
    shift_consistency,
)
from ._robustness import (
    Robustness,
    accuracy_by_angle,
    circular_shift_robustness,
    crop_shift_robustness,
    rotation_robustness,
)
from ._trainer import TrainConfig, TrainResult, train

__all__ = [
    "CHECKPOINT_FORMAT",
    "DATA_SOURCES",
    "CheckpointError",
    "DataError",
    "DistributedContext",
    "EquivarianceCheck",
    "Evaluation",
    "Robustness",
    "TrainConfig",
    "TrainResult",
    "TrainingData",
    "accuracy",
    "accuracy_by_angle",
    "accuracy_by_rotation",
    "accuracy_by_shift",
    "capture_rng_state",
    "check_classifier",
    "check_data_source",
    "checkpoint_differences",
    "circular_shift_robustness",
    "crop_shift_robustness",
    "evaluate",
    "load_checkpoint",
    "load_image_folder",
    "load_training_data",
    "predict",
    "restore_rng_state",
    "rotation_consistency",
    "rotation_robustness",
    "save_checkpoint",
    "setup_distributed",
    "shift_consistency",
    "teardown_distributed",
    "train",
]
