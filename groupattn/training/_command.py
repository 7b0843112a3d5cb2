"""The ``groupattn train`` command."""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from .._atomic import write_atomic
from ..data import MNIST_SIDE, DataError, MissingExtraError
from ..groups import group_from_name
from ._data import _MNIST_SOURCES, DATA_SOURCES, TrainingData, check_data_source, load_training_data
from ._distributed import setup_distributed, teardown_distributed
from ._equivariance import EquivarianceCheck, check_classifier
from ._metrics import Evaluation, evaluate
from ._trainer import TrainConfig, train

__all__ = ["EXIT_CODES", "BuiltModel", "build_model", "data_model_kwargs", "register"]

#: Exit codes of ``groupattn train`` and ``groupattn demo``.
EXIT_CODES: dict[str, int] = {"ok": 0, "runtime_error": 1, "usage_error": 2, "missing_extra": 3}

_EXIT_MEANINGS = {
    "ok": "trained and evaluated",
    "runtime_error": "a crash (Python's code for an uncaught exception)",
    "usage_error": "bad arguments, or --data missing, malformed or unsafe (found before training)",
    "missing_extra": "--data needs an optional extra that is not installed (the message names it)",
}

def exit_codes_epilog() -> str:
    """The exit-code table for ``--help``."""
    rows = "\n".join(f"  {code}  {_EXIT_MEANINGS[name]}" for name, code in EXIT_CODES.items())
    sources = "\n".join(f"  {name:<17} {what}" for name, what in DATA_SOURCES.items())
    return (
        f"--data sources:\n{sources}\n  FOLDER            CIFAR-10 python batches (data_batch_1..5, test_batch), "
        f"or one sub-folder per class\n\nexit codes:\n{rows}"
    )


def _refuse(command: str, error: Exception) -> int:
    """Print ``error`` as one line on stderr; its exit code (3 for a missing extra, else 2)."""
    print(f"groupattn {command}: error: {' '.join(str(error).split())}", file=sys.stderr)
    return EXIT_CODES["missing_extra" if isinstance(error, MissingExtraError) else "usage_error"]


def preflight_data(command: str, source: str) -> int | None:
    """Check ``--data`` before any work: ``None`` if loadable, else an exit code (one line on stderr)."""
    try:
        check_data_source(source)
    except (MissingExtraError, DataError) as error:
        return _refuse(command, error)
    return None


def data_canvas(source: str, models: Sequence[str]) -> int | None:
    """The canvas of a named ``--data`` source for ``models`` (registry names or MODULE:FACTORY).

    Digits go on the first registry model's input side (else 32); MNIST on the largest
    registry side, at least 28; other sources keep their own size (``None``).
    """
    from ..models import get_spec, list_models

    sides = [int(get_spec(m).input_shape[-1]) for m in models if ":" not in m and m in list_models()]
    if source == "digits":
        return sides[0] if sides else 32
    if source in _MNIST_SOURCES:
        return max([MNIST_SIDE, *sides])
    return None


def data_model_kwargs(spec: str, data: TrainingData, given: dict[str, Any] | None = None) -> dict[str, Any]:
    """Keyword arguments that fit a registry model to ``data``: ``in_channels``,
    ``num_classes`` and ``image_size`` (an int for square images), unless ``given``.

    Empty for ``MODULE:FACTORY`` models, whose arguments are the user's.
    """
    if ":" in spec:
        return {}
    c, h, w = data.input_shape
    fitted: dict[str, Any] = {"in_channels": c, "num_classes": data.num_classes, "image_size": h if h == w else (h, w)}
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
        A name from :func:`groupattn.models.list_models` (built with
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
            raise ValueError(f"groupattn train: expected --model MODULE:FACTORY to exist, got {spec!r} ({error})") from error
        model = factory(**kwargs)
        if not isinstance(model, nn.Module):
            raise ValueError(f"groupattn train: expected {spec} to return a torch.nn.Module, got {type(model).__name__}")
        return BuiltModel(model, spec, group)
    from ..models import create, get_spec, list_models

    if spec not in list_models():
        raise ValueError(f"groupattn train: expected --model to be one of {list_models()} or MODULE:FACTORY, got {spec!r}")
    model = create(spec, equivariant=not baseline, **kwargs)
    label = f"{spec} ({'baseline' if baseline else 'equivariant'})"
    return BuiltModel(model, label, group or get_spec(spec).group)


def _format_summary(
    label: str, data: TrainingData, epochs: int, seconds: float, evaluation: Evaluation,
    check: EquivarianceCheck | None, max_shift: int,
) -> str:
    lines = [
        f"{label} on {data.name}: {data.train_images.shape[0]} train / {data.test_images.shape[0]} test "
        f"images, {epochs} epochs, {seconds:.1f} s",
        f"  test accuracy          {100 * evaluation.accuracy:6.2f}%",
        f"  shifted accuracy       {100 * evaluation.shifted_accuracy:6.2f}%   (random circular shifts up to ±{max_shift} px)",
        f"  shift consistency      {100 * evaluation.shift_consistency:6.2f}%",
        f"  rotated accuracy       {100 * evaluation.rotated_accuracy:6.2f}%   (mean over 0°, 90°, 180°, 270°)",
        f"  rotation consistency   {100 * evaluation.rotation_consistency:6.2f}%",
    ]
    described = {
        "rotation": ("any angle", "uniform in [0°, 360°), bilinear, zero outside the disc"),
        "circular_shift": ("circular shift", "up to ±{} px"),
        "crop_shift": ("crop shift", "random crops of the image padded by {} px"),
    }
    if evaluation.robustness:
        lines.append("  the papers' protocols: two random transformations per image; consistency = same class for both")
    for name, result in evaluation.robustness.items():
        title, what = described[name]
        lines.append(
            f"  {title:<15} accuracy {100 * result.accuracy:6.2f}%  consistency {100 * result.consistency:6.2f}%"
            f"   ({what.format(result.settings.get('max_shift'))})"
        )
    if check is not None:
        lines.append(
            f"  equivariance error     {check.max_error:.2e}  (logits under {check.group}, "
            f"{check.num_elements} elements, worst {check.worst_element})"
        )
    return "\n".join(lines)


def _learning_rate(args: argparse.Namespace) -> float:
    """``--lr`` if given, else the registry model's recommended rate, else 5e-3."""
    if args.lr is not None:
        return float(args.lr)
    if ":" not in args.model:
        from ..models import get_spec, list_models

        if args.model in list_models():
            return get_spec(args.model).learning_rate
    return 5e-3


def _digits_canvas(model: str) -> int:
    """The canvas of the bundled digits for ``model``: its registry input side, else 32."""
    return data_canvas("digits", [model]) or 32


def _run(args: argparse.Namespace) -> int:
    refused = preflight_data("train", args.data)
    if refused is not None:
        return refused
    try:
        data = load_training_data(
            args.data, limit=args.limit, seed=args.seed, canvas=data_canvas(args.data, [args.model]),
            normalize=args.normalize,
        )
    except DataError as error:  # a malformed file, an unsafe pickle: one line, before any training
        return _refuse("train", error)
    context = setup_distributed(args.device)
    try:
        model_args = parse_model_args(args.model_arg)
        model_args.update(data_model_kwargs(args.model, data, model_args))
        built = build_model(args.model, args.baseline, args.seed, args.group, **model_args)
        config = TrainConfig(
            epochs=args.epochs, batch_size=args.batch_size, lr=_learning_rate(args), seed=args.seed,
            device=args.device, checkpoint=args.checkpoint, resume=args.resume,
            progress=not args.no_progress, augment=args.augment, crop_padding=args.crop_padding,
            flip=not args.no_flip,
        )
        if context.is_main:
            print(
                f"training {built.label}: {sum(p.numel() for p in built.model.parameters()):,} parameters, "
                f"{context.world_size} process(es) on {context.device}",
                flush=True,
            )
        result = train(built.model, data, config, context)
        if not context.is_main:
            return 0
        model = result.model
        evaluation = evaluate(
            model, data.test_images, data.test_labels, max_shift=args.max_shift, seed=args.seed,
            robustness=True, crop_shift=args.crop_shift, fill=data.fill_value,
        )
        check = None
        if built.group is not None:
            group = group_from_name(built.group, data.input_shape)
            check = check_classifier(model, data.test_images[:4], group)
        print(_format_summary(built.label, data, len(result.history), result.seconds, evaluation, check, args.max_shift))
        if args.json:
            payload = {
                "model": built.label,
                "data": data.name,
                "history": result.history,
                "evaluation": evaluation.as_dict(),
                "equivariance": None if check is None else check.__dict__,
            }
            write_atomic(args.json, json.dumps(payload, indent=2))
        return 0
    finally:
        teardown_distributed(context)


def add_data_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--data`` and ``--normalize`` (shared by ``groupattn train`` and ``groupattn demo``)."""
    parser.add_argument(
        "--data", default="digits",
        help=f"{', '.join(DATA_SOURCES)}, or a folder: CIFAR-10's python batches or one sub-folder per class",
    )
    parser.add_argument(
        "--normalize", action="store_true", help="normalise each channel with the training split's mean and std"
    )


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
    p.add_argument("--model", required=True, help="registry name (see groupattn.models.list_models) or MODULE:FACTORY")
    p.add_argument("--baseline", action="store_true", help="train the registry model's non-equivariant baseline")
    p.add_argument("--model-arg", action="append", metavar="KEY=VALUE", help="keyword argument for the model (repeatable)")
    p.add_argument("--group", default=None, help="group for the final check (default: the registry model's group)")
    add_data_arguments(p)
    p.add_argument(
        "--augment", action="store_true",
        help="random crops (padding --crop-padding) and horizontal flips of the training images, seeded",
    )
    p.add_argument("--crop-padding", type=int, default=4, help="padding of the --augment crops (default 4)")
    p.add_argument("--no-flip", action="store_true", help="no horizontal flips in --augment (e.g. for digits)")
    p.add_argument("--limit", type=int, default=None, help="use only this many training samples")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=32, help="global batch size (split across processes)")
    p.add_argument(
        "--lr", type=float, default=None,
        help="peak learning rate (AdamW, cosine schedule); default: the registry model's, else 5e-3",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--checkpoint", default=None, help="checkpoint file written after every epoch")
    p.add_argument("--resume", action="store_true", help="continue from --checkpoint if it exists")
    p.add_argument("--max-shift", type=int, default=8, help="largest random circular shift of the consistency metrics")
    p.add_argument(
        "--crop-shift", type=int, default=4,
        help="padding of the non-circular shifts (random crops) of the crop-shift metrics (default 4)",
    )
    p.add_argument("--json", default=None, help="write the summary as JSON to this file")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    p.set_defaults(func=_run)
