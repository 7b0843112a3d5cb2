"""Safe by default: checkpoints that cannot run code, files written whole, costs known before they are paid."""

from __future__ import annotations

import os
import pickle
import resource
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from groupattn._atomic import atomic_open, check_output_path, write_atomic
from groupattn._resources import BudgetError, estimate_model_memory, parse_size
from groupattn.cli import main
from groupattn.groups import TorusTranslations, p4, p4m
from groupattn.training import (
    CheckpointError,
    TrainConfig,
    capture_rng_state,
    load_checkpoint,
    restore_rng_state,
    save_checkpoint,
)

ROOT = Path(__file__).resolve().parents[1]


def _state(epoch: int = 1) -> dict[str, object]:
    return {
        "model": {"w": torch.full((3,), float(epoch))},
        "optimizer": {},
        "scheduler": {},
        "epoch": epoch,
        "rng": [capture_rng_state()],
        "config": {},
        "history": [],
    }


# ---------------------------------------------------------------- 1. no code from data
class _Payload:
    """Unpickling this creates a marker file: what a malicious checkpoint would do."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str, ...]]:
        return (os.system, (f"touch {self.marker}",))


def test_crafted_pickle_checkpoint_is_refused_and_its_payload_never_runs(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    crafted = tmp_path / "crafted.pt"
    torch.save({"format": 2, "model": _Payload(str(marker))}, crafted)
    with pytest.raises(CheckpointError, match=r"crafted\.pt.*refused.*could run code"):
        load_checkpoint(crafted)
    assert not marker.exists()
    # the same file as a plain pickle (not a torch zip archive)
    raw = tmp_path / "raw.pt"
    raw.write_bytes(pickle.dumps(_Payload(str(marker))))
    with pytest.raises(CheckpointError, match=r"raw\.pt"):
        load_checkpoint(raw)
    assert not marker.exists()


def test_crafted_checkpoint_through_the_command_is_one_line_and_runs_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = tmp_path / "pwned"
    crafted = tmp_path / "run.pt"
    torch.save({"format": 2, "model": _Payload(str(marker))}, crafted)
    argv = [
        "train",
        "--model",
        "vit",
        "--limit",
        "16",
        "--epochs",
        "1",
        "--checkpoint",
        str(crafted),
        "--resume",
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "run.pt" in err[0] and "refused" in err[0]
    assert not marker.exists()


def test_format_one_and_foreign_and_truncated_checkpoints_are_named_errors(tmp_path: Path) -> None:
    import numpy as np

    old = tmp_path / "old.pt"  # format 1 pickled NumPy's state as an array
    torch.save({"format": 1, "rng": [{"numpy": np.random.get_state()}]}, old)  # noqa: NPY002
    with pytest.raises(
        CheckpointError, match=r"old\.pt.*format-1 checkpoint of an older groupattn"
    ):
        load_checkpoint(old)
    good = tmp_path / "good.pt"
    save_checkpoint(good, _state())
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(good.read_bytes()[:200])
    with pytest.raises(CheckpointError, match=r"truncated\.pt.*truncated or foreign"):
        load_checkpoint(truncated)
    text = tmp_path / "notes.pt"
    text.write_text("not a checkpoint")
    with pytest.raises(CheckpointError, match=r"notes\.pt.*truncated or foreign"):
        load_checkpoint(text)
    torch.save([1, 2], tmp_path / "list.pt")
    with pytest.raises(CheckpointError, match="without groupattn's format tag"):
        load_checkpoint(tmp_path / "list.pt")
    with pytest.raises(CheckpointError, match="folder"):
        load_checkpoint(tmp_path)


def test_random_states_round_trip_through_a_weights_only_file(tmp_path: Path) -> None:
    import random

    import numpy as np

    random.seed(5), np.random.seed(5), torch.manual_seed(5)  # noqa: NPY002
    save_checkpoint(tmp_path / "c.pt", _state())
    expected = (random.random(), np.random.rand(), torch.rand(1))  # noqa: NPY002
    random.seed(9), np.random.seed(9), torch.manual_seed(9)  # noqa: NPY002
    restore_rng_state(load_checkpoint(tmp_path / "c.pt")["rng"][0])
    assert (random.random(), np.random.rand()) == expected[:2]  # noqa: NPY002
    assert torch.equal(torch.rand(1), expected[2])


# ---------------------------------------------------------------- 2. files written whole
def test_a_symlink_at_the_output_path_leaves_its_target_untouched(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    link = tmp_path / "out.json"
    link.symlink_to(victim)
    write_atomic(link, "{}")
    assert victim.read_text() == "precious"
    assert not link.is_symlink() and link.read_text() == "{}"


def test_planted_symlinks_at_predictable_temporary_names_are_never_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    for name in ("run.pt.tmp", ".run.pt.tmp", "run.tmp", ".run.pt.0.tmp"):
        (tmp_path / name).symlink_to(victim)
    save_checkpoint(tmp_path / "run.pt", _state())
    assert victim.read_text() == "precious"
    assert load_checkpoint(tmp_path / "run.pt")["epoch"] == 1


def test_check_json_through_a_symlink_leaves_the_target_untouched(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (tmp_path / "link.json").symlink_to(victim)
    code = main(["check", "--model", "vit", "--no-verify", "--json", str(tmp_path / "link.json")])
    assert code == 0
    assert victim.read_text() == "precious"


def test_a_failed_or_interrupted_write_keeps_the_old_file_and_leaves_no_temporary(
    tmp_path: Path,
) -> None:
    target = tmp_path / "figure.png"
    target.write_text("old")
    for error in (RuntimeError("writer failed"), KeyboardInterrupt()):
        with pytest.raises(type(error)), atomic_open(target) as fh:
            fh.write(b"half")
            raise error
        assert target.read_text() == "old"
        assert sorted(p.name for p in tmp_path.iterdir()) == ["figure.png"]


_SLOW_SAVE = textwrap.dedent(
    """
    import signal, sys, time, torch
    from groupattn._atomic import atomic_open
    # a process started by a test worker may inherit SIGINT as ignored (Python then keeps
    # it ignored); a user's process has Python's own handler
    signal.signal(signal.SIGINT, signal.default_int_handler)
    path = sys.argv[1]
    with atomic_open(path) as fh:
        for i in range(10_000):
            fh.write(b"x" * 65536)
            if i == 5:
                print("writing", flush=True)
            time.sleep(0.01)
    """
)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT])
def test_a_save_killed_mid_write_leaves_the_previous_checkpoint_and_no_temporary(
    tmp_path: Path, sig: int
) -> None:
    ckpt = tmp_path / "run.pt"
    save_checkpoint(ckpt, _state(epoch=3))
    child = subprocess.Popen(
        [sys.executable, "-c", _SLOW_SAVE, str(ckpt)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "writing"
    child.send_signal(sig)
    child.wait(timeout=60)
    assert child.returncode != 0
    assert load_checkpoint(ckpt)["epoch"] == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.pt"]


def test_output_paths_are_checked_before_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(IsADirectoryError, match=r"--json .* it is a folder"):
        check_output_path(tmp_path, "--json")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        check_output_path(tmp_path / "no" / "x.json", "--json")
    locked = tmp_path / "locked"
    locked.mkdir()
    import groupattn._atomic as atomic

    real_create = atomic._create_temporary

    def refuse_in_locked(
        folder: Path, name: str
    ) -> tuple[int, Path | None]:  # as for a read-only folder
        if Path(folder) == locked:
            raise PermissionError(13, "Permission denied")
        return real_create(folder, name)

    monkeypatch.setattr(atomic, "_create_temporary", refuse_in_locked)
    with pytest.raises(PermissionError, match=r"cannot create a file in the folder .*locked'"):
        check_output_path(locked / "x.json", "--json")
    check_output_path(tmp_path / "fine.json", "--json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["locked"]  # the probe file is gone


@pytest.mark.parametrize(
    "argv",
    [
        ["train", "--model", "vit", "--epochs", "1", "--checkpoint", "{tmp}"],
        ["train", "--model", "vit", "--epochs", "1", "--json", "{tmp}/missing/x.json"],
        ["demo", "--quick", "--plot", "{tmp}/plot.txt"],
        ["check", "--model", "vit", "--graph", "{tmp}"],
    ],
    ids=["checkpoint-is-a-folder", "json-folder-missing", "plot-suffix", "graph-is-a-folder"],
)
def test_commands_refuse_unwritable_outputs_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    started = time.perf_counter()
    assert main([a.replace("{tmp}", str(tmp_path)) for a in argv]) == 2
    assert time.perf_counter() - started < 10
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "error:" in err[0]
    assert "epoch" not in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == []


# ---------------------------------------------------------------- 3. cost known before it is paid
def _resident_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@pytest.mark.parametrize(
    "argv",
    [
        ["train", "--model", "vit", "--model-arg", "dim=4000000", "--epochs", "1"],
        [
            "train",
            "--model",
            "vit",
            "--model-arg",
            "depth=100000",
            "--model-arg",
            "dim=1024",
            "--epochs",
            "1",
        ],
        ["train", "--model", "vit", "--batch-size", "10000000", "--epochs", "1"],
        ["check", "--model", "vit", "--input-shape", "2,1,100000,100000"],
        ["check", "--model", "vit", "--input-shape", "1000000,1,32,32"],
        ["check", "--model", "vit", "--input-shape", "4096,1,32,32", "--max-memory", "100M"],
        ["demo", "--quick", "--models", "vit", "--max-memory", "1M"],
    ],
    ids=[
        "dim",
        "depth",
        "batch",
        "check-huge-image",
        "check-huge-batch",
        "check-over-budget",
        "demo-over-budget",
    ],
)
def test_huge_requests_are_refused_quickly_and_cheaply(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    main(
        ["check", "--model", "vit", "--no-verify", "--input-shape", "1,1,32,32"]
    )  # imports and caches warm
    capsys.readouterr()
    before = _resident_mb()
    started = time.perf_counter()
    assert main(argv) == 2
    seconds = time.perf_counter() - started
    grown = _resident_mb() - before
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "error:" in err[0], err
    # the budget is 2 s; a hundred thousand blocks are built (on meta) until the budget trips
    assert seconds < (5.0 if "depth=100000" in argv else 2.0), seconds
    assert grown < 300, grown


def test_group_orders_are_closed_form() -> None:
    for group, order in (
        (p4(1024), 4 * 1024**2),
        (p4m(1024), 8 * 1024**2),
        (TorusTranslations(4096, 4096), 4096**2),
    ):
        started = time.perf_counter()
        assert group.order() == order
        assert time.perf_counter() - started < 0.01


def test_memory_estimate_without_allocating() -> None:
    from groupattn.models import create

    before = _resident_mb()
    estimate = estimate_model_memory(lambda: create("vit", dim=100_000), (8, 1, 32, 32))
    assert estimate.parameters > 10**9  # a billion-parameter model, counted without its weights
    assert _resident_mb() - before < 300
    small = estimate_model_memory(lambda: create("vit"), (8, 1, 32, 32), training=False)
    real = sum(p.numel() for p in create("vit").parameters())
    assert small.parameters == real and small.activation_bytes and small.activation_bytes > 0
    with pytest.raises(BudgetError, match=r"over the memory budget of 1\.0 KiB"):
        estimate.check(1024, "the model")
    assert parse_size("512M") == 512 * 2**20 and parse_size("1.5G") == int(1.5 * 2**30)
    for bad in ("", "-1G", "12Q", "lots"):
        with pytest.raises(ValueError, match="expected a positive size"):
            parse_size(bad)


def test_resume_refuses_another_runs_checkpoint_and_says_what_differs(tmp_path: Path) -> None:
    from groupattn.training import checkpoint_differences

    saved = TrainConfig(epochs=2, lr=1e-2, identity={"model": "vit", "limit": 64})
    from dataclasses import asdict

    same = asdict(saved)
    refused, allowed = checkpoint_differences(
        same, {**same, "checkpoint": "elsewhere.pt", "resume": True}
    )
    assert refused == [] and allowed == []
    refused, allowed = checkpoint_differences(
        same, {**same, "lr": 0.1, "identity": {"model": "vit", "limit": 32}}
    )
    assert refused == ["identity.limit: checkpoint 64, now 32", "lr: checkpoint 0.01, now 0.1"]
    refused, allowed = checkpoint_differences(same, {**same, "epochs": 4, "device": "cuda"})
    assert refused == [] and any("epochs" in a and "stretched" in a for a in allowed)
    assert any("device" in a for a in allowed)
    refused, _ = checkpoint_differences(same, {**same, "epochs": 1})
    assert refused == ["epochs: checkpoint 2, now 1"]


# ---------------------------------------------------------------- what a fresh-context attacker found (round 1)
def _tampered(tmp_path: Path, change: object, name: str = "bad.pt") -> Path:
    """A checkpoint of a real run with one entry changed by ``change(state)``."""
    good = tmp_path / "good.pt"
    if not good.exists():
        assert (
            main(
                [
                    "train",
                    "--model",
                    "vit",
                    "--limit",
                    "16",
                    "--batch-size",
                    "8",
                    "--epochs",
                    "1",
                    "--checkpoint",
                    str(good),
                ]
            )
            == 0
        )
    state = torch.load(good, weights_only=True)
    change(state)  # type: ignore[operator]
    torch.save(state, tmp_path / name)
    return tmp_path / name


def _resume_argv(checkpoint: Path) -> list[str]:
    """``train`` resuming ``checkpoint`` for a second epoch, with the settings ``_tampered`` used."""
    base = ["train", "--model", "vit", "--limit", "16", "--batch-size", "8"]
    return [*base, "--epochs", "2", "--checkpoint", str(checkpoint), "--resume"]


def _nested(levels: int) -> list[object]:
    x: list[object] = [0]
    for _ in range(levels):
        x = [x]
    return x


def _dag(levels: int) -> list[object]:
    x: list[object] = [0]
    for _ in range(levels):
        x = [x, x]
    return x


TAMPERED = {
    "stride-0 python state": lambda s: s["rng"][0]["python"].__setitem__(
        "state", torch.zeros(1, dtype=torch.int64).expand(10**12)
    ),
    "short torch state": lambda s: s["rng"][0].__setitem__(
        "torch", torch.zeros(3, dtype=torch.uint8)
    ),
    "epoch string": lambda s: s.__setitem__("epoch", "x"),
    "epoch bool": lambda s: s.__setitem__("epoch", True),
    "epoch negative": lambda s: s.__setitem__("epoch", -5),
    "history tensor": lambda s: s.__setitem__("history", [{"epoch": 1.0, "loss": torch.zeros(2)}]),
    "config tensor": lambda s: s["config"].__setitem__("seed", torch.zeros(1).expand(3 * 10**9)),
    "config dag": lambda s: s["config"]["identity"].__setitem__("limit", _dag(70)),
    "config shallow dag": lambda s: s["config"]["identity"].__setitem__("limit", _dag(25)),
    "config nested": lambda s: s["config"]["identity"].__setitem__("limit", _nested(200)),
}


@pytest.mark.parametrize("name", sorted(TAMPERED))
def test_tampered_checkpoints_are_refused_before_any_work(
    tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = _tampered(tmp_path, TAMPERED[name])
    capsys.readouterr()
    before = _resident_mb()
    started = time.perf_counter()
    code = main(_resume_argv(bad))
    captured = capsys.readouterr()
    assert code == 2, captured.err
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "bad.pt" in lines[0], lines
    assert "epoch 2/" not in captured.err and "resuming from" not in captured.out
    if name == "config shallow dag":
        assert "referenced twice" in lines[0], lines
    assert time.perf_counter() - started < 10 and _resident_mb() - before < 300


def test_optimizer_state_of_the_wrong_shape_is_refused_before_training(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def change(state: dict[str, object]) -> None:
        state["optimizer"]["state"][0]["exp_avg"] = torch.zeros(3)  # type: ignore[index]

    bad = _tampered(tmp_path, change)
    capsys.readouterr()
    code = main(_resume_argv(bad))
    captured = capsys.readouterr()
    assert code == 2 and "does not fit this model" in captured.err, captured.err
    assert "epoch 2/" not in captured.err


def test_the_library_refuses_another_runs_checkpoint_too(tmp_path: Path) -> None:
    from groupattn.models import create
    from groupattn.training import load_training_data, train

    data = load_training_data("digits", limit=16)
    config = TrainConfig(
        epochs=1, batch_size=8, lr=1e-3, checkpoint=str(tmp_path / "run.pt"), progress=False
    )
    train(create("vit"), data, config)
    other = TrainConfig(
        epochs=2,
        batch_size=8,
        lr=1e-2,
        checkpoint=str(tmp_path / "run.pt"),
        resume=True,
        progress=False,
    )
    with pytest.raises(
        CheckpointError, match=r"written by another run \(lr: checkpoint 0\.001, now 0\.01\)"
    ):
        train(create("vit"), data, other)


def test_text_and_zip_bomb_checkpoints_are_named_errors(tmp_path: Path) -> None:
    import zipfile

    text = tmp_path / "hello.pt"
    text.write_text("hello\n")
    with pytest.raises(CheckpointError, match=r"hello\.pt.*truncated or foreign"):
        load_checkpoint(text)
    bomb = tmp_path / "bomb.pt"
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("archive/data.pkl", b"\0" * 50_000_000)
    assert bomb.stat().st_size < 1_000_000
    before = _resident_mb()
    with pytest.raises(CheckpointError, match="compressed or larger than the file"):
        load_checkpoint(bomb)
    assert _resident_mb() - before < 30


def test_outputs_that_are_pipes_or_collide_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fifo = tmp_path / "f.json"
    os.mkfifo(fifo)
    with pytest.raises(PermissionError, match="device, pipe, socket"):
        check_output_path(fifo, "--json")
    images = tmp_path / "data" / "a"
    images.mkdir(parents=True)
    from PIL import Image

    for i in range(2):
        Image.new("L", (8, 8), color=i * 100).save(images / f"{i}.png")
    for argv in (
        [
            "train",
            "--model",
            "vit",
            "--json",
            str(tmp_path / "x"),
            "--checkpoint",
            str(tmp_path / "x"),
        ],
        [
            "train",
            "--model",
            "vit",
            "--data",
            str(tmp_path / "data"),
            "--json",
            str(images / "0.png"),
        ],
        ["demo", "--quick", "--json", str(tmp_path / "p.png"), "--plot", str(tmp_path / "p.png")],
        [
            "check",
            "--model",
            "vit",
            "--json",
            str(tmp_path / "c.dot"),
            "--graph",
            str(tmp_path / "c.dot"),
        ],
        ["train", "--model", "vit", "--json", str(fifo)],
    ):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "error:" in err[0], err
    if Path("/proc").is_dir():
        assert main(["check", "--model", "vit", "--json", "/proc/c.json"]) == 2
        assert "cannot create a file" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("option", "value"), [("--threads", "100000"), ("--seed", "-1"), ("--seed", str(2**64))]
)
def test_threads_and_seeds_out_of_range_are_usage_errors(
    option: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--model", "vit", "--epochs", "1", option, value])
    assert exit_.value.code == 2
    assert option in capsys.readouterr().err


def test_error_lines_escape_terminal_controls_and_drop_backtraces() -> None:
    from groupattn._command_line import one_line

    assert one_line("bad file 000\x1b[2J\rX.png") == "bad file 000\\x1b[2J X.png"
    assert (
        one_line("cannot allocate Exception raised from alloc at x.cpp:1 frame #0 0x1")
        == "cannot allocate"
    )


def test_a_postscript_file_named_png_never_reaches_ghostscript(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from groupattn.training import DataError, load_image_folder

    marker = tmp_path / "gs-ran"
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "gs").write_text(f"#!/bin/sh\ntouch {marker}\nexit 0\n")
    (fake / "gs").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")
    folder = tmp_path / "data" / "a"
    folder.mkdir(parents=True)
    (folder / "000.png").write_text("%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 16 16\nshowpage\n")
    with pytest.raises(DataError, match=r"000\.png"):
        load_image_folder(tmp_path / "data")
    assert not marker.exists()


def test_image_folders_and_model_sizes_over_the_memory_budget_are_refused_cheaply(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from PIL import Image

    for c in "ab":
        (tmp_path / "data" / c).mkdir(parents=True)
        for i in range(4):
            Image.new("L", (512, 512), color=40 * i).save(tmp_path / "data" / c / f"{i}.png")
    main(["check", "--model", "vit", "--no-verify", "--input-shape", "1,1,32,32"])  # warm
    capsys.readouterr()
    for argv in (
        ["train", "--model", "vit", "--data", str(tmp_path / "data"), "--max-memory", "4M"],
        ["train", "--model", "vit", "--model-arg", "image_size=512", "--max-memory", "1G"],
        ["train", "--model", "vit", "--model-arg", "image_size=4096"],
    ):
        before = _resident_mb()
        started = time.perf_counter()
        assert main(argv) == 2, argv
        assert time.perf_counter() - started < 10 and _resident_mb() - before < 300, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and ("memory budget" in err[0] or "--max-memory" in err[0]), err


def test_cifar_pickles_with_shared_references_or_container_calls_are_refused(
    tmp_path: Path,
) -> None:
    from groupattn.data import UnsafePickleError, load_pickle_safely

    dag = pickle.dumps({"data": 0, "labels": _dag(30)}, protocol=2)
    started = time.perf_counter()
    with pytest.raises(UnsafePickleError, match="shared or cyclic"):
        load_pickle_safely(dag)
    call_on_dag = b"\x80\x02cbuiltins\nstr\n" + pickle.dumps(_dag(29), 2)[2:-1] + b"\x85R."
    with pytest.raises(UnsafePickleError, match="plain values"):
        load_pickle_safely(call_on_dag)
    assert time.perf_counter() - started < 5


def _busy_build(cpu_seconds: float) -> torch.nn.Module:
    """A constructor that spends ``cpu_seconds`` of CPU creating small tensors."""
    started = time.process_time()
    while time.process_time() - started < cpu_seconds:
        torch.zeros(8).add_(1.0)
    return torch.nn.Linear(2, 2)


def _sleepy_build(wall_seconds: float) -> torch.nn.Module:
    """A constructor that waits ``wall_seconds`` (another process holding the CPU) and
    then creates its tensors."""
    time.sleep(wall_seconds)
    torch.zeros(8)
    return torch.nn.Linear(2, 2)


def test_the_build_deadline_counts_this_process_cpu_time_not_a_busy_machine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import groupattn._resources as resources

    monkeypatch.setattr(resources, "MAX_BUILD_SECONDS", 0.2)
    with pytest.raises(BudgetError, match=r"takes over 0\.2 s"):
        estimate_model_memory(lambda: _busy_build(0.6), (1, 2))
    # waiting (the machine loaded by others) is not building: no refusal
    estimate = estimate_model_memory(lambda: _sleepy_build(0.5), (1, 2))
    assert estimate.parameters == 6
