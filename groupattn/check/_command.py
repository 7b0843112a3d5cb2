"""``groupattn check``: certify a registered model or a factory, and verify it numerically.

The checker composes the declared contracts of the network's parts; the numerical
check (on by default; ``--no-verify`` skips it) then measures equivariance in float64
on a seeded random input. A network the checker certifies but the numbers refute is
never reported as certified: its status is ``disagreement``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import math
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .._atomic import write_atomic
from .._command_line import (
    UsageError,
    add_common_arguments,
    check_distinct_outputs,
    check_output_path,
    json_text,
    one_line,
    seed_value,
)
from .._errors import GroupattnError
from .._resources import BudgetError, estimate_model_memory
from ..actions import FieldType, GridField, check_acts_on_grid
from ..groups import Group, GroupError, describe_group_names, parse_group_name
from ._certificate import EXIT_CODES

__all__ = [
    "DEFAULT_VERIFY_BUDGET_S",
    "EXIT_CODES",
    "MAX_INPUT_ELEMENTS",
    "check_status",
    "register",
    "run",
]


_MEANINGS = {
    "certified": "certified equivariant or invariant, not refuted numerically",
    "runtime_error": "a crash (model factory, checker or numerical check); Python's code for an uncaught exception",
    "usage_error": "bad arguments, found before any work; or a numerical check over its budget",
    "broken": "the checker found a node that breaks equivariance",
    "unverified": "the checker cannot tell (a part without a contract, an untraceable model)",
    "disagreement": "certified by the checker, refuted by the numerical check: not a certificate",
}

#: The largest example input ``--input-shape`` may ask for, in elements (checked before allocating).
MAX_INPUT_ELEMENTS = 2**24

#: Default budget of the numerical check, in estimated seconds (``--verify-budget``).
DEFAULT_VERIFY_BUDGET_S = 300.0


def _epilog() -> str:
    rows = "\n".join(
        f"  {code}  {status:<14} {_MEANINGS[status]}" for status, code in EXIT_CODES.items()
    )
    return (
        'exit codes (the JSON repeats them as "status" and "exit_code"):\n'
        f"{rows}\n\n"
        "--group takes a built-in name or MODULE:FACTORY: FACTORY() returns a Group, or a\n"
        "(Group, FieldType) pair that also gives the input's field type (e.g. a G-set of tokens).\n"
        f"--input-shape is refused beyond {MAX_INPUT_ELEMENTS:,} elements; the numerical check is\n"
        "estimated first (elements x one forward pass) and refused beyond --verify-budget seconds."
    )


def register(subparsers: Any) -> None:
    """Add the ``check`` subcommand to the ``groupattn`` parser."""
    p = subparsers.add_parser(
        "check",
        help="certify a network from its parts' contracts and verify it numerically "
        "(exit 0 certified, 3 broken, 4 unverified, 5 disagreement; 2 usage, 1 crash)",
        description=__doc__,
        epilog=_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "factory",
        nargs="?",
        metavar="MODULE:FACTORY",
        help="the same as --model MODULE:FACTORY (the form of groupattn 0.1, kept)",
    )
    p.add_argument(
        "--model",
        metavar="NAME|MODULE:FACTORY",
        help="a registered model name (groupattn.models.list_models()), or MODULE:FACTORY: a function of no "
        "arguments returning the model; importing and calling it runs that Python code, as `python -m` would "
        "(the syntax of groupattn train)",
    )
    p.add_argument(
        "--baseline", action="store_true", help="check the model's non-equivariant baseline"
    )
    p.add_argument(
        "--input-shape",
        help="B,C,H,W, or B,N,C for tokens (default for --model: 2 and the model's input shape)",
    )
    p.add_argument(
        "--group",
        metavar="NAME|MODULE:FACTORY",
        help=f"the acting group: {describe_group_names()}; or MODULE:FACTORY returning a Group or a "
        "(Group, FieldType) pair (default for --model: the model's)",
    )
    p.add_argument(
        "--verify",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="measure equivariance numerically in float64 (default: on; --no-verify skips it)",
    )
    p.add_argument(
        "--verify-budget",
        type=float,
        default=DEFAULT_VERIFY_BUDGET_S,
        metavar="SECONDS",
        help=f"refuse a numerical check estimated to take longer (default {DEFAULT_VERIFY_BUDGET_S:g})",
    )
    p.add_argument("--json", metavar="FILE", help="write the certificate as JSON")
    p.add_argument("--graph", metavar="FILE", help="write the graph (.dot, .png, .svg or .pdf)")
    p.add_argument(
        "--seed", type=seed_value, default=0, help="seed of the random example input, in [0, 2**63)"
    )
    add_common_arguments(p)
    p.add_argument(
        "--traceback",
        action="store_true",
        dest="debug",
        help="the same as --debug (kept for 0.1 scripts)",
    )
    p.set_defaults(func=run)


# ---------------------------------------------------------------------------- status
def check_status(cert: Any) -> str:
    """The status of a certificate: ``certified``, ``broken``, ``unverified`` or ``disagreement``.

    ``disagreement``: the checker certified the network and the numerical check refuted
    it ([`attach_verification`][groupattn.check.attach_verification] lists it and demotes the verdict).
    """
    return str(cert.status)


# ---------------------------------------------------------------------------- plan (no work)
@dataclass
class _Plan:
    build: Callable[[], Any]
    shape: tuple[int, ...]
    group: Group
    input_type: FieldType | None
    json_path: Path | None
    graph_path: Path | None


def _parse_shape(text: str) -> tuple[int, ...]:
    try:
        shape = tuple(int(s) for s in text.replace("x", ",").split(",") if s.strip())
    except ValueError as err:
        raise UsageError(
            f"expected --input-shape as comma-separated integers (B,C,H,W), got {text!r}"
        ) from err
    if len(shape) < 2 or any(s < 1 for s in shape):
        raise UsageError(
            f"expected --input-shape as at least two positive integers (B,C,H,W), got {text!r}"
        )
    return shape


def _check_size(shape: tuple[int, ...]) -> None:
    size = math.prod(shape)
    if size > MAX_INPUT_ELEMENTS:
        raise UsageError(
            f"expected --input-shape of at most {MAX_INPUT_ELEMENTS:,} elements, got {'x'.join(map(str, shape))} "
            f"= {size:,} elements"
        )


def _import(spec: str, what: str) -> Callable[..., Any]:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise UsageError(f"expected {what} as MODULE:FACTORY, got {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except Exception as err:
        raise UsageError(
            f"cannot import {module_name!r} for {what} {spec!r}: {type(err).__name__}: {err}"
        ) from err
    factory = getattr(module, attr, None)
    if factory is None:
        raise UsageError(
            f"cannot import {spec!r} for {what}: module {module_name!r} has no attribute {attr!r}"
        )
    if not callable(factory):
        raise UsageError(f"expected {what} {spec!r} to be callable, got {type(factory).__name__}")
    return factory  # type: ignore[no-any-return]


def _spatial(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The grid a group name is resolved against (a square grid for tokens ``(B, N, C)``)."""
    if len(shape) == 3:
        side = math.isqrt(shape[1])
        return (side, side)
    return shape


def _resolve_group(text: str, shape: tuple[int, ...]) -> tuple[Group, FieldType | None]:
    if ":" in text:
        factory = _import(text, "--group")
        try:
            made = factory()
        except Exception as err:
            raise UsageError(
                f"--group factory {text!r} raised {type(err).__name__}: {err}"
            ) from err
        if isinstance(made, Group):
            return made, None
        if (
            isinstance(made, tuple)
            and len(made) == 2
            and isinstance(made[0], Group)
            and isinstance(made[1], FieldType)
        ):
            return made[0], made[1]
        raise UsageError(
            f"expected --group factory {text!r} to return a Group or a (Group, FieldType) pair, "
            f"got {type(made).__name__}"
        )
    try:
        return parse_group_name(text, _spatial(shape), module="--group"), None
    except GroupError as err:
        raise UsageError(str(err)) from err


def _check_writable(path_text: str, option: str) -> Path:
    check_output_path(path_text, option)
    return Path(path_text)


def _plan(args: argparse.Namespace) -> _Plan:
    """Check every argument; build nothing, allocate nothing."""
    if bool(args.model) == bool(args.factory):
        raise UsageError("expected exactly one of --model NAME or --model MODULE:FACTORY")
    factory_text: str = args.factory or (args.model if ":" in args.model else "")
    registry_name = None if factory_text else args.model
    if args.baseline and not registry_name:
        raise UsageError("--baseline applies to a registry model only (--model NAME)")
    if not 0 < args.verify_budget < math.inf:
        raise UsageError(
            f"expected --verify-budget to be positive seconds, got {args.verify_budget}"
        )
    shape = _parse_shape(args.input_shape) if args.input_shape else None
    group_text = args.group
    build: Callable[[], Any]
    if registry_name:
        from ..models import create, get_spec

        try:
            spec = get_spec(registry_name)
        except KeyError as err:
            raise UsageError(str(err).strip("\"'")) from err
        if shape is not None and tuple(shape[1:]) != tuple(spec.input_shape):
            raise UsageError(
                f"expected --input-shape B,{','.join(map(str, spec.input_shape))} for --model {args.model}, "
                f"got {','.join(map(str, shape))}"
            )
        shape = shape or (2, *spec.input_shape)
        group_text = group_text or spec.group
        name, equivariant = args.model, not args.baseline

        def build() -> Any:
            return create(name, equivariant=equivariant)

    else:
        build = _import(factory_text, "--model")
    if shape is None:
        raise UsageError("--input-shape is required with MODULE:FACTORY")
    if group_text is None:
        raise UsageError("--group is required with MODULE:FACTORY")
    _check_size(shape)
    group, input_type = _resolve_group(group_text, shape)
    meta = torch.empty(shape, device="meta")
    try:
        if input_type is None:
            from ._certify import default_input_type

            if isinstance(
                default_input_type(meta, group), GridField
            ):  # the group must move pixels exactly
                check_acts_on_grid(group, shape, module="--group")
        else:
            input_type.check(meta, "--input-shape")
    except GroupError as err:
        raise UsageError(
            f"--input-shape {','.join(map(str, shape))} does not fit the group's input: {err}"
        ) from err
    json_path = _check_writable(args.json, "--json") if args.json else None
    check_distinct_outputs({"--json": args.json, "--graph": args.graph})
    graph_path = None
    if args.graph:
        graph_path = _check_writable(args.graph, "--graph")
        if graph_path.suffix.lower() not in (".dot", ".gv", ".png", ".svg", ".pdf"):
            raise UsageError(
                f"expected --graph to end in .dot, .png, .svg or .pdf, got {args.graph!r}"
            )
    _check_memory(build, shape, args)
    return _Plan(build, shape, group, input_type, json_path, graph_path)


#: Copies of the model's activations the checker and the numerical check hold at once
#: (the traced run, the probes of the relations, the transformed and the reference
#: outputs), measured: a circular conv net on a 2048² input under p4 peaked at 2.8 GB
#: against 0.57 GB of float64 activations.
CHECK_ACTIVATION_COPIES = 5


def _check_memory(
    build: Callable[[], Any], shape: tuple[int, ...], args: argparse.Namespace
) -> None:
    """Refuse a model and input over ``--max-memory`` before building or allocating them.

    The model is built with its floating-point tensors on the ``meta`` device and run on
    a ``meta`` input; the numerical check runs it in float64 (twice the float32 bytes),
    and the checker and the check hold ``CHECK_ACTIVATION_COPIES`` copies of the
    activations.
    """
    try:
        estimate = estimate_model_memory(build, shape, training=False, dtype=torch.float32)
    except BudgetError:
        raise
    except (
        Exception,
        SystemExit,
    ):  # the factory's own failure: reported by the run, with its message
        return
    scale = 2 if args.verify else 1
    activations = estimate.activation_bytes or 0
    total = scale * (
        estimate.input_bytes + estimate.state_bytes + CHECK_ACTIVATION_COPIES * activations
    )
    if total > args.max_memory:
        from .._resources import format_bytes

        raise UsageError(
            f"the model on --input-shape {','.join(map(str, shape))} would need about {format_bytes(total)} "
            f"({estimate.parameters:,} parameters, {format_bytes(activations)} of activations per pass"
            f"{', in float64 for --verify' if args.verify else ''}), over --max-memory {format_bytes(args.max_memory)}: "
            "pass a smaller --input-shape or a larger --max-memory"
        )


# ---------------------------------------------------------------------------- writing
def _write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all (``groupattn._atomic.write_atomic``)."""
    write_atomic(path, text)


def _json_text(data: dict[str, Any]) -> str:
    """The certificate as JSON without NaN or infinity (``groupattn._command_line.json_text``)."""
    return json_text(data)


# ---------------------------------------------------------------------------- run
def _usage(message: str) -> int:
    print(f"groupattn check: error: {one_line(message)}", file=sys.stderr)
    return EXIT_CODES["usage_error"]


def _runtime_error(args: argparse.Namespace, plan: _Plan, err: Exception) -> int:
    """Report a crash in one line (the traceback with ``--debug``); its own exit code."""
    text = str(err).strip().splitlines()
    line = f"{type(err).__name__}: {text[0]}" if text else type(err).__name__
    if args.debug:
        traceback.print_exception(err)
    hint = "" if args.debug else " (--debug shows the traceback)"
    print(f"groupattn check: runtime error: {line}{hint}", file=sys.stderr)
    if plan.json_path is not None:
        data = {"status": "runtime_error", "exit_code": EXIT_CODES["runtime_error"], "error": line}
        with contextlib.suppress(OSError):
            _write_atomic(plan.json_path, _json_text(data))
    return EXIT_CODES["runtime_error"]


def run(args: argparse.Namespace) -> int:
    """Run ``groupattn check`` with parsed arguments; returns the exit code (see [`EXIT_CODES`][groupattn.check.EXIT_CODES])."""
    try:
        plan = _plan(args)
    except (UsageError, BudgetError) as err:
        return _usage(str(err))
    except KeyboardInterrupt:
        print("groupattn check: interrupted", file=sys.stderr)
        return 130
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    try:
        return _execute(args, plan)
    except (UsageError, BudgetError) as err:
        return _usage(str(err))
    except KeyboardInterrupt:
        print("groupattn check: interrupted", file=sys.stderr)
        return 130
    except SystemExit as err:  # the user's code (a factory, a forward) called sys.exit
        return _runtime_error(
            args, plan, RuntimeError(f"the user's code called sys.exit({err.code!r})")
        )
    except Exception as err:
        return _runtime_error(args, plan, err)


def _execute(args: argparse.Namespace, plan: _Plan) -> int:
    from torch import nn

    from ._certificate import Certificate, Status
    from ._certify import certify
    from ._verify import VerificationBudgetError, attach_verification, estimate_verification

    model = plan.build()
    if not isinstance(model, nn.Module):
        raise UsageError(
            f"expected the model factory to return a torch.nn.Module, got {type(model).__name__}"
        )
    generator = torch.Generator().manual_seed(args.seed)
    x = torch.randn(*plan.shape, generator=generator)
    try:  # one forward pass: the model's own check of the input, and the cost of the numerical check
        cost = estimate_verification(model, x, plan.group)
    except GroupattnError as err:  # a shape, dtype or configuration error of the model's own check
        raise UsageError(
            f"the model rejects --input-shape {','.join(map(str, plan.shape))}: {err}"
        ) from err
    if args.verify:
        if cost.total_s > args.verify_budget:
            raise UsageError(
                f"the numerical check would take {cost.describe()}, over --verify-budget {args.verify_budget:g} s: "
                "pass --no-verify, a smaller --input-shape, or a larger --verify-budget"
            )
    try:
        cert = certify(model, x, plan.group, input_type=plan.input_type)
    except (
        GroupError
    ) as err:  # the checker does not handle this input: unverified, never a crash or a pass
        cert = Certificate(
            Status.UNVERIFIED,
            plan.group,
            plan.input_type,
            reason=f"the checker cannot check it: {err}",
        )
    if args.verify:
        try:
            cert = attach_verification(cert, model, x, None, budget_s=args.verify_budget)
        except VerificationBudgetError as err:
            raise UsageError(f"{err} (pass --no-verify or a larger --verify-budget)") from err
    status = check_status(cert)
    code = EXIT_CODES[status]
    try:
        from rich.console import Console

        # on a terminal the table fits its width; piped into a log it is never cut
        Console(width=None if sys.stdout.isatty() else 1000).print(cert.to_rich())
        print(cert.summary())
    except ImportError:  # pragma: no cover
        print(cert.to_text())
    lines = getattr(cert.verification, "lines", None)
    if callable(lines):
        for line in lines():
            print(f"numerical check: {line}")
    if not args.verify:
        print("numerical check: skipped (--no-verify)")
    print(f"status: {status} (exit {code}): {_MEANINGS[status]}")
    if plan.json_path is not None:
        data = cert.to_json()
        data.update(
            {"status": status, "exit_code": code, "verified": cert.verification is not None}
        )
        _write_atomic(plan.json_path, _json_text(data))
    if plan.graph_path is not None:
        if plan.graph_path.suffix.lower() in (".dot", ".gv"):
            _write_atomic(plan.graph_path, cert.to_dot())
        else:
            cert.save_graph(plan.graph_path)
    return code
