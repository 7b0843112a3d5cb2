"""Seeded, deterministic training, single-process or under ``torchrun`` with DDP."""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DistributedSampler

from ..data import flip_horizontal, translate
from ._checkpoint import (
    CheckpointError,
    capture_rng_state,
    checkpoint_differences,
    load_checkpoint,
    restore_rng_state,
    save_checkpoint,
)
from ._data import TrainingData
from ._distributed import DistributedContext, setup_distributed
from ._metrics import _logits

__all__ = ["TrainConfig", "TrainResult", "train"]


@dataclass
class TrainConfig:
    """Hyper-parameters and bookkeeping of one training run.

    Attributes
    ----------
    epochs
        Number of passes over the training set.
    batch_size
        Global batch size ``b``; each of ``N`` processes takes ``b / N`` samples.
    lr
        Peak learning rate of AdamW (or SGD).
    weight_decay
        AdamW's decoupled weight decay.
    optimizer
        ``"adamw"`` or ``"sgd"`` (momentum 0.9).
    schedule
        ``"cosine"`` (decay to 0 over the run, per step) or ``"constant"``.
    warmup_epochs
        Linear warm-up, per step, over the first ``warmup_epochs`` epochs (a float;
        rounded to whole steps): step ``k`` of ``w`` trains at ``lr · (k + 1) / w``;
        the schedule then runs over the remaining steps (the cosine starts at ``lr``
        after the warm-up and reaches 0 at the end of the run). 0: no warm-up.
    seed
        Seeds the data order (identical on every rank) and each rank's generators
        (``seed + rank``).
    device
        ``"cpu"`` or ``"cuda"``.
    checkpoint
        Path written after every epoch (by rank 0), or ``None``.
    resume
        Continue from ``checkpoint`` if it exists.
    progress
        Report progress on rank 0, on stderr: a tqdm bar when stderr is a terminal,
        otherwise one line per epoch (so a log file gets no carriage returns).
    augment
        The usual light augmentation of CIFAR training: each training image, in each
        epoch, is cropped at a random position from itself padded by ``crop_padding``
        pixels of black ([`TrainingData.fill_value`][groupattn.training.TrainingData.fill_value]; a non-circular shift,
        [`groupattn.data.translate`][groupattn.data.translate]) and, with ``flip``, mirrored left to right
        with probability 1/2. The draws depend only on ``seed``, the epoch and the
        image's index, so they are the same for any number of processes and after
        resuming.
    crop_padding
        Padding of the random crops (0: no crops).
    flip
        Random horizontal flips (not for digits: a mirrored digit is another glyph).
    identity
        What is trained, beyond these settings: the command line stores the model's
        name and arguments, the data and ``--limit`` here. It is saved in the
        checkpoint, and resuming refuses a checkpoint whose identity or settings differ
        ([`checkpoint_differences`][groupattn.training.checkpoint_differences]).
    """

    epochs: int = 3
    batch_size: int = 32
    lr: float = 5e-3
    weight_decay: float = 1e-4
    optimizer: str = "adamw"
    schedule: str = "cosine"
    warmup_epochs: float = 0.0
    seed: int = 0
    device: str = "cpu"
    checkpoint: str | None = None
    resume: bool = False
    progress: bool = True
    augment: bool = False
    crop_padding: int = 4
    flip: bool = True
    identity: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.epochs < 0 or self.batch_size < 1 or not (0 < self.lr < math.inf):
            raise ValueError(
                f"TrainConfig: expected epochs >= 0, batch_size >= 1 and a finite lr > 0, got epochs={self.epochs}, "
                f"batch_size={self.batch_size}, lr={self.lr}"
            )
        if self.optimizer not in ("adamw", "sgd"):
            raise ValueError(
                f"TrainConfig: expected optimizer 'adamw' or 'sgd', got {self.optimizer!r}"
            )
        if self.schedule not in ("cosine", "constant"):
            raise ValueError(
                f"TrainConfig: expected schedule 'cosine' or 'constant', got {self.schedule!r}"
            )
        if (
            isinstance(self.warmup_epochs, bool)
            or not isinstance(self.warmup_epochs, int | float)
            or not (0 <= self.warmup_epochs < math.inf)
        ):
            raise ValueError(
                f"TrainConfig: expected warmup_epochs as a finite number >= 0, got {self.warmup_epochs!r}"
            )
        if self.crop_padding < 0:
            raise ValueError(f"TrainConfig: expected crop_padding >= 0, got {self.crop_padding}")


@dataclass
class TrainResult:
    """What [`train`][groupattn.training.train] returns.

    Attributes
    ----------
    model
        The trained model (unwrapped from DDP), in evaluation mode.
    history
        One entry per epoch: ``{"epoch", "loss", "train_accuracy"}`` (over all ranks).
    start_epoch
        The first epoch run (``> 0`` after resuming).
    resumed_from
        The checkpoint training continued from, or ``None`` if it started fresh.
    seconds, cpu_seconds
        Wall-clock and process CPU time of the training loop.
    """

    model: nn.Module
    history: list[dict[str, float]] = field(default_factory=list)
    start_epoch: int = 0
    resumed_from: str | None = None
    seconds: float = 0.0
    cpu_seconds: float = 0.0


def _optimizer(model: nn.Module, config: TrainConfig) -> torch.optim.Optimizer:
    if config.optimizer == "sgd":
        return torch.optim.SGD(model.parameters(), lr=config.lr, momentum=0.9)
    return torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)


def warmup_steps(config: TrainConfig, steps_per_epoch: int) -> int:
    """The number of warm-up steps: ``warmup_epochs · steps_per_epoch``, rounded, at most the run."""
    steps = round(config.warmup_epochs * steps_per_epoch)
    return max(0, min(steps, steps_per_epoch * config.epochs))


def _schedule(
    optimizer: torch.optim.Optimizer, config: TrainConfig, steps_per_epoch: int
) -> torch.optim.lr_scheduler.LambdaLR:
    total_steps = steps_per_epoch * config.epochs
    warmup = warmup_steps(config, steps_per_epoch)

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        if config.schedule == "constant" or total_steps <= warmup:
            return 1.0
        decay = total_steps - warmup
        return 0.5 * (1.0 + math.cos(math.pi * min(step - warmup, decay) / decay))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def _augmentation(config: TrainConfig, epoch: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Crop offsets ``(n, 2)`` and flips ``(n,)`` of every training image in ``epoch``."""
    gen = torch.Generator().manual_seed((config.seed * 1_000_003 + epoch) % 2**63)
    pad = config.crop_padding
    offsets = torch.randint(-pad, pad + 1, (n, 2), generator=gen)
    flips = torch.rand(n, generator=gen) < 0.5
    return offsets, flips & config.flip


def _augment(
    x: torch.Tensor,
    index: torch.Tensor,
    draws: tuple[torch.Tensor, torch.Tensor],
    config: TrainConfig,
    fill: tuple[float, ...],
) -> torch.Tensor:
    offsets, flips = draws
    if config.crop_padding > 0:
        x = translate(x, offsets[index], fill=fill)
    return flip_horizontal(x, flips[index]) if config.flip else x


def _progress(total: int, description: str, enabled: bool) -> Any:
    """A tqdm bar on stderr when ``enabled`` and stderr is a terminal, else ``None``."""
    if not enabled or not sys.stderr.isatty():
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:  # pragma: no cover - tqdm is in the viz/dev extras
        return None
    return tqdm(total=total, desc=description, file=sys.stderr, leave=False, dynamic_ncols=True)


def _check_optimizer_state(saved: dict[str, Any], model: nn.Module) -> None:
    """Every per-parameter state tensor (AdamW's moments) has its parameter's shape."""
    params = list(model.parameters())
    for key, entry in dict(saved.get("state", {})).items():
        if not isinstance(key, int) or not 0 <= key < len(params) or not isinstance(entry, dict):
            raise ValueError(f"optimizer state for parameter {key!r} of {len(params)}")
        for name, value in entry.items():
            if (
                isinstance(value, torch.Tensor)
                and value.dim() > 0
                and value.shape != params[key].shape
            ):
                raise ValueError(
                    f"optimizer state {name!r} of parameter {key} has shape {tuple(value.shape)}, "
                    f"the parameter {tuple(params[key].shape)}"
                )


def _resume(
    checkpoint: Path,
    config: TrainConfig,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LambdaLR,
    device: torch.device,
) -> dict[str, Any]:
    """Load ``checkpoint`` into the model, optimizer and schedule; refuse one from another run."""
    state = load_checkpoint(checkpoint, map_location=device)
    where = f"train: cannot resume from {str(checkpoint)!r}"
    saved = state["config"] if isinstance(state["config"], dict) else {}
    refused, _ = checkpoint_differences(saved, asdict(config))
    if refused:
        raise CheckpointError(f"{where}: it was written by another run ({'; '.join(refused)})")
    try:
        model.load_state_dict(state["model"])
        _check_optimizer_state(state["optimizer"], model)
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
    except (RuntimeError, ValueError, KeyError) as error:
        first = " ".join(str(error).split())[:200]
        raise CheckpointError(
            f"{where}: its model or optimizer does not fit this model ({first})"
        ) from None
    epoch = int(state["epoch"])
    if not 0 <= epoch <= config.epochs:
        raise CheckpointError(
            f"{where}: expected 0 to {config.epochs} completed epochs, got {epoch}"
        )
    return state


def train(
    model: nn.Module,
    data: TrainingData,
    config: TrainConfig | None = None,
    context: DistributedContext | None = None,
    on_epoch_end: Callable[[int, dict[str, float]], None] | None = None,
) -> TrainResult:
    """Train a classifier with cross-entropy, deterministically.

    The data order of each epoch is a permutation seeded by ``seed + epoch``
    (``DistributedSampler``), identical on every rank; rank
    ``r`` of ``N`` takes every ``N``-th sample of it, in batches of ``b / N``, and DDP
    averages the gradients. So the union of the ``N`` per-process batches of one step
    is exactly the single-process batch of that step, and the loss is its mean: with
    ``N`` processes the run reproduces the single-process run up to floating-point
    summation order, whenever the training-set size and ``b`` are divisible by ``N``
    (otherwise the sampler drops the last ``n mod N`` shuffled samples each epoch).

    Build the model with the same seed on every rank (DDP also broadcasts rank 0's
    parameters). With ``config.checkpoint`` rank 0 writes model, optimizer, schedule,
    completed epochs and every rank's random-number states after each epoch; with
    ``config.resume`` training continues from it, giving the same parameters as an
    uninterrupted run. With ``config.augment`` each image is randomly cropped and
    flipped, seeded by ``seed``, epoch and image (see [`TrainConfig`][groupattn.training.TrainConfig]). Runs are
    bitwise reproducible for a fixed device and number of
    threads (other thread counts reduce in another order).

    Parameters
    ----------
    model
        A classifier ``(B, C, H, W) → (B, classes)``.
    data
        The training data (only the training split is used here).
    config
        Hyper-parameters; [`TrainConfig`][groupattn.training.TrainConfig] defaults if ``None``.
    context
        The process's place in the run; [`setup_distributed`][groupattn.training.setup_distributed] (``torchrun``'s
        environment) if ``None``.
    on_epoch_end
        Called on every rank as ``on_epoch_end(epoch, summary)`` after each epoch.

    Returns
    -------
    TrainResult
    """
    config = config or TrainConfig()
    context = context or setup_distributed(config.device)
    world, rank = context.world_size, context.rank
    if config.batch_size % world:
        raise ValueError(
            f"train: expected a batch size divisible by the {world} processes, got {config.batch_size}"
        )
    local_batch = config.batch_size // world
    n = data.train_images.shape[0]
    if n < world:
        raise ValueError(
            f"train: expected at least {world} training samples (one per process), got {n}"
        )
    per_rank = n // world
    steps_per_epoch = math.ceil(per_rank / local_batch)

    model.to(context.device)
    optimizer = _optimizer(model, config)
    scheduler = _schedule(optimizer, config, steps_per_epoch)
    start_epoch = 0
    history: list[dict[str, float]] = []
    torch.manual_seed(config.seed + rank)
    checkpoint = Path(config.checkpoint) if config.checkpoint else None
    resumed_from = None
    if config.resume and checkpoint is not None and checkpoint.exists():
        state = _resume(checkpoint, config, model, optimizer, scheduler, context.device)
        resumed_from = str(checkpoint)
        start_epoch = int(state["epoch"])
        history = list(state.get("history", []))
        rng = state.get("rng", [])
        if len(rng) == world:
            restore_rng_state(rng[rank])
    elif config.resume and checkpoint is None:
        raise ValueError("train: expected a checkpoint path to resume from, got none")

    network: nn.Module = model
    if context.is_distributed:
        ids = [context.device.index] if context.device.type == "cuda" else None
        network = DistributedDataParallel(model, device_ids=ids)

    dataset = torch.utils.data.TensorDataset(data.train_images, data.train_labels)
    sampler: DistributedSampler[int] = DistributedSampler(
        dataset, num_replicas=world, rank=rank, shuffle=True, seed=config.seed, drop_last=True
    )
    images, labels = data.train_images, data.train_labels
    fill = data.fill_value
    started, cpu_started = time.perf_counter(), time.process_time()
    for epoch in range(start_epoch, config.epochs):
        network.train()
        sampler.set_epoch(epoch)
        order = torch.tensor(list(sampler), dtype=torch.long)
        draws = _augmentation(config, epoch, n) if config.augment else None
        bar = _progress(
            steps_per_epoch,
            f"epoch {epoch + 1}/{config.epochs}",
            config.progress and context.is_main,
        )
        totals = torch.zeros(
            3, dtype=torch.float64, device=context.device
        )  # loss sum, correct, count
        for start in range(0, order.numel(), local_batch):
            index = order[start : start + local_batch]
            x = images[index].to(context.device)
            y = labels[index].to(context.device)
            if draws is not None:
                x = _augment(x, index, draws, config, fill)
            logits = _logits(network(x))
            loss = F.cross_entropy(logits, y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()
            with torch.no_grad():
                totals += torch.stack(
                    [
                        loss.detach().double() * y.numel(),
                        (logits.argmax(-1) == y).sum().double(),
                        torch.tensor(float(y.numel()), dtype=torch.float64, device=context.device),
                    ]
                )
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loss=f"{loss.item():.3f}")
        if bar is not None:
            bar.close()
        if context.is_distributed:
            dist.all_reduce(totals)
        summary = {
            "epoch": float(epoch + 1),
            "loss": float(totals[0] / totals[2]),
            "train_accuracy": float(totals[1] / totals[2]),
        }
        history.append(summary)
        if config.progress and context.is_main and bar is None:
            print(
                f"epoch {epoch + 1}/{config.epochs}: loss {summary['loss']:.4f}, "
                f"train accuracy {100 * summary['train_accuracy']:.2f}%, {time.perf_counter() - started:.1f} s",
                file=sys.stderr,
                flush=True,
            )
        if checkpoint is not None:
            rng_states: list[Any] = [capture_rng_state()]
            if context.is_distributed:
                rng_states = [None] * world
                dist.all_gather_object(rng_states, capture_rng_state())
            if context.is_main:
                save_checkpoint(
                    checkpoint,
                    {
                        "model": model.state_dict(),
                        "optimizer": optimizer.state_dict(),
                        "scheduler": scheduler.state_dict(),
                        "epoch": epoch + 1,
                        "rng": rng_states,
                        "config": asdict(config),
                        "history": history,
                    },
                )
            if context.is_distributed:
                dist.barrier()
        if on_epoch_end is not None:
            on_epoch_end(epoch, summary)
    model.eval()
    return TrainResult(
        model=model,
        history=history,
        start_epoch=start_epoch,
        resumed_from=resumed_from,
        seconds=time.perf_counter() - started,
        cpu_seconds=time.process_time() - cpu_started,
    )
