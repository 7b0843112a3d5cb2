"""What every ``groupattn`` command shares: one-line errors, checks before work, output fit for logs.

- **Errors.** A user error prints one line — ``groupattn <command>: error: <what was
  expected, what was given>`` — and exits with code 2 (3 where a command documents a
  missing optional extra); a crash prints one line, ``groupattn <command>: runtime
  error: …``, and exits with code 1; Ctrl-C exits with 130. ``--debug`` adds the
  traceback. Never a bare traceback.
- **Before work.** Output paths are checked writable (``check_output_path``),
  sizes against ``--max-memory`` (``groupattn._resources``), threads, devices and
  names are validated before data are loaded or a model is trained.
- **Logs.** Progress bars only on a terminal; JSON never holds NaN or infinity
  (``json_text``: ``null`` plus a ``"nonfinite"`` list naming the fields).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ._atomic import check_distinct_outputs as _check_distinct_outputs
from ._atomic import check_output_path as _check_output_path
from ._errors import GroupattnError
from ._resources import default_max_memory, format_bytes, parse_size

__all__ = [
    "EXIT_CRASH",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "UsageError",
    "add_common_arguments",
    "check_device",
    "check_distinct_outputs",
    "check_output_path",
    "json_text",
    "one_line",
    "run_command",
    "seed_value",
]

EXIT_OK = 0
EXIT_CRASH = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class UsageError(GroupattnError, ValueError):
    """A bad command-line argument: one line on stderr, exit code 2, no traceback."""


def one_line(text: str) -> str:
    """``text`` on one line: whitespace runs become one space, other control characters
    (terminal escapes in a file name) are shown escaped, and a C++ backtrace is cut off."""
    text = str(text).split("Exception raised from ")[0]
    text = "".join(c if c.isprintable() or c.isspace() else repr(c)[1:-1] for c in text)
    return " ".join(text.split())


def check_output_path(path: str | None, option: str) -> Path | None:
    """``None`` for ``None``; else ``path`` after checking it can be written (``UsageError`` if not)."""
    if path is None:
        return None
    try:
        return _check_output_path(path, option)
    except OSError as error:
        raise UsageError(error.strerror or str(error)) from None


def check_distinct_outputs(
    outputs: dict[str, str | None], inputs: dict[str, str | None] | None = None
) -> None:
    """Refuse two output options naming one file, or an output inside an input (``UsageError``)."""
    try:
        _check_distinct_outputs(dict(outputs), dict(inputs or {}))
    except OSError as error:
        raise UsageError(error.strerror or str(error)) from None


def check_device(device: str) -> None:
    """Refuse ``--device cuda`` on a machine without CUDA, before any work."""
    if device == "cuda" and not torch.cuda.is_available():
        raise UsageError(
            "expected --device cpu on this machine (PyTorch sees no CUDA device), got cuda"
        )


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


#: ``--threads`` beyond this many per CPU core is refused (PyTorch crashes far beyond it).
MAX_THREADS_PER_CORE = 4


def _thread_count(text: str) -> int:
    value = _positive_int(text)
    cores = os.cpu_count() or 1
    if value > MAX_THREADS_PER_CORE * cores:
        raise argparse.ArgumentTypeError(
            f"expected at most {MAX_THREADS_PER_CORE * cores} threads ({MAX_THREADS_PER_CORE} per core of {cores}), "
            f"got {text!r}"
        )
    return value


def seed_value(text: str) -> int:
    """An ``argparse`` type for ``--seed``: an integer in ``[0, 2**63)``."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer seed, got {text!r}") from None
    if not 0 <= value < 2**63:
        raise argparse.ArgumentTypeError(f"expected a seed in [0, 2**63), got {text!r}")
    return value


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def add_common_arguments(
    parser: argparse.ArgumentParser, threads_default: int | None = None
) -> None:
    """Add ``--threads``, ``--max-memory`` and ``--debug`` to a subcommand."""
    parser.add_argument(
        "--threads",
        type=_thread_count,
        default=threads_default,
        metavar="N",
        help="torch.set_num_threads for the run (default: "
        + ("PyTorch's" if threads_default is None else str(threads_default))
        + ")",
    )
    parser.add_argument(
        "--max-memory",
        type=_size,
        default=default_max_memory(),
        metavar="SIZE",
        help="refuse, before any work, a run estimated to need more memory (e.g. 4G; default: half of "
        f"this machine's memory, {format_bytes(default_max_memory())})",
    )
    parser.add_argument("--debug", action="store_true", help="print the traceback of an error")


def _finite(value: Any, path: str, found: list[str]) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        found.append(path or "(root)")
        return None
    if isinstance(value, dict):
        return {k: _finite(v, f"{path}.{k}" if path else str(k), found) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v, f"{path}[{i}]", found) for i, v in enumerate(value)]
    return value


def json_text(payload: dict[str, Any]) -> str:
    """``payload`` as JSON that every parser reads: NaN and infinities become ``null``.

    The fields that held them are listed under ``"nonfinite"`` (absent when there are
    none), so a reader can tell a missing value from a diverged one.
    """
    found: list[str] = []
    clean = _finite(payload, "", found)
    if found:
        clean["nonfinite"] = found
    return json.dumps(clean, indent=2, allow_nan=False, default=str) + "\n"


def _is_out_of_memory(error: BaseException) -> bool:
    text = str(error).lower()
    return (
        isinstance(error, MemoryError) or "can't allocate memory" in text or "out of memory" in text
    )


def run_command(
    command: str,
    func: Callable[[argparse.Namespace], int],
    args: argparse.Namespace,
    usage_errors: tuple[type[BaseException], ...] = (),
    codes: dict[type[BaseException], int] | None = None,
) -> int:
    """Run a subcommand; turn every exception into one line on stderr and an exit code.

    Parameters
    ----------
    command
        The subcommand's name, for the message.
    func
        The subcommand; returns its exit code.
    args
        Parsed arguments (``args.debug`` prints tracebacks).
    usage_errors
        More exception types that are the user's mistake (exit 2), beside
        [`GroupattnError`][groupattn.GroupattnError] and file-system errors.
    codes
        Exit codes of particular exception types (e.g. a missing extra: 3).
    """
    debug = bool(getattr(args, "debug", False))
    try:
        return int(func(args))
    except KeyboardInterrupt:
        print(f"groupattn {command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as error:
        if debug:
            traceback.print_exception(error)
        for kind, code in (codes or {}).items():
            if isinstance(error, kind):
                print(f"groupattn {command}: error: {one_line(str(error))}", file=sys.stderr)
                return code
        if isinstance(error, (GroupattnError, OSError, *usage_errors)) and not _is_out_of_memory(
            error
        ):
            print(f"groupattn {command}: error: {one_line(str(error))}", file=sys.stderr)
            return EXIT_USAGE
        hint = "" if debug else " (--debug shows the traceback)"
        if _is_out_of_memory(error):
            text = f"out of memory: {one_line(str(error))[:200]}; lower --batch-size, the input or the model size"
        else:
            text = f"{type(error).__name__}: {(one_line(str(error)) or '(no message)')[:300]}"
        print(f"groupattn {command}: runtime error: {text}{hint}", file=sys.stderr)
        return EXIT_CRASH
