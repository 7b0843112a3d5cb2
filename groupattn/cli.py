"""The ``groupattn`` command: ``groupattn groups [--check]`` and the other subcommands."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import NoReturn

__all__ = ["main"]

#: Modules that each provide ``register(subparsers)`` adding one subcommand.
COMMAND_MODULES: list[str] = [
    "groupattn.training._command",
    "groupattn.training._demo",
    "groupattn.check._command",
    "groupattn.bench._command",
]


def _cmd_groups(args: argparse.Namespace) -> int:
    from .groups import builtin_groups, check_group_axioms

    rows = []
    ok = True
    for key, g in builtin_groups().items():
        order = g.order()
        gens = ", ".join(repr(x.value) for x in g.generators())
        if len(gens) > 60:
            gens = gens[:57] + "..."
        row = [key, g.name, "infinite" if order is None else str(order), gens]
        if args.check:
            report = check_group_axioms(g)
            ok &= report.ok
            row.append(
                f"ok (action on {report.action})"
                if report.ok
                else "FAILED: " + "; ".join(report.failures[:3])
            )
        rows.append(row)
    header = ["key", "name", "order", "generators"] + (
        ["axioms and action laws"] if args.check else []
    )
    widths = [max(len(r[i]) for r in [*rows, header]) for i in range(len(header))]
    print("  ".join(h.ljust(w) for h, w in zip(header, widths)))
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)))
    if args.check:
        print("all group axioms and action laws hold" if ok else "some checks FAILED")
    return 0 if ok else 1


_EPILOG = """exit codes, common to every subcommand (each one's --help lists its own as well):
  0    success
  1    a crash: one line on stderr (--debug prints the traceback)
  2    a user error, found before any work: one line naming what was expected and what was given
  130  interrupted (Ctrl-C); no partial output file is left behind
  3-5  groupattn check: broken, unverified, disagreement; groupattn train/demo: 3 = a missing optional extra

also runs as `python -m groupattn`."""


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("groupattn")
    except PackageNotFoundError:  # pragma: no cover - a source tree that is not installed
        from . import __version__

        return str(__version__)


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line on stderr (exit code 2, no usage dump)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand registered.

    Bad arguments exit with code 2 and one line on stderr; ``groupattn check`` documents
    its other exit codes in ``groupattn check --help``, ``groupattn train`` and
    ``groupattn demo`` theirs in their ``--help`` (3: ``--data`` needs an optional extra
    that is not installed).
    """
    parser = _Parser(
        prog="groupattn",
        description=__doc__,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"groupattn {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    p = sub.add_parser("groups", help="list the built-in groups; --check verifies their axioms")
    p.add_argument("--check", action="store_true", help="verify group axioms and action laws")
    p.set_defaults(func=_cmd_groups)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``groupattn`` command; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        print(f"groupattn {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
