"""Data-parallel training: N processes with batch b/N reproduce one process with batch b."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import torch
import torch.multiprocessing as mp
from training_helpers import InvariantCNN, ddp_worker

from groupattn.training import (
    DistributedContext,
    TrainConfig,
    load_checkpoint,
    load_training_data,
    train,
)

# Stated tolerance: the two runs differ only in the summation order of the gradient
# average (all-reduce of two half-batch means vs one full-batch mean).
RTOL, ATOL = 1e-5, 1e-6
TESTS = Path(__file__).parent
ROOT = TESTS.parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _single_process(config: TrainConfig) -> tuple[dict[str, torch.Tensor], list[dict[str, float]]]:
    data = load_training_data("digits", limit=64)
    torch.manual_seed(0)
    model = InvariantCNN()
    result = train(model, data, config, DistributedContext())
    return model.state_dict(), result.history


def test_two_processes_match_one_process(tmp_path: Path) -> None:
    options = {"epochs": 2, "batch_size": 16, "lr": 1e-2, "seed": 3}
    mp.spawn(ddp_worker, args=(2, _free_port(), str(tmp_path), options), nprocs=2, join=True)
    ddp = torch.load(tmp_path / "ddp.pt")
    single, history = _single_process(TrainConfig(progress=False, **options))
    torch.manual_seed(0)
    initial = InvariantCNN().state_dict()
    for name, value in single.items():
        assert not torch.allclose(value, initial[name]), f"{name} did not train"
        torch.testing.assert_close(ddp["model"][name], value, rtol=RTOL, atol=ATOL, msg=name)
    for mine, theirs in zip(history, ddp["history"]):
        assert abs(mine["loss"] - theirs["loss"]) <= 1e-5 * abs(mine["loss"])
        assert mine["train_accuracy"] == theirs["train_accuracy"]


def test_torchrun_cli_matches_single_process(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
        "OMP_NUM_THREADS": "1",
    }
    common = [
        "train",
        "--model",
        "training_helpers:invariant_cnn",
        "--group",
        "translations",
        "--limit",
        "64",
        "--epochs",
        "1",
        "--batch-size",
        "16",
        "--seed",
        "1",
        "--no-progress",
    ]
    torchrun = Path(sys.executable).with_name("torchrun")
    ddp_run = subprocess.run(
        [
            str(torchrun),
            "--standalone",
            "--nproc_per_node=2",
            "-m",
            "groupattn.cli",
            *common,
            "--checkpoint",
            str(tmp_path / "ddp.pt"),
        ],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert ddp_run.returncode == 0, ddp_run.stderr[-3000:]
    assert "2 process(es)" in ddp_run.stdout
    assert "test accuracy" in ddp_run.stdout
    one_run = subprocess.run(
        [sys.executable, "-m", "groupattn.cli", *common, "--checkpoint", str(tmp_path / "one.pt")],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert one_run.returncode == 0, one_run.stderr[-3000:]
    ddp_state, one_state = (
        load_checkpoint(tmp_path / "ddp.pt"),
        load_checkpoint(tmp_path / "one.pt"),
    )
    assert ddp_state["epoch"] == one_state["epoch"] == 1
    assert len(ddp_state["rng"]) == 2 and len(one_state["rng"]) == 1
    for name, value in one_state["model"].items():
        torch.testing.assert_close(ddp_state["model"][name], value, rtol=RTOL, atol=ATOL, msg=name)
