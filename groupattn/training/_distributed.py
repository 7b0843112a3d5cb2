"""Process-group set-up for ``torchrun`` (gloo on CPU, nccl on GPU)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

__all__ = ["DistributedContext", "setup_distributed", "teardown_distributed"]


@dataclass(frozen=True)
class DistributedContext:
    """Where this process sits in a (possibly single-process) training run.

    Attributes
    ----------
    rank
        Global rank ``0 … world_size − 1``.
    world_size
        Number of processes.
    local_rank
        Rank on this machine (selects the GPU).
    device
        The device this process trains on.
    backend
        ``"gloo"``, ``"nccl"`` or ``None`` for a single process.
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    backend: str | None = None

    @property
    def is_distributed(self) -> bool:
        """Whether more than one process takes part."""
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """Whether this is rank 0 (which prints, shows progress and writes checkpoints)."""
        return self.rank == 0


def _resolve_device(device: str | torch.device, local_rank: int) -> torch.device:
    dev = torch.device(device)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(
                "setup_distributed: expected a CUDA device for --device cuda, found none"
            )
        if dev.index is None:
            dev = torch.device("cuda", local_rank % torch.cuda.device_count())
    elif dev.type != "cpu":
        raise ValueError(f"setup_distributed: expected device 'cpu' or 'cuda', got {str(device)!r}")
    return dev


def setup_distributed(device: str | torch.device = "cpu") -> DistributedContext:
    """Join the process group ``torchrun`` describes, or run as a single process.

    Reads ``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK`` (set by ``torchrun``); with more
    than one process it initialises the default process group (``nccl`` for CUDA,
    ``gloo`` for CPU) unless one is already initialised.

    Parameters
    ----------
    device
        ``"cpu"`` or ``"cuda"`` (each process takes GPU ``LOCAL_RANK``).
    """
    if dist.is_available() and dist.is_initialized():
        rank, world = dist.get_rank(), dist.get_world_size()
        local_rank = int(os.environ.get("LOCAL_RANK", rank))
        dev = _resolve_device(device, local_rank)
        return DistributedContext(rank, world, local_rank, dev, str(dist.get_backend()))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    dev = _resolve_device(device, local_rank)
    if world <= 1:
        return DistributedContext(0, 1, 0, dev, None)
    backend = "nccl" if dev.type == "cuda" else "gloo"
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    dist.init_process_group(backend=backend, rank=rank, world_size=world)
    return DistributedContext(rank, world, local_rank, dev, backend)


def teardown_distributed(context: DistributedContext) -> None:
    """Destroy the process group if ``context`` is distributed and one is initialised."""
    if context.is_distributed and dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
