"""The ``groupattn train`` command."""

from __future__ import annotations

import argparse
import importlib
import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .._atomic import write_atomic
from .._command_line import (
    UsageError,
    add_common_arguments,
    check_device,
    check_distinct_outputs,
    check_output_path,
    json_text,
    run_command,
    seed_value,
)
from .._errors import ShapeError
from .._resources import BudgetError, estimate_model_memory, format_bytes
from ..actions import check_acts_on_grid
from ..data import MNIST_SIDE, MissingExtraError
from ..groups import describe_group_names, parse_group_name
from ._checkpoint import checkpoint_differences, load_checkpoint
from ._data import (
    _MNIST_SOURCES,
    DATA_SOURCES,
    MAX_IMAGE_PIXELS,
    TrainingData,
    check_data_source,
    load_training_data,
)
from ._distributed import setup_distributed, teardown_distributed
from ._equivariance import EquivarianceCheck, check_classifier
from ._metrics import Evaluation, evaluate
from ._trainer import TrainConfig, train

__all__ = ["EXIT_CODES", "BuiltModel", "build_model", "data_model_kwargs", "register"]

#: Exit codes of ``groupattn train`` and ``groupattn demo``.
EXIT_CODES: dict[str, int] = {
    "ok": 0,
    "runtime_error": 1,
    "usage_error": 2,
    "missing_extra": 3,
    "interrupted": 130,
}

_EXIT_MEANINGS = {
    "ok": "trained and evaluated",
    "runtime_error": "a crash: one line on stderr (--debug prints the traceback)",
    "usage_error": "a user error, one line on stderr, found before training: bad arguments, an output path that "
    "cannot be written, --data missing, malformed or unsafe, a model or input over --max-memory, a checkpoint "
    "that is unsafe, corrupt or from another run",
    "missing_extra": "--data needs an optional extra that is not installed (the message names it)",
    "interrupted": "Ctrl-C (no partial file is left behind)",
}


def exit_codes_epilog() -> str:
    """The exit-code table for ``--help``."""
    rows = "\n".join(f"  {code}  {_EXIT_MEANINGS[name]}" for name, code in EXIT_CODES.items())
    sources = "\n".join(f"  {name:<17} {what}" for name, what in DATA_SOURCES.items())
    return (
        f"--data sources:\n{sources}\n  FOLDER            CIFAR-10 python batches (data_batch_1..5, test_batch), "
        f"or one sub-folder per class\n\nexit codes:\n{rows}"
    )


def data_canvas(source: str, models: Sequence[str]) -> int | None:
    """The canvas of a named ``--data`` source for ``models`` (registry names or MODULE:FACTORY).

    Digits go on the first registry model's input side (else 32); MNIST on the largest
    registry side, at least 28; other sources keep their own size (``None``).
    """
    from ..models import get_spec, list_models

    sides = [
        int(get_spec(m).input_shape[-1]) for m in models if ":" not in m and m in list_models()
    ]
    if source == "digits":
        return sides[0] if sides else 32
    if source in _MNIST_SOURCES:
        return max([MNIST_SIDE, *sides])
    return None


def data_model_kwargs(
    spec: str, data: TrainingData, given: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Keyword arguments that fit a registry model to ``data``: ``in_channels``,
    ``num_classes`` and ``image_size`` (an int for square images), unless ``given``.

    Empty for ``MODULE:FACTORY`` models, whose arguments are the user's.
    """
    if ":" in spec:
        return {}
    c, h, w = data.input_shape
    fitted: dict[str, Any] = {
        "in_channels": c,
        "num_classes": data.num_classes,
        "image_size": h if h == w else (h, w),
    }
    return {k: v for k, v in fitted.items() if k not in (given or {})}


@dataclass
class BuiltModel:
    """A model built from a ``--model`` argument.

    Attributes
    ----------
    model
        The module.
    label
        Display name, e.g. ``"vit (equivariant)"``.
    group
        The group name it should be invariant to (``None`` if unknown).
    """

    model: nn.Module
    label: str
    group: str | None


#: Python spellings of the JSON constants (``--model-arg embed_bias=False`` must not pass
#: the string ``"False"``, which is true).
_PYTHON_CONSTANTS: dict[str, Any] = {"True": True, "False": False, "None": None}


def _parse_value(text: str) -> Any:
    if text in _PYTHON_CONSTANTS:
        return _PYTHON_CONSTANTS[text]
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def parse_model_args(items: list[str] | None) -> dict[str, Any]:
    """``["depth=2", "dim=32"]`` → ``{"depth": 2, "dim": 32}`` (values parsed as JSON if they can be)."""
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"groupattn train: expected --model-arg KEY=VALUE, got {item!r}")
        out[key] = _parse_value(value)
    return out


def build_model(
    spec: str, baseline: bool = False, seed: int = 0, group: str | None = None, **kwargs: Any
) -> BuiltModel:
    """Build the model named by ``--model``: a registry name or ``MODULE:FACTORY``.

    Parameters
    ----------
    spec
        A name from [`groupattn.models.list_models`][groupattn.models.list_models] (built with
        ``equivariant=not baseline``), or ``package.module:function`` returning a module.
    baseline
        Build the registry model's non-equivariant baseline.
    seed
        Seeds PyTorch before construction, so every rank builds identical weights.
    group
        The group to check against; defaults to the registry model's group.
    kwargs
        Passed to the registry's ``create`` or to the factory.
    """
    torch.manual_seed(seed)
    if ":" in spec:
        module_name, _, factory_name = spec.partition(":")
        try:
            factory = getattr(importlib.import_module(module_name), factory_name)
        except (ImportError, AttributeError) as error:
            raise ValueError(
                f"groupattn train: expected --model MODULE:FACTORY to exist, got {spec!r} ({error})"
            ) from error
        model = factory(**kwargs)
        if not isinstance(model, nn.Module):
            raise ValueError(
                f"groupattn train: expected {spec} to return a torch.nn.Module, got {type(model).__name__}"
            )
        return BuiltModel(model, spec, group)
    from ..models import create, get_spec, list_models

    if spec not in list_models():
        raise ValueError(
            f"groupattn train: expected --model to be one of {list_models()} or MODULE:FACTORY, got {spec!r}"
        )
    model = create(spec, equivariant=not baseline, **kwargs)
    label = f"{spec} ({'baseline' if baseline else 'equivariant'})"
    return BuiltModel(model, label, group or get_spec(spec).group)


def _format_summary(
    label: str,
    data: TrainingData,
    epochs: int,
    seconds: float,
    evaluation: Evaluation,
    check: EquivarianceCheck | None,
    max_shift: int,
    history: Sequence[dict[str, float]] = (),
) -> str:
    constant = evaluation.predicted_classes == 1
    meaningless = "   (meaningless: one class for every input)" if constant else ""
    lines = [
        f"{label} on {data.name}: {data.train_images.shape[0]} train / {data.test_images.shape[0]} test "
        f"images, {epochs} epochs, {seconds:.1f} s",
        f"  test accuracy          {_percent(evaluation.accuracy)}",
        f"  shifted accuracy       {_percent(evaluation.shifted_accuracy)}   (random circular shifts up to ±{max_shift} px)",
        f"  shift consistency      {_percent(evaluation.shift_consistency)}{meaningless}",
        f"  rotated accuracy       {_percent(evaluation.rotated_accuracy)}   (mean over 0°, 90°, 180°, 270°)",
        f"  rotation consistency   {_percent(evaluation.rotation_consistency)}{meaningless}",
    ]
    described = {
        "rotation": ("any angle", "uniform in [0°, 360°), bilinear, zero outside the disc"),
        "circular_shift": ("circular shift", "up to ±{} px"),
        "crop_shift": ("crop shift", "random crops of the image padded by {} px"),
    }
    if evaluation.robustness:
        lines.append(
            "  the papers' protocols: two random transformations per image; consistency = same class for both"
        )
    for name, result in evaluation.robustness.items():
        title, what = described[name]
        lines.append(
            f"  {title:<15} accuracy {_percent(result.accuracy)}  consistency {_percent(result.consistency)}"
            f"   ({what.format(result.settings.get('max_shift'))})"
        )
    if check is not None:
        lines.append(
            f"  equivariance error     {check.max_error:.2e}  (logits under {check.group}, "
            f"{check.num_elements} elements, worst {check.worst_element})"
        )
    diverged = next((int(h["epoch"]) for h in history if not math.isfinite(h["loss"])), None)
    if diverged is not None:
        lines.append(
            f"  warning: the training loss became NaN or infinite in epoch {diverged} (diverged: lower --lr)"
        )
    if constant:
        lines.append(
            "  warning: the model predicts one class for every test image (not trained enough, or diverged): "
            "its consistency figures reflect a constant prediction, not a learned invariance"
        )
    return "\n".join(lines)


def _percent(value: float) -> str:
    return f"{100 * value:6.2f}%" if math.isfinite(value) else "   n/a "


def _registry_setting(args: argparse.Namespace, key: str, default: float) -> float:
    """The registry model's training setting ``key`` (``"lr"`` or ``"warmup_epochs"``), else ``default``."""
    if ":" not in args.model:
        from ..models import get_spec, list_models

        if args.model in list_models():
            return get_spec(args.model).training_settings()[key]
    return default


def _learning_rate(args: argparse.Namespace) -> float:
    """``--lr`` if given, else the registry model's recommended rate, else 5e-3."""
    return float(args.lr) if args.lr is not None else _registry_setting(args, "lr", 5e-3)


def _warmup_epochs(args: argparse.Namespace) -> float:
    """``--warmup-epochs`` if given, else the registry model's warm-up, else 0."""
    if args.warmup_epochs is not None:
        return float(args.warmup_epochs)
    return _registry_setting(args, "warmup_epochs", 0.0)


def _digits_canvas(model: str) -> int:
    """The canvas of the bundled digits for ``model``: its registry input side, else 32."""
    return data_canvas("digits", [model]) or 32


def _check_numbers(args: argparse.Namespace) -> None:
    """Every number ``groupattn train`` takes, in range (``UsageError`` if not)."""
    if args.epochs < 0:
        raise UsageError(f"expected --epochs >= 0, got {args.epochs}")
    if args.batch_size < 1:
        raise UsageError(f"expected --batch-size >= 1, got {args.batch_size}")
    if args.lr is not None and not (0 < args.lr < math.inf):
        raise UsageError(f"expected --lr to be a finite positive number, got {args.lr}")
    if args.warmup_epochs is not None and not (0 <= args.warmup_epochs < math.inf):
        raise UsageError(
            f"expected --warmup-epochs to be a finite number >= 0, got {args.warmup_epochs}"
        )
    if args.limit is not None and args.limit < 1:
        raise UsageError(f"expected --limit >= 1, got {args.limit}")
    for option in ("max_shift", "crop_shift", "crop_padding"):
        if getattr(args, option) < 0:
            raise UsageError(
                f"expected --{option.replace('_', '-')} >= 0, got {getattr(args, option)}"
            )
    if args.resume and not args.checkpoint:
        raise UsageError("expected --checkpoint FILE with --resume, got none")


def _check_model_name(spec: str) -> None:
    """A registry name, or ``MODULE:FACTORY`` that imports (the user's code runs, as ``python -m`` would)."""
    if ":" in spec:
        module_name, _, factory_name = spec.partition(":")
        if not module_name or not factory_name:
            raise UsageError(f"expected --model MODULE:FACTORY, got {spec!r}")
        try:
            module = importlib.import_module(module_name)
        except Exception as error:
            raise UsageError(
                f"cannot import {module_name!r} for --model {spec!r}: {type(error).__name__}: {error}"
            ) from None
        if not callable(getattr(module, factory_name, None)):
            raise UsageError(
                f"expected --model {spec!r} to name a function, got no callable {factory_name!r} in {module_name!r}"
            )
        return
    from ..models import list_models

    if spec not in list_models():
        raise UsageError(
            f"expected --model to be one of {', '.join(list_models())} or MODULE:FACTORY, got {spec!r}"
        )


def _data_folder(source: str) -> str | None:
    """``--data`` when it names a folder (no output may be written inside it), else ``None``."""
    return source if source not in DATA_SOURCES and Path(source).is_dir() else None


def _identity(args: argparse.Namespace, model_args: dict[str, Any]) -> dict[str, Any]:
    """What the run trains beyond [`TrainConfig`][groupattn.training.TrainConfig]: compared when resuming."""
    return {
        "model": args.model,
        "baseline": bool(args.baseline),
        "model_args": dict(sorted(model_args.items())),
        "data": str(args.data),
        "limit": args.limit,
        "normalize": bool(args.normalize),
    }


def _plan_resume(args: argparse.Namespace, config: TrainConfig) -> str:
    """Check ``--resume`` against the checkpoint before training; what to tell the user."""
    path = Path(args.checkpoint)
    if not args.resume:
        return ""
    if not path.exists():
        return f"no checkpoint at {args.checkpoint}: starting fresh"
    state = load_checkpoint(path)
    refused, allowed = checkpoint_differences(
        state["config"] if isinstance(state["config"], dict) else {}, asdict(config)
    )
    if refused:
        raise UsageError(
            f"cannot resume from {args.checkpoint!r}: it was written by another run ({'; '.join(refused)})"
        )
    done = int(state["epoch"])
    if done > config.epochs:
        raise UsageError(
            f"cannot resume from {args.checkpoint!r}: it completed {done} epochs, more than --epochs {config.epochs}"
        )
    notes = f" ({'; '.join(allowed)})" if allowed else ""
    return f"resuming from {args.checkpoint}: {done} of {config.epochs} epochs done{notes}"


def _run(args: argparse.Namespace) -> int:
    return run_command(
        "train", _train, args, codes={MissingExtraError: EXIT_CODES["missing_extra"]}
    )


def _train(args: argparse.Namespace) -> int:
    # ---- everything the user gave, checked before any work
    _check_numbers(args)
    check_device(args.device)
    json_path = check_output_path(args.json, "--json")
    check_output_path(args.checkpoint, "--checkpoint")
    check_distinct_outputs(
        {"--json": args.json, "--checkpoint": args.checkpoint}, {"--data": _data_folder(args.data)}
    )
    _check_model_name(args.model)
    if args.group is not None:
        try:
            parse_group_name(args.group, module="--group")
        except ShapeError:  # a valid name that needs the data's shape (translations, p4, p4m)
            pass
    try:
        model_args = parse_model_args(args.model_arg)
    except ValueError as error:
        raise UsageError(str(error)) from None
    check_data_source(args.data)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    # ---- the data (decoded lazily, only what --limit asks for), then the model's cost from shapes
    data = load_training_data(
        args.data,
        limit=args.limit,
        seed=args.seed,
        canvas=data_canvas(args.data, [args.model]),
        normalize=args.normalize,
        **data_options(args),
    )
    model_args.update(data_model_kwargs(args.model, data, model_args))
    group = (
        parse_group_name(args.group, data.input_shape, module="--group")
        if args.group is not None
        else None
    )
    if group is not None:
        check_acts_on_grid(group, data.input_shape, module="--group")
    context = setup_distributed(args.device)
    try:
        local_batch = max(1, args.batch_size // context.world_size)
        try:
            estimate = estimate_model_memory(
                lambda: (
                    build_model(
                        args.model, args.baseline, args.seed, args.group, **model_args
                    ).model
                ),
                (local_batch, *data.input_shape),
                training=True,
                budget=args.max_memory,
                what=f"--model {args.model} with batch {local_batch}",
            )
        except BudgetError:
            raise
        except Exception as error:
            raise UsageError(
                f"--model {args.model} cannot be built with {model_args}: {type(error).__name__}: {error}"
            ) from None
        config = TrainConfig(
            epochs=args.epochs,
            batch_size=args.batch_size,
            lr=_learning_rate(args),
            warmup_epochs=_warmup_epochs(args),
            seed=args.seed,
            device=args.device,
            checkpoint=args.checkpoint,
            resume=args.resume,
            progress=not args.no_progress,
            augment=args.augment,
            crop_padding=args.crop_padding,
            flip=not args.no_flip,
            identity=_identity(args, model_args),
        )
        resume_note = _plan_resume(args, config) if args.checkpoint else ""
        built = build_model(args.model, args.baseline, args.seed, args.group, **model_args)
        if group is None and built.group is not None:
            group = parse_group_name(built.group, data.input_shape, module="--group")
            check_acts_on_grid(group, data.input_shape, module="--group")
        # ---- the work
        if context.is_main:
            print(
                f"training {built.label}: {estimate.parameters:,} parameters, estimated memory "
                f"{format_bytes(estimate.total_bytes)}, {context.world_size} process(es) on {context.device}",
                flush=True,
            )
            if any(data.skipped.values()):
                skipped = ", ".join(
                    f"{n} {why.replace('_', ' ')}" for why, n in data.skipped.items() if n
                )
                print(f"data: skipped {skipped}", flush=True)
            if resume_note:
                print(resume_note, flush=True)
        result = train(built.model, data, config, context)
        if not context.is_main:
            return 0
        model = result.model
        evaluation = evaluate(
            model,
            data.test_images,
            data.test_labels,
            max_shift=args.max_shift,
            seed=args.seed,
            robustness=True,
            crop_shift=args.crop_shift,
            fill=data.fill_value,
        )
        check = check_classifier(model, data.test_images[:4], group) if group is not None else None
        print(
            _format_summary(
                built.label,
                data,
                len(result.history),
                result.seconds,
                evaluation,
                check,
                args.max_shift,
                result.history,
            )
        )
        if json_path is not None:
            payload = {
                "model": built.label,
                "data": data.name,
                "resumed_from": result.resumed_from,
                "history": result.history,
                "evaluation": evaluation.as_dict(),
                "constant_prediction": evaluation.predicted_classes == 1,
                "equivariance": None if check is None else check.__dict__,
            }
            write_atomic(json_path, json_text(payload))
        return 0
    finally:
        teardown_distributed(context)


def add_data_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--data`` and ``--normalize`` (shared by ``groupattn train`` and ``groupattn demo``)."""
    parser.add_argument(
        "--data",
        default="digits",
        help=f"{', '.join(DATA_SOURCES)}, or a folder: CIFAR-10's python batches or one sub-folder per class",
    )
    parser.add_argument(
        "--normalize",
        action="store_true",
        help="normalise each channel with the training split's mean and std",
    )
    parser.add_argument(
        "--max-image-pixels",
        type=int,
        default=MAX_IMAGE_PIXELS,
        metavar="N",
        help=f"image folders: refuse an image over N pixels from its header, before decoding "
        f"(decompression bombs; default {MAX_IMAGE_PIXELS:,})",
    )
    parser.add_argument(
        "--follow-symlinks",
        action="store_true",
        help="image folders: follow links that lead outside the folder (default: skip and count them)",
    )
    parser.add_argument(
        "--on-corrupt",
        choices=["error", "skip"],
        default="error",
        help="image folders: refuse a corrupt image (default) or skip it and count it",
    )


def data_options(args: argparse.Namespace) -> dict[str, Any]:
    """The image-folder keywords of [`load_training_data`][groupattn.training.load_training_data] from ``add_data_arguments``' options."""
    if args.max_image_pixels < 1:
        raise UsageError(f"expected --max-image-pixels >= 1, got {args.max_image_pixels}")
    return {
        "max_image_pixels": args.max_image_pixels,
        "follow_symlinks": args.follow_symlinks,
        "on_corrupt": args.on_corrupt,
        "max_bytes": args.max_memory,
    }


def register(subparsers: Any) -> None:
    """Add ``groupattn train`` to the command's subparsers."""
    p = subparsers.add_parser(
        "train",
        help="train a model on the digits, (rotated) MNIST, CIFAR-10 or an image folder (also under torchrun)",
        description="Train a registry model (or MODULE:FACTORY) deterministically; run under "
        "`torchrun --nproc_per_node=N -m groupattn.cli train ...` for data-parallel training. "
        "Registry models are built for the data's channels, classes and image size.",
        epilog=exit_codes_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--model",
        required=True,
        help="registry name (see groupattn.models.list_models) or MODULE:FACTORY — a function in an importable "
        "module; importing and calling it runs that Python code, as `python -m` would",
    )
    p.add_argument(
        "--baseline",
        action="store_true",
        help="train the registry model's non-equivariant baseline",
    )
    p.add_argument(
        "--model-arg",
        action="append",
        metavar="KEY=VALUE",
        help="keyword argument for the model (repeatable)",
    )
    p.add_argument(
        "--group",
        default=None,
        help=f"group for the final check (default: the registry model's group): {describe_group_names()}",
    )
    add_data_arguments(p)
    p.add_argument(
        "--augment",
        action="store_true",
        help="random crops (padding --crop-padding) and horizontal flips of the training images, seeded",
    )
    p.add_argument(
        "--crop-padding", type=int, default=4, help="padding of the --augment crops (default 4)"
    )
    p.add_argument(
        "--no-flip", action="store_true", help="no horizontal flips in --augment (e.g. for digits)"
    )
    p.add_argument(
        "--limit",
        type=int,
        default=None,
        help="use only this many training images, and a third as many test images (at least 1), for quick runs",
    )
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument(
        "--batch-size", type=int, default=32, help="global batch size (split across processes)"
    )
    p.add_argument(
        "--lr",
        type=float,
        default=None,
        help="peak learning rate (AdamW, cosine schedule); default: the registry model's, else 5e-3",
    )
    p.add_argument(
        "--warmup-epochs",
        type=float,
        default=None,
        help="linear learning-rate warm-up over this many epochs (a float), then the cosine; "
        "default: the registry model's, else 0",
    )
    p.add_argument("--seed", type=seed_value, default=0, help="the run's seed, in [0, 2**63)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument(
        "--checkpoint",
        default=None,
        help="checkpoint file written (whole or not at all) after every epoch; holds tensors and plain values only",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue from --checkpoint if it exists (else start fresh, and say so); the file is loaded with "
        "weights_only=True, so it cannot run code, and one written by a run with another model, data or "
        "optimiser settings is refused",
    )
    p.add_argument(
        "--max-shift",
        type=int,
        default=8,
        help="largest random circular shift of the consistency metrics",
    )
    p.add_argument(
        "--crop-shift",
        type=int,
        default=4,
        help="padding of the non-circular shifts (random crops) of the crop-shift metrics (default 4)",
    )
    p.add_argument("--json", default=None, help="write the summary as JSON to this file")
    p.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress report (default: a bar on a terminal, one line per epoch otherwise)",
    )
    add_common_arguments(p)
    p.set_defaults(func=_run)
