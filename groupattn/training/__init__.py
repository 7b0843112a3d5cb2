"""Training and evaluation: seeded, deterministic, single-process or DDP under ``torchrun``.

Train any classifier on the bundled digits, a user's tensors or an image folder
(:func:`train`), save and resume checkpoints, measure accuracy together with how
predictions react to circular shifts and quarter turns (:func:`evaluate`), and check the
trained model's invariance under its group (:func:`check_classifier`). The
``groupattn train`` and ``groupattn demo`` commands are built on these.
"""

from ._checkpoint import capture_rng_state, load_checkpoint, restore_rng_state, save_checkpoint
from ._data import DataError, TrainingData, load_image_folder, load_training_data
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
from ._trainer import TrainConfig, TrainResult, train

__all__ = [
    "DataError",
    "DistributedContext",
    "EquivarianceCheck",
    "Evaluation",
    "TrainConfig",
    "TrainResult",
    "TrainingData",
    "accuracy",
    "accuracy_by_rotation",
    "accuracy_by_shift",
    "capture_rng_state",
    "check_classifier",
    "evaluate",
    "load_checkpoint",
    "load_image_folder",
    "load_training_data",
    "predict",
    "restore_rng_state",
    "rotation_consistency",
    "save_checkpoint",
    "setup_distributed",
    "shift_consistency",
    "teardown_distributed",
    "train",
]
